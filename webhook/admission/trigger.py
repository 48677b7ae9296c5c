"""What makes an object a TPU workload, for the two filters in front of the policy.

A pod spec is a TPU workload when its nodeSelector, or a term of its required node affinity,
names a TPU key, or one of its containers (init containers included) requests or limits a TPU
resource: the policy's own test (read_tpu_spec).
The API server's filter (the matchConditions CEL, webhook.registration) and the byte pre-filter
of the server (`may_be_tpu`) are built from these names; tests/unit/test_trigger.py keeps the
three in agreement.
"""

from __future__ import annotations

import os
import re

from webhook.catalog.tpu import ACCELERATOR_LABEL, TOPOLOGY_LABEL, TPU_RESOURCE
from webhook.policy.podspec import AFFINITY_TERMS

__all__ = ["AFFINITY_TERMS", "CONTAINER_LISTS", "TPU_MARKERS", "TPU_RESOURCES", "TPU_SELECTOR_KEYS"]

TPU_SELECTOR_KEYS = (ACCELERATOR_LABEL, TOPOLOGY_LABEL)  # in nodeSelector or AFFINITY_TERMS
TPU_RESOURCES = (TPU_RESOURCE,)
CONTAINER_LISTS = ("containers", "initContainers")

# The API server serialises objects with Go's encoding/json, which escapes only <, >, &, U+2028,
# U+2029 and control characters: each key appears literally in the body of a review whose object
# has it. The selector keys are scanned for by the common prefix of their names (`gke-tpu-`):
# markers that all start with `g` let the regex skip from one `g` of the body to the next.
_NAMES = [key.rpartition("/")[2] for key in TPU_SELECTOR_KEYS]
TPU_MARKERS = (
    *(resource.encode() for resource in TPU_RESOURCES),
    os.path.commonprefix(_NAMES).encode(),  # noqa: RUF071 - a common prefix of strings, not paths
)
_MARKER = re.compile(b"|".join(re.escape(marker) for marker in TPU_MARKERS))


def may_be_tpu(body: bytes) -> bool:
    """Whether a TPU marker appears anywhere in the body (one regex scan)."""
    return _MARKER.search(body) is not None
