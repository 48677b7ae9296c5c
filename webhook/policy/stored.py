"""What an object already stored in the cluster lacks that tpu-webhook adds at create: findings,
not patches (`tpu-webhook audit`).

A stored object was created with the webhook (mutated, then validated) or without it (before it
was installed, in warn mode, while it was down with `failurePolicy: Ignore`). What the mutating
decision would still add to it is reported: the worker variables and the multislice variables
(JAX and the slices find each other from them) and the subdomain (the hosts' names). The TPU
container ports it adds are declarative, and a stored `google.com/tpu` always has its limit (the
API server requires one for an extended resource): those patches are not findings.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.catalog.tpu import TPU_WORKER_HOSTNAMES, TPU_WORKER_ID
from webhook.policy.mutate import PatchOp
from webhook.policy.paths import from_pointer
from webhook.policy.violations import Violation, required

CODE = "tpu.worker-env-missing"


def missing(patch: Iterable[PatchOp]) -> list[Violation]:
    """The worker variables and the subdomain a mutating patch would add, as warnings."""
    found = []
    for op in patch:
        path = str(op.get("path", ""))
        value = op.get("value")
        if path.endswith("/subdomain"):
            detail = (
                f"the Pods' hostnames need a subdomain ({value}) and a headless Service of that "
                "name; tpu-webhook sets it at create, so this object was created without it: set it"
            )
            found.append(required(CODE, from_pointer(path), detail, advisory=True))
            continue
        if not path.rstrip("/-").endswith("/env"):
            continue  # ports and limits: see the module docstring
        entries = value if isinstance(value, list) else [value]
        names = [str(e.get("name")) for e in entries if isinstance(e, dict)]
        if names:
            found.append(_env(path.removesuffix("/-"), names))
    return found


def _env(path: str, names: list[str]) -> Violation:
    why = (
        "JAX finds its place in the slice from them"
        if {TPU_WORKER_ID, TPU_WORKER_HOSTNAMES} & set(names)
        else "the slices find each other from them"
    )
    detail = (
        f"{', '.join(names)} not set ({why}); tpu-webhook adds them at create, so this object was "
        "created without them (GKE's own injection may still set them on the Pods it starts): "
        "set them, or create it again with tpu-webhook on"
    )
    return required(CODE, from_pointer(path), detail, advisory=True)
