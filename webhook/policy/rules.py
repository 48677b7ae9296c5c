"""Every rule code tpu-webhook can emit, defined once: what it checks, why it matters on GKE, how
to fix it, and an example of its message. The README's rules table, `tpu-webhook rules` and the
tests' list of codes come from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from webhook.policy.bounds import MAX_CONTAINERS, MAX_ENV, MAX_POD_TEMPLATES


class Severity(Enum):
    DENY = "denies"
    WARN = "warns"
    DENY_OR_WARN = "denies or warns"


@dataclass(frozen=True, slots=True)
class Rule:
    code: str
    severity: Severity
    checks: str  # one line: what it checks (the README table)
    when_warning: str  # where a DENY_OR_WARN rule only warns; "" otherwise
    why: str  # what goes wrong on GKE without it
    fix: str
    example: str  # a message as `kubectl create` prints it after "denied the request: "


RULES: tuple[Rule, ...] = (
    Rule(
        "tpu.accelerator-missing",
        Severity.DENY_OR_WARN,
        "`google.com/tpu` chips requested without `cloud.google.com/gke-tpu-accelerator` "
        "(a nodeSelector or a required node-affinity term)",
        "while Kueue holds the workload (queued or suspended): its ResourceFlavor adds the "
        "node labels when it admits it, and the check runs then; on an object a known "
        "controller made (its owner was decided where it was written)",
        "GKE schedules TPU Pods by the accelerator label; without it the Pod waits Pending "
        "forever, or GKE's own TPU check refuses it",
        "set the nodeSelector `cloud.google.com/gke-tpu-accelerator` to the TPU type",
        "spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Required value: "
        "spec.containers[0] requests 4 google.com/tpu chips; set the TPU type to run them on, "
        "one of tpu-v5-lite-podslice, tpu-v6e-slice",
    ),
    Rule(
        "tpu.topology-missing",
        Severity.DENY_OR_WARN,
        "an accelerator without `cloud.google.com/gke-tpu-topology` and without the slice "
        "annotation `cloud.google.com/gke-tpu-slice-topology` (dynamic slicing)",
        "while Kueue holds the workload, or on an object a known controller made; or when "
        "only the slice annotation is set on an accelerator the catalog does not mark for "
        "dynamic slicing",
        "the topology picks the node pool's slice shape; without it the Pod can land on any "
        "slice of that accelerator, and GKE's own TPU check refuses it",
        "set `cloud.google.com/gke-tpu-topology` (or, for a tpu7x super-slice, the Pod "
        "template annotation `cloud.google.com/gke-tpu-slice-topology`)",
        "spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Required value: set it when "
        'cloud.google.com/gke-tpu-accelerator is set (e.g. "2x4")',
    ),
    Rule(
        "tpu.accelerator-unknown",
        Severity.DENY_OR_WARN,
        "an accelerator label that is not in the catalog: a generation name (`tpu-v6e`), a "
        'machine type or a typo of a known label is denied with "did you mean"',
        "for any other unknown label (a newer generation such as `tpu8` may be one a newer "
        "cluster offers): its topologies and chip counts are not checked",
        "no node carries a misspelt label: the Pod waits Pending forever",
        "use the label GKE sets on the node pool (`tpu-webhook explain` lists them), or add a "
        "new accelerator to the catalog with --catalog",
        "spec.nodeSelector[cloud.google.com/gke-tpu-accelerator]: Unsupported value: "
        '"tpu-v6e": unknown; did you mean "tpu-v6e-slice"?',
    ),
    Rule(
        "tpu.topology-invalid",
        Severity.DENY_OR_WARN,
        "a topology the accelerator does not offer; a malformed slice annotation; a sub-slice "
        "(annotation) that does not fit in the node pool's topology (selector)",
        "for a well-formed slice annotation the catalog does not list (its hosts are not checked)",
        "no node pool has that shape: the Pods wait Pending forever, or a sub-slice never fits",
        "pick a topology from the message's list (`tpu-webhook explain <accelerator>`)",
        'spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Unsupported value: "2x3": '
        "tpu-v5-lite-podslice offers 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16",
    ),
    Rule(
        "tpu.chips-per-host",
        Severity.DENY,
        "a `google.com/tpu` count that no host of that accelerator and slice runs (with "
        "several TPU containers sharing a host, where the catalog allows it: their sum)",
        "",
        "a TPU Pod must take all chips of its node: another count never schedules, or leaves "
        "chips idle that no other Pod can use",
        "set requests and limits to the chips per host the message gives",
        "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: "
        "tpu-v5-lite-podslice 2x4 runs 4 or 8 chips per host; set requests and limits to 4 or 8",
    ),
    Rule(
        "tpu.requests-limits-differ",
        Severity.DENY,
        "`google.com/tpu` requests and limits both set and different",
        "",
        "the API server refuses an extended resource whose request and limit differ",
        "set both to the same count",
        "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 8: must equal "
        "requests[google.com/tpu] (4); a Pod runs all chips of its host, set both to the same "
        "count",
    ),
    Rule(
        "tpu.multiple-tpu-containers",
        Severity.DENY,
        "more than one container requests chips, where the catalog does not allow it "
        "(tpu7x allows it)",
        "",
        "the device plugin gives all chips of the host to one container on these TPUs",
        "move the chips to one container",
        "spec.containers[1].resources.limits[google.com/tpu]: Forbidden: only one container "
        "may request google.com/tpu on tpu-v5-lite-podslice (spec.containers[0] requests 4); "
        "move the chips to one container",
    ),
    Rule(
        "tpu.resources-exceed-node",
        Severity.DENY_OR_WARN,
        "cpu or memory requests above the VM's",
        "where the catalog marks the VM's figure unconfirmed",
        "a Pod asking more than its VM has never schedules",
        "request at most what the message gives",
        'spec.containers[0].resources.requests[cpu]: Invalid value: "300": a '
        "ct5lp-hightpu-8t VM (tpu-v5-lite-podslice, 8 chips) has 224 cpu; request at most 224 "
        "or the Pod never schedules",
    ),
    Rule(
        "tpu.multihost-not-indexed",
        Severity.DENY,
        "a multi-host Job that is not `completionMode: Indexed`",
        "",
        "without an index no Pod knows its TPU_WORKER_ID: JAX cannot initialise the slice",
        "set `completionMode: Indexed`",
        "spec.completionMode: Required value: tpu-v4-podslice 2x2x4 = 16 chips at 4 per host "
        "needs 4 hosts; set completionMode: Indexed so each Pod knows its TPU_WORKER_ID",
    ),
    Rule(
        "tpu.multihost-parallelism",
        Severity.DENY_OR_WARN,
        "`parallelism` / `completions` (StatefulSet: `replicas`; a JobSet's replicatedJob "
        "template; LeaderWorkerSet: `size` or `subGroupSize`, counting the leader only when it "
        "requests chips; RayCluster: `numOfHosts`) that differ from the slice's host count "
        "(from the slice annotation when set)",
        "in an object made by a controller tpu-webhook does not know: its owner decides how "
        "many Pods a slice gets",
        "JAX waits for every host of the slice: fewer Pods hang at start-up, more never fit",
        "set them to the host count the message gives",
        "spec.parallelism: Invalid value: 2: 2x2x4 = 16 chips at 4 per host needs 4 hosts; set "
        "spec.parallelism and spec.completions to 4",
    ),
    Rule(
        "tpu.hostnames-disabled",
        Severity.DENY,
        "a JobSet with multi-host TPU slices and `spec.network.enableDNSHostnames: false`",
        "",
        "the hosts of a slice reach each other by hostname (TPU_WORKER_HOSTNAMES): without DNS "
        "hostnames they have none, and JAX cannot initialise the slice",
        "set `enableDNSHostnames: true` (the default)",
        "spec.network.enableDNSHostnames: Invalid value: false: tpu-v6e-slice 4x4 = 16 chips at "
        "4 per host needs 4 hosts, which reach each other by hostname; set it to true (the "
        "default)",
    ),
    Rule(
        "tpu.slice-shape-mismatch",
        Severity.DENY,
        "a LeaderWorkerSet leader that requests chips on another accelerator or topology than "
        "its workers",
        "",
        "a leader with chips is host 0 of its workers' slice: on another slice it never joins",
        "give the leader template the worker template's TPU selectors, or no chips",
        "spec.leaderWorkerTemplate.leaderTemplate.spec.nodeSelector[cloud.google.com/gke-tpu-"
        'topology]: Invalid value: "2x4": the leader requests chips, so it is host 0 of its '
        "workers' tpu-v6e-slice 4x4 slice; set the worker template's \"4x4\"",
    ),
    Rule(
        "tpu.multislice-env-conflict",
        Severity.DENY_OR_WARN,
        "a user-set `MEGASCALE_NUM_SLICES` other than the TPU replicatedJob's `replicas`, or a "
        "literal `MEGASCALE_SLICE_ID` shared by several slices",
        "for a `MEGASCALE_COORDINATOR_ADDRESS` other than the replicatedJob's first Pod (the "
        "coordinator may run elsewhere)",
        "JAX counts its processes as hosts x MEGASCALE_NUM_SLICES and numbers them by "
        "MEGASCALE_SLICE_ID: a wrong count or a shared id hangs every slice at start-up",
        "set MEGASCALE_NUM_SLICES to the replicatedJob's replicas (not the JobSet's global "
        "replicas) and take MEGASCALE_SLICE_ID from the annotation jobset.sigs.k8s.io/job-index",
        "spec.replicatedJobs[1].template.spec.template.spec.containers[0].env[0].value: Invalid "
        'value: "3": replicatedJob "slice" runs 2 slices (one per Job, its replicas); set '
        "MEGASCALE_NUM_SLICES to 2 or remove it",
    ),
    Rule(
        "tpu.multihost-unsupported-workload",
        Severity.DENY,
        "a multi-host topology on a Deployment, or on a Pod no controller owns, that does not "
        "list its slice's hostnames itself",
        "",
        "their Pods have no index, so none knows its TPU_WORKER_ID: the slice never forms",
        "run it as an Indexed Job, a JobSet, a LeaderWorkerSet or a RayCluster, or pick a "
        "single-host topology",
        "spec.template.spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Forbidden: "
        "tpu-v4-podslice 2x2x4 = 16 chips at 4 per host needs 4 hosts, and a Deployment cannot "
        "form a multi-host slice (its Pods have no TPU_WORKER_ID); run it as an Indexed Job with "
        "parallelism 4, a JobSet, a LeaderWorkerSet or a RayCluster, or pick a single-host "
        "topology",
    ),
    Rule(
        "tpu.worker-env-conflict",
        Severity.DENY_OR_WARN,
        "a user-set `TPU_WORKER_HOSTNAMES` with the wrong count, or a `TPU_WORKER_ID` out of range",
        "on a controller's child (a Job's Pod, a LeaderWorkerSet's or a RayCluster's Pod): "
        "its owner numbered it",
        'JAX fails at start-up: "Expected 4 worker addresses, got 1"',
        "list every host (or every TPU container, one per container), or remove the variable "
        "and let tpu-webhook set it",
        'spec.template.spec.containers[0].env[0].value: Invalid value: "4": TPU_WORKER_ID must '
        "be 0..3 for a slice of 4 hosts; remove it to let tpu-webhook set it",
    ),
    Rule(
        "tpu.hostname-too-long",
        Severity.DENY,
        "`<name>-<last index>` longer than 63 characters",
        "",
        "a hostname is one DNS label: the last hosts get no resolvable name",
        "shorten the name",
        'metadata.name: Invalid value: "gemma-2-27b-pretrain-v4-2x2x4-learning-rate-sweep-run-'
        '00000042": the last host\'s hostname "gemma-2-27b-pretrain-v4-2x2x4-learning-rate-sweep-'
        'run-00000042-3" is 64 characters and a hostname is at most 63; shorten the name to at '
        "most 61 characters",
    ),
    Rule(
        "tpu.quantity-invalid",
        Severity.DENY,
        "`google.com/tpu` that is not a whole number of chips, or cpu/memory that is not a "
        "Kubernetes quantity",
        "",
        "the API server refuses it, with a less helpful message",
        "write a quantity such as 4, 500m or 64Gi",
        'spec.containers[0].resources.limits[google.com/tpu]: Invalid value: "1.5": '
        "google.com/tpu is a whole number of chips, such as 4",
    ),
    Rule(
        "tpu.multihost-retries",
        Severity.WARN,
        "a multi-host Job with `backoffLimit` > 0, or unset",
        "",
        "a restarted host cannot rejoin its slice: the retry hangs",
        "set `backoffLimit: 0` and retry the whole Job (or use JobSet's failure policy)",
        "spec.backoffLimit: Required value: retries restart one Pod at a time, and a restarted "
        "host cannot rejoin its slice of 4; set backoffLimit: 0 and retry the whole Job (or use "
        "JobSet) (it defaults to 6)",
    ),
    Rule(
        "tpu.subdomain-defaulted",
        Severity.WARN,
        "a multi-host Job without `subdomain`: tpu-webhook sets it to the Job's name",
        "",
        "the worker hostnames resolve only through a headless Service of that name",
        "create the headless Service the message names (clusterIP: None, selecting the Job's Pods)",
        'spec.template.spec.subdomain: Defaulted: "train": set to the Job name so the 4 hosts '
        'resolve as train-0.train .. train-3.train; create a headless Service named "train" '
        "(clusterIP: None) selecting the Job's Pods",
    ),
    Rule(
        "tpu.compute-class-mismatch",
        Severity.DENY_OR_WARN,
        "a Pod (template) that requests chips from a GKE ComputeClass "
        "(`cloud.google.com/compute-class`) without TPU selectors of its own, held to every TPU "
        "priority of the class (`spec.priorities[].tpu`: type, count, topology): denies when "
        "it fits none",
        "for the priorities it does not fit when another one fits (GKE may fall back to them), "
        "or when the class also has priorities that name no TPU",
        "GKE provisions nodes of a priority's shape: a Pod whose chips or host count fit none "
        "of them waits Pending forever",
        "request the chips of the class's nodes and run as many Pods as its slice has hosts, or "
        "pick a class of the shape you need",
        "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 8: compute class "
        "tpu-v6e-2x2 priority 1 (tpu-v6e-slice 2x2, 4 chips per node): tpu-v6e-slice 2x2 runs 4 "
        "chips per host; set requests and limits to 4",
    ),
    Rule(
        "tpu.compute-class-unknown",
        Severity.WARN,
        "a Pod that requests chips from a ComputeClass tpu-webhook cannot check: not known here, "
        "absent from the cluster, or naming no TPU",
        "",
        "without the class its TPU type, slice and chip counts cannot be checked; a class the "
        "cluster does not have provisions no node",
        "create the class (or fix its name); run tpu-webhook with the cluster's ComputeClasses "
        "(the chart's clusterObjects, or `check --cluster-objects`)",
        'spec.nodeSelector[cloud.google.com/compute-class]: Unknown value: "tpu-v5e-2x4": '
        "tpu-webhook does not know compute class tpu-v5e-2x4 (it reads none here); the Pods' TPU "
        "type, slice and google.com/tpu requests are not checked against it",
    ),
    Rule(
        "tpu.shape-not-offered",
        Severity.DENY_OR_WARN,
        "TPU selectors (accelerator and topology) that nothing in this cluster offers: no TPU "
        "Node, ComputeClass priority, Kueue ResourceFlavor or xpk ConfigMap shows the shape, "
        "and the administrator's declared list (if any) does not list it",
        "unless the administrator enforces the declared list: a node pool that scales from zero "
        "or node auto-provisioning may still make the shape, which tpu-webhook cannot see",
        "the scheduler places a TPU Pod only on a node whose labels equal its selectors: with "
        "no such node the workload is admitted and stays Pending forever",
        "select a shape the cluster offers (the message names them and the nearest fit), or "
        "create a node pool of this shape",
        "spec.template.spec.nodeSelector[cloud.google.com/gke-tpu-topology]: Invalid value: "
        '"4x4": this cluster shows no tpu-v6e-slice 4x4 nodes; it offers tpu-v6e-slice 2x4 '
        '(node pool "v6e-2x4" (2 nodes)); the nearest fit offered is tpu-v6e-slice 2x4. The '
        "Pods stay Pending unless a node pool of this shape scales up from zero or is "
        "auto-provisioned, which tpu-webhook cannot see",
    ),
    Rule(
        "tpu.worker-env-missing",
        Severity.WARN,
        "`tpu-webhook audit` only: a stored multi-host workload without the worker variables "
        "(`TPU_WORKER_ID`, `TPU_WORKER_HOSTNAMES`, the multislice ones) or the subdomain that "
        "tpu-webhook adds at create: it was created while the webhook was not called",
        "",
        "JAX finds its place in the slice from the worker variables and the hosts from the "
        "subdomain; without them multi-host initialisation hangs or fails",
        "set them (`tpu-webhook render` prints the object as the webhook would store it), or "
        "create the workload again with tpu-webhook on",
        "spec.template.spec.containers[0].env: Required value: TPU_WORKER_ID, "
        "TPU_WORKER_HOSTNAMES not set (JAX finds its place in the slice from them); tpu-webhook "
        "adds them at create, so this object was created without them (GKE's own injection may "
        "still set them on the Pods it starts): set them, or create it again with tpu-webhook on",
    ),
    Rule(
        "tpu.claim-invalid",
        Severity.DENY_OR_WARN,
        "a DRA ResourceClaimTemplate or ResourceClaim for GKE's TPU DeviceClass "
        "(`tpu.google.com`) that its driver cannot allocate: a CEL selector naming an "
        "attribute the driver does not publish, a generation, accelerator or topology no TPU "
        "node has, an `ExactCount` that is not a whole node's chips",
        "for an accelerator the catalog does not know (a newer one): the claim's shape is not "
        "checked",
        "no device ever matches such a claim: the Pods that use it wait Pending forever",
        "use the driver's attribute names and values (`tpu-webhook explain`, the catalog's "
        "`dra` section) and `allocationMode: All`",
        "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "
        '"device.attributes[\\"tpu.google.com\\"].tpuGenn == \\"v6e\\"": tpu.google.com '
        'devices have no attribute "tpuGenn", so no device matches and the claim is never '
        'allocated; did you mean "tpuGen"?',
    ),
    Rule(
        "tpu.toleration-missing",
        Severity.DENY,
        "a Pod (template) that gets TPUs from a DRA claim without a toleration for GKE's TPU "
        "node taint `google.com/tpu=present:NoSchedule`",
        "",
        "a Pod that requests `google.com/tpu` gets the toleration from the API server "
        "(ExtendedResourceToleration); one that claims TPUs through DRA requests none, so it "
        "never schedules on the tainted TPU nodes and waits Pending forever",
        "add `{key: google.com/tpu, operator: Exists, effect: NoSchedule}` to its tolerations",
        "spec.tolerations: Required value: the Pods get TPUs from a resource claim, and GKE "
        "taints TPU nodes google.com/tpu=present:NoSchedule; without a toleration they never "
        "schedule: add {key: google.com/tpu, operator: Exists, effect: NoSchedule}",
    ),
    Rule(
        "tpu.autopilot-refused",
        Severity.DENY_OR_WARN,
        "under the `autopilot` profile (GKE Autopilot, set or detected): what GKE Warden "
        "certainly refuses of a TPU Pod: host namespaces (hostNetwork, hostPID, hostIPC), host "
        "ports, a node selector Autopilot does not allow (the catalog's list)",
        "for a privileged container: refused unless a WorkloadAllowlist admits the workload",
        "Autopilot's admission refuses the Pod, or every Pod a controller makes from the "
        "template, with its constraint's name only",
        "drop the host settings (the slice's hosts reach each other through the Pod network) "
        "and pick TPU nodes by the TPU selectors or a compute class",
        "spec.template.spec.hostNetwork: Forbidden: GKE Autopilot refuses Pods in host "
        "namespaces (autogke-disallow-hostnamespaces): remove it; the slice's hosts reach each "
        "other through the Pod network and the headless Service",
    ),
    Rule(
        "tpu.checked-partly",
        Severity.WARN,
        f"an object larger than tpu-webhook reads: more than {MAX_CONTAINERS} containers in a "
        f"pod spec, {MAX_ENV} env entries in a TPU container or {MAX_POD_TEMPLATES} pod "
        "templates in a list; the rest is neither checked nor patched",
        "",
        "every step of a review is bounded so that no object can stall admission; what lies "
        "beyond a bound may hold a mistake tpu-webhook did not see",
        "split the workload, or check the part beyond the bound by hand",
        f"spec.containers: Too many: 200: tpu-webhook reads the first {MAX_CONTAINERS} "
        f"containers and init containers of a pod spec; the other {200 - MAX_CONTAINERS} were "
        "neither checked nor patched",
    ),
    Rule(
        "tpu.kueue-slices",
        Severity.WARN,
        "a multi-host TPU template with Kueue Topology-Aware Scheduling slices "
        "(`kueue.x-k8s.io/podset-slice-size`) whose Pod count is not a multiple of the slice "
        "size, or whose slice size is not the TPU slice's host count",
        "",
        "Kueue admits such a workload and leaves the Pods beyond the last whole slice gated "
        "forever (kubernetes-sigs/kueue#15277); a Kueue slice that is not one TPU slice splits "
        "hosts that must meet",
        "set podset-slice-size to the TPU slice's host count, and the Pod count to a multiple "
        "of it",
        "spec.template.metadata.annotations[kueue.x-k8s.io/podset-slice-size]: Invalid value: "
        '"2": 5 Pods (spec.parallelism) are not a multiple of 2: Kueue admits the workload and '
        "leaves 1 Pods gated forever; make them a multiple of 2",
    ),
    Rule(
        "tpu.host-network-dns",
        Severity.WARN,
        "a multi-host workload with `hostNetwork: true` without `dnsPolicy: "
        "ClusterFirstWithHostNet`",
        "",
        "on the host network the Pod uses the node's resolver: the other hosts' cluster "
        "hostnames do not resolve and JAX cannot reach them",
        "set `dnsPolicy: ClusterFirstWithHostNet`",
        "spec.template.spec.dnsPolicy: Required value: with hostNetwork: true the 4 hosts' "
        "cluster hostnames (TPU_WORKER_HOSTNAMES) resolve only with dnsPolicy: "
        "ClusterFirstWithHostNet",
    ),
)

BY_CODE = {rule.code: rule for rule in RULES}


def rules_table() -> str:
    """The README's rules table, in Markdown."""
    lines = ["| code | severity | what it checks |", "|---|---|---|"]
    for rule in RULES:
        checks = rule.checks
        if rule.when_warning:
            checks += f"; warns {rule.when_warning}"
        lines.append(f"| `{rule.code}` | {rule.severity.value} | {checks} |")
    return "\n".join(lines)
