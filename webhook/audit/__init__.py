"""`tpu-webhook audit`: the TPU workloads stored in a cluster, decided as the webhook would
decide them today (verdicts.py, pure), listed from the API (collect.py), and written as
PolicyReports (report.py: their bodies, pure; publish.py: the writes)."""
