"""Tools for a source checkout, not shipped in the wheel: the local control plane the e2e suite
and `make run` share (controlplane.py: the Go tools of tools.py, the certificates of pki.py, the
command lines of components.py, the processes of processes.py), the real operators
(operators.py; their builds, CRDs and webhooks in operator_*.py), the chart's url-mode webhook
configurations rendered by the real helm (chart.py), and `make run` itself (run.py, with
run_builds.py and run_walkthrough.py)."""
