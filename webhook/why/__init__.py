"""`kubectl tpu why NAME`: why a TPU workload does not run, from the objects fetched (pure).

names.py reads NAME (`pod/x`, `jobset/x`...) and says how to find the workload's Pods;
facts.py reads the conditions, container states and Events a user would look at;
explain.py joins them with the webhook's view and says why it does not run and what to change.
"""
