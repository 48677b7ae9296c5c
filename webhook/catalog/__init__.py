"""The TPU catalog: the data every rule checks against."""

from webhook.catalog.load import CatalogError, load_catalog
from webhook.catalog.tpu import Accelerator, Catalog, MachineType, Port, SliceShape

__all__ = [
    "Accelerator",
    "Catalog",
    "CatalogError",
    "MachineType",
    "Port",
    "SliceShape",
    "load_catalog",
]
