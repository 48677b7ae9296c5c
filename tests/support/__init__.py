"""Test support: the end-to-end control plane and its pytest plugin."""
