"""Serving: the HTTPS boundary between the API server and the admission decision."""
