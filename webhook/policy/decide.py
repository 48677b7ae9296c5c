"""The two decisions the webhook makes about an object: what to add, and what is wrong."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from webhook.catalog.tpu import TPU_RESOURCE, Catalog, SliceShape
from webhook.policy import autopilot as autopilot_rules
from webhook.policy import (
    capacity,
    claims,
    compute_classes,
    offered,
    partial,
    slice_rules,
    spec_rules,
)
from webhook.policy.cluster import EMPTY, ClusterView
from webhook.policy.context import (
    Context,
    Owner,
    controlling_owner,
    opted_out,
    read_context,
    skips_checks,
)
from webhook.policy.exemptions import EXEMPTIONS, Exemptions
from webhook.policy.mutate import (
    PatchOp,
    add_missing_env,
    add_missing_ports,
    copy_missing_limits,
    worker_env,
)
from webhook.policy.podspec import TpuSpec, read_tpu_spec, slice_shape
from webhook.policy.templates import Site, dig
from webhook.policy.violations import Violation
from webhook.policy.workloads import Workload, owner_role, workload_for


@dataclass(frozen=True, slots=True)
class Options:
    # Resources whose missing limit (or request) is copied from the other on TPU containers.
    # google.com/tpu only by default: a cpu or memory limit changes the Pod's QoS class and
    # throttles its CPU, and authors leave them out on purpose.
    copy_resources: tuple[str, ...] = (TPU_RESOURCE,)
    # Write TPU_WORKER_ID / TPU_WORKER_HOSTNAMES (and a subdomain) where they are missing.
    # False: only check what is set, for clusters where GKE's own injection is preferred.
    inject_worker_env: bool = True
    # Write MEGASCALE_NUM_SLICES / _SLICE_ID / _COORDINATOR_ADDRESS into a JobSet's TPU
    # replicatedJobs of several slices where missing (opt-in: GKE may inject them itself).
    inject_megascale: bool = False
    # The opt-outs a user may write on an object (chart `webhook.exemptions`).
    exemptions: Exemptions = EXEMPTIONS
    # The GKE mode whose admission rules apply too: "standard", "autopilot", or "detect" (the
    # cluster view says: it serves Autopilot's API).
    profile: str = "standard"


class Verdict(
    NamedTuple
):  # one per review: a NamedTuple is built in half a frozen dataclass's time
    denials: tuple[Violation, ...] = ()
    warnings: tuple[Violation, ...] = ()
    patch: tuple[PatchOp, ...] = ()

    @property
    def codes(self) -> list[str]:
        denials, warnings = self.denials, self.warnings
        if not warnings:
            if not denials:
                return []
            if len(denials) == 1:
                return [denials[0].code]  # most denials: no set, no sort
        elif not denials and len(warnings) == 1:
            return [warnings[0].code]
        return sorted({v.code for v in (*denials, *warnings)})


ALLOW = Verdict()
DEFAULT_OPTIONS = Options()


def tpu_sites(obj: Mapping[str, Any], workload: Workload) -> list[tuple[Site, TpuSpec]]:
    """The pod templates of the object that are TPU workloads; [] for anything else."""
    found = []
    for template in workload.templates:
        if template.in_list:
            for site in workload.sites_of(obj, template):
                tpu = read_tpu_spec(
                    site.spec, site.spec_path, site.spec_pointer, site.metadata, site.meta_path
                )
                if tpu is not None:
                    found.append((site, tpu))
            continue
        body = dig(obj, template.path) if template.path else obj
        if not isinstance(body, dict):
            continue
        tpu = read_tpu_spec(
            body.get("spec"),
            template.spec_path,
            template.spec_pointer,
            body.get("metadata"),
            template.meta_path,
        )
        if tpu is not None:  # the Site only for a TPU template: most reviews build none
            found.append((template.site(body), tpu))
    return found


def claims_maybe(sites: list[tuple[Site, TpuSpec]]) -> bool:
    """Whether a site may use a TPU claim: it asks no chips and names resource claims."""
    for _, tpu in sites:  # noqa: SIM110 - any() over a generator builds a frame
        if not tpu.chips and tpu.spec.get("resourceClaims"):
            return True
    return False


def with_claims(
    obj: Mapping[str, Any],
    sites: list[tuple[Site, TpuSpec]],
    catalog: Catalog,
    cluster: ClusterView,
) -> list[tuple[Site, TpuSpec]]:
    """The sites, those that use a TPU claim (DRA) read as TPU specs of its shape; sites that
    neither ask chips nor select TPU nodes nor use one are dropped."""
    driver = catalog.dra.driver if catalog.dra else ""
    namespace = _namespace(obj)
    kept = []
    for site, tpu in sites:
        if not tpu.chips and tpu.spec.get("resourceClaims"):
            for used, kind, name in claims.pod_claims(tpu.spec):
                claim = cluster.claim(kind, namespace, name)
                shape = claims.shape_of(claim, driver, catalog) if claim else None
                if shape is not None:
                    tpu = claims.with_claim(tpu, used, shape, catalog)
                    break
        if tpu.chips or tpu.accelerator_value is not None or tpu.topology_value is not None:
            kept.append((site, tpu))  # TPU by its selectors, chips, or a TPU claim
    return kept


def mutate(
    obj: Mapping[str, Any],
    workload: Workload,
    catalog: Catalog,
    options: Options,
    cluster: ClusterView = EMPTY,
) -> Verdict:
    sites = tpu_sites(obj, workload)
    if sites and claims_maybe(sites):
        sites = with_claims(obj, sites, catalog, cluster)
    if not sites:
        return ALLOW
    if opted_out(obj, options.exemptions):
        return ALLOW
    ops: list[PatchOp] = []
    warnings: list[Violation] = []
    owner: Owner | None = None  # its controlling owner, read only for a multi-host slice
    owner_read = False
    for site, tpu in sites:
        ops += copy_missing_limits(tpu, options.copy_resources)
        ops += add_missing_ports(tpu, catalog.ports)
        if options.inject_megascale and workload.megascale is not None and tpu.chips:
            ops += add_missing_env(tpu, workload.megascale(obj, site))
        if not options.inject_worker_env or len(tpu.app_chips) != 1:
            continue  # several TPU containers per host: projects number them differently
        shape = (
            compute_classes.shape(tpu, cluster, catalog)
            if compute_classes.needs_class(tpu)
            else slice_shape(tpu, catalog)
        )
        if shape is not None and shape.multi_host:
            if not owner_read:
                meta = obj.get("metadata")
                owner = controlling_owner(meta if isinstance(meta, dict) else {}, owner_role)
                owner_read = True
            if site.template.hosts is not None:
                env, extra_ops, found = worker_env(obj, site, tpu, shape, owner)
            else:  # a Pod: numbered as its owner's Pods are, if the owner's entry says how
                made_by = workload_for(owner.group, owner.kind) if owner else None
                if made_by is None or made_by.child_pod_env is None:
                    continue
                env, extra_ops, found = made_by.child_pod_env(obj, tpu, shape)
            ops += extra_ops + add_missing_env(tpu, env)
            warnings += found
    return Verdict(warnings=tuple(warnings), patch=tuple(ops))


def validate(
    obj: Mapping[str, Any],
    workload: Workload,
    catalog: Catalog,
    old: Mapping[str, Any] | None = None,
    options: Options = DEFAULT_OPTIONS,
    cluster: ClusterView = EMPTY,
) -> Verdict:
    """Every violation; on UPDATE (`old` given) only those the update introduces deny.

    An UPDATE that leaves `spec` as it was (ownerReferences, finalizers, labels, annotations:
    the garbage collector orphaning children, the Job controller removing its finalizers) is
    never refused. Otherwise the old object is judged under the new one's metadata (its owner,
    its opt-outs): an UPDATE that only changes who owns an object is no new violation."""
    if old is not None and obj.get("spec") == old.get("spec"):
        return ALLOW
    if workload.claim:
        return check_claim(obj, catalog, cluster, options.exemptions)
    context = Context(obj, owner_role, options.exemptions)
    autopilot = options.profile == "autopilot" or (
        options.profile == "detect" and cluster.autopilot
    )
    found = violations(obj, workload, catalog, context, options.exemptions, cluster, autopilot)
    if not found:
        return ALLOW
    if old is not None:
        as_now = Context(old, owner_role, options.exemptions).owned_as(context)
        before = {
            (v.code, str(v.field))
            for v in violations(
                old, workload, catalog, as_now, options.exemptions, cluster, autopilot
            )
        }
        found = [v for v in found if v.advisory or (v.code, str(v.field)) not in before]
    denials: list[Violation] = []
    warnings: list[Violation] = []
    for v in found:
        (warnings if v.advisory else denials).append(v)
    return Verdict(denials=tuple(denials), warnings=tuple(warnings))


def check_claim(
    obj: Mapping[str, Any], catalog: Catalog, cluster: ClusterView, exemptions: Exemptions
) -> Verdict:
    """A DRA claim or claim template for TPUs: what GKE's TPU driver could never allocate."""
    dra = catalog.dra
    if dra is None or opted_out(obj, exemptions):
        return ALLOW
    claim = claims.claim_of(obj, dra.device_classes | cluster.tpu_device_classes)
    if claim is None or not claim.requests:
        return ALLOW
    found = claims.check(claim, dra.driver, dra.attributes, catalog)
    return Verdict(
        denials=tuple(v for v in found if not v.advisory),
        warnings=tuple(v for v in found if v.advisory),
    )


def violations(
    obj: Mapping[str, Any],
    workload: Workload,
    catalog: Catalog,
    context: Context | None = None,
    exemptions: Exemptions = EXEMPTIONS,
    cluster: ClusterView = EMPTY,
    autopilot: bool = False,
) -> list[Violation]:
    sites = tpu_sites(obj, workload)
    if sites and claims_maybe(sites):
        sites = with_claims(obj, sites, catalog, cluster)
    if not sites and (workload.templates or workload.check is None):
        return []  # an owner without pod templates (TrainJob, PathwaysJob) is read by its check
    if context is None:
        context = read_context(obj, owner_role, exemptions)
    if context.opted_out or context.skip_checks:
        return []
    found: list[Violation] = partial.check_templates_read(obj, workload)
    for _, tpu in sites:  # not any() over a generator: it builds a frame per review
        if tpu.compute_class is not None and compute_classes.needs_class(tpu):

            def of(shaped: list[tuple[Site, TpuSpec]]) -> list[Violation]:
                return findings(
                    obj, workload, shaped, catalog, context, exemptions, cluster, autopilot
                )

            return found + compute_classes.check(sites, cluster, catalog, of)
    return found + findings(obj, workload, sites, catalog, context, exemptions, cluster, autopilot)


def findings(
    obj: Mapping[str, Any],
    workload: Workload,
    sites: list[tuple[Site, TpuSpec]],
    catalog: Catalog,
    context: Context,
    exemptions: Exemptions,
    cluster: ClusterView = EMPTY,
    autopilot: bool = False,
) -> list[Violation]:
    """Every finding on the object's TPU pod templates `sites`, and on the object as a whole;
    with `autopilot`, what GKE Autopilot refuses too."""
    found: list[Violation] = []
    as_written: list[Violation] = []  # what belongs to the object a user wrote
    child = context.child
    for site, tpu in sites:
        if exemptions.skip_annotation and skips_checks(tpu.annotations, exemptions):
            continue
        found += partial.check_pod_spec_read(tpu)
        if not tpu.chips:  # a Pod on TPU nodes that uses no chips: no host of a slice
            found += [chipless(v) for v in check_pod_spec(tpu, catalog, context.deferred)]
            continue
        found += check_pod_spec(tpu, catalog, context.deferred)
        found += claims.check_toleration(tpu)
        if not child and cluster.offered.known:
            as_written += offered.check(tpu, cluster.offered, _namespace(obj), catalog)
        if autopilot:
            found += autopilot_rules.check(tpu, catalog)
        shape = slice_shape(tpu, catalog)
        if shape is None:
            continue
        found += capacity.check_node_capacity(tpu, shape)
        if shape.multi_host:
            if child:
                found += slice_rules.check_worker_env(tpu, shape, advisory=True)
            else:
                as_written += check_slice(obj, workload.kind, site, tpu, shape)
        elif not child and site.template.hosts and site.template.hosts.counts_single_host:
            as_written += slice_rules.check_host_counts(obj, site, shape)
    if not child and workload.check is not None:
        as_written += workload.check(obj, sites, catalog, exemptions, cluster)
    if context.owner is not None and as_written:  # a custom owner the table does not know
        as_written = [unknown_owner(v, context.owner.describe()) for v in as_written]
    return found + as_written


def _namespace(obj: Mapping[str, Any]) -> str:
    """The object's namespace (the API server sets it before admission)."""
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return namespace if isinstance(namespace, str) and namespace else "default"


def chipless(found: Violation) -> Violation:
    """A finding on a Pod that selects TPU nodes but requests no chips (a network or monitoring
    agent, GKE's own TPU DaemonSets): GKE runs such Pods, so it is said, never refused."""
    return found if found.advisory else found._replace(advisory=True)


def unknown_owner(found: Violation, owner: str) -> Violation:
    """A finding on the slice of an object made by a controller tpu-webhook does not know: it
    may well number the hosts its own way, so it is said, never refused."""
    if found.advisory:
        return found
    return Violation(
        found.code,
        found.field,
        found.error,
        f"{found.detail} (a warning: the object is made by {owner}, a kind tpu-webhook does "
        "not know, which may form its slice its own way)",
        found.value,
        advisory=True,
    )


def check_pod_spec(tpu: TpuSpec, catalog: Catalog, deferred: str | None) -> list[Violation]:
    """What holds for any TPU pod spec, whoever made it."""
    return [
        *spec_rules.check_accelerator(tpu, catalog, deferred),
        *spec_rules.check_topology(tpu, catalog, deferred),
        *spec_rules.check_chip_counts(tpu, catalog),
        *spec_rules.check_requests_equal_limits(tpu),
        *spec_rules.check_single_tpu_container(tpu, catalog),
        *capacity.check_quantities(tpu),
    ]


def check_slice(
    obj: Mapping[str, Any], kind: str, site: Site, tpu: TpuSpec, shape: SliceShape
) -> list[Violation]:
    """How the object forms its slice: decided where a user wrote it, not at a controller's
    child (its owner numbers the hosts)."""
    return [
        *slice_rules.check_workload_can_form_slice(kind, site, tpu, shape),
        *slice_rules.check_indexed(obj, site, shape),
        *slice_rules.check_host_counts(obj, site, shape),
        *slice_rules.check_worker_env(tpu, shape),
        *slice_rules.check_hostname_length(obj, site, shape),
        *slice_rules.check_retries(obj, site, tpu, shape),
        *slice_rules.check_host_network_dns(tpu, shape),
        *slice_rules.check_kueue_slices(obj, site, tpu, shape),
    ]
