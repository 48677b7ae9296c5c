"""The benchmark of `tpu-webhook serve` against a bare ASGI ceiling: `python -m bench`."""
