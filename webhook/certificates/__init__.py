"""Certificates: creating them (create.py), the selfManaged mode's renewal decided (rotation.py,
pure) and done (selfmanaged.py, the Secret and the caBundles through kubeapi.py, the API client).

Nothing here imports webhook.serving; `kubernetes` is imported by kubeapi.py alone, and only the
selfManaged mode and the cluster watcher import that (lazily, from webhook.serving.server).
"""
