"""Route a review to the policy: which workload it is, and which decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from webhook.admission.review import Request
from webhook.catalog.tpu import Catalog
from webhook.policy import decide
from webhook.policy.cluster import EMPTY, ClusterView
from webhook.policy.decide import ALLOW, Options, Verdict
from webhook.policy.exemptions import NO_EXEMPTIONS
from webhook.policy.workloads import workload_for

#: the two admission endpoints: /mutate patches what a workload needs, /validate refuses or warns
Endpoint = Literal["mutate", "validate"]


class Cluster:
    """The cluster view decisions read: one snapshot, replaced whole (never changed in place)
    by whoever reads the cluster (webhook/cluster/), so a decision never sees half of one."""

    __slots__ = ("view",)

    def __init__(self, view: ClusterView = EMPTY) -> None:
        self.view = view


@dataclass(frozen=True, slots=True)
class Policy:
    """Everything a decision needs, built once at start-up."""

    catalog: Catalog
    options: Options = field(default_factory=Options)
    # Namespaces whose objects may use the opt-outs (`options.exemptions`); None: every one.
    exemption_namespaces: frozenset[str] | None = None
    cluster: Cluster = field(default_factory=Cluster)
    # `options` without any opt-out: for objects of the other namespaces.
    _strict: Options = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_strict", replace(self.options, exemptions=NO_EXEMPTIONS))

    def options_in(self, namespace: str) -> Options:
        """The options for an object of `namespace`."""
        if self.exemption_namespaces is None or namespace in self.exemption_namespaces:
            return self.options
        return self._strict


def review_request(request: Request, endpoint: Endpoint, policy: Policy) -> Verdict:
    """The verdict for one admission request; DELETE, CONNECT, unknown kinds and an object left
    undecoded (no dict: parse_review_prefiltered) are allowed."""
    workload = workload_for(request.kind.group, request.kind.kind)
    obj = request.object
    if (
        workload is None
        or not isinstance(obj, dict)
        or request.operation not in ("CREATE", "UPDATE")
    ):
        return ALLOW
    options = policy.options_in(request.namespace)
    if endpoint == "mutate":
        if request.operation != "CREATE":
            return ALLOW  # pod templates of Jobs and Pods' specs are immutable after create
        return decide.mutate(obj, workload, policy.catalog, options, policy.cluster.view)
    old: Mapping[str, Any] | None = None
    if request.operation == "UPDATE" and isinstance(request.old_object, dict):
        old = request.old_object
    return decide.validate(obj, workload, policy.catalog, old, options, policy.cluster.view)
