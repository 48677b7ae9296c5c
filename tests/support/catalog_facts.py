"""Facts tests read from the shipped catalog rather than pin: adding a TPU generation touches
the catalog, its cases and the CHANGELOG, and no test."""

from __future__ import annotations

from webhook.catalog.load import load_catalog

ACCELERATORS = len(load_catalog().accelerators)  # what /readyz reports as "catalog"
READY = {"status": "ok", "certificate": True, "catalog": ACCELERATORS}  # /readyz of a ready server
