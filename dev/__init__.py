"""Tools for a source checkout, not shipped in the wheel: the local control plane the e2e suite
and `make run` share (controlplane.py), the chart's url-mode webhook configurations rendered by
the real helm (chart.py), and `make run` itself (run.py)."""
