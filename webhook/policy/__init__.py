"""Pure admission policy over plain dicts: no web, no Kubernetes client, no settings."""
