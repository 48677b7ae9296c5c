"""The real-world corpus (tests/corpus): public TPU manifests and the objects their controllers
create from them, decided as the API server drives the webhook (mutate, apply the patch,
validate), each checked against its file's `Expect:` and against what the API server accepts.

A manifest's run: each object is created (Kueue's suspension first when it is queued); an
admitted owner is stored (tests.corpus.controllers.stored) and its controller's children are
created in turn; a queued Job is then admitted by Kueue (an UPDATE adding the flavor's node labels);
Pods of LeaderWorkerSets and KubeRay also go through the owner's own Pod webhook, once before
ours and once after (the order of mutating webhooks is the order of their configurations' names).
Objects of kinds the webhook configurations do not name are not sent to it (admitted untouched),
while their controllers' children are.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor

from tests.corpus import controllers as ch
from webhook.admission.dispatch import Cluster, Policy, review_request
from webhook.admission.review import GroupVersionKind, Request
from webhook.catalog import load_catalog
from webhook.offline import read_objects
from webhook.policy.cluster import view_for
from webhook.policy.decide import Options
from webhook.registration import registered_kinds

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
MANIFESTS = sorted(CORPUS.glob("*/*.yaml"))
CATALOG = load_catalog()
POLICY = Policy(CATALOG)
MINIMUM = 90  # 63 before issue 20, 27 added for it
CATEGORIES = frozenset(
    {
        "deployment", "job", "jobset", "leaderworkerset", "ray", "multislice", "dynamic-slicing",
        "sub-slicing", "tpu7x-multi-container", "hostnetwork", "kueue",
        "v4", "v5e", "v5p", "v6e", "tpu7x",
        "compute-class", "autopilot", "dra", "trainjob", "pathwaysjob", "daemonset", "kueue-tas",
        "chipless",
    }
)  # fmt: skip
GENERATIONS = {
    "tpu-v4-podslice": "v4",
    "tpu-v5-lite-podslice": "v5e",
    "tpu-v5-lite-device": "v5e",
    "tpu-v5p-slice": "v5p",
    "tpu-v6e-slice": "v6e",
    "tpu7x": "tpu7x",
}
MACHINE_GENERATIONS = {  # machine-type prefixes (a PathwaysJob's workers[].type)
    "ct4p-": "v4",
    "ct5lp-": "v5e",
    "ct5l-": "v5e",
    "ct5p-": "v5p",
    "ct6e-": "v6e",
    "tpu7x-": "tpu7x",
}
SLICE_TOPOLOGY = "cloud.google.com/gke-tpu-slice-topology"
COMPUTE_CLASS = "cloud.google.com/compute-class"
TPU_KEYS = (ch.ACCELERATOR, ch.TOPOLOGY)
TPU_DEVICE_CLASS = "tpu.google.com"  # kubernetes-sigs/dra-driver-google-tpu's DeviceClass
TAS_ANNOTATIONS = (
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue.x-k8s.io/podset-slice-size",
)
SENT = frozenset((k.group, k.kind) for k in registered_kinds())  # what the API server sends us
WORKER_VARIABLES = ("TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "TPU_NAME", "TPU_PROCESS_ADDRESSES")
SEVERITY = {
    "p": " (one network namespace; the API server warns of a duplicate port definition)",
    "h": " (hostNetwork: the API server rejects a host port used twice)",
}
HEADER = re.compile(r"# (Source|Placeholders|Expect|Why|Covers|Kueue-flavor|Cluster): (.+)")
SOURCE = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+")


# ---- reading the corpus ----------------------------------------------------------------------


@dataclass(frozen=True)
class Manifest:
    path: Path
    header: Mapping[str, str]
    objects: tuple[dict[str, Any], ...]

    @property
    def expected_denials(self) -> set[str]:
        verdict, _, codes = self.header.get("Expect", "").partition(" ")
        return {c.strip() for c in codes.split(",") if c.strip()} if verdict == "denied" else set()

    @property
    def flavor(self) -> dict[str, str]:
        """The Kueue ResourceFlavor's node labels: `key=value, key=value (where from)`."""
        text = self.header.get("Kueue-flavor", "").split(" (")[0]
        pairs = [p.strip().partition("=") for p in text.split(",") if p.strip()]
        return {k: v for k, _, v in pairs}

    @property
    def autopilot(self) -> bool:
        """`# Cluster: autopilot (where from)`: the source runs it on a GKE Autopilot cluster,
        which the objects themselves cannot say."""
        return self.header.get("Cluster", "").split(" (")[0] == "autopilot"

    def named(self, kind: str, name: str) -> dict[str, Any] | None:
        """The manifest's object of that kind and name (a ComputeClass, a runtime, a claim
        template), as the cluster would hold it next to the workload."""
        found = [o for o in self.objects if o.get("kind") == kind and ch.name_of(o) == name]
        return found[0] if found else None


class KubectlConstructor(SafeConstructor):
    """Maps as kubectl's go-yaml builds them: a key given twice keeps its last value (as
    webhook.manifests reads it too), where ruamel would refuse the file or keep the first."""

    def check_mapping_key(
        self, node: Any, key_node: Any, mapping: Any, key: Any, value: Any
    ) -> bool:
        return True


@functools.cache
def manifest(path: Path) -> Manifest:
    text = path.read_text("utf-8")
    header: dict[str, str] = {}
    for line in text.splitlines():
        match = HEADER.fullmatch(line)
        if match is None:
            break
        header[match.group(1)] = match.group(2).strip()
    # kubectl reads trailing blanks after a value (a TAB too, which ruamel refuses): drop them
    # here; whether the CLI reads the file as it is, is test_the_cli_reads_the_manifest's question.
    plain = "\n".join(line.rstrip() for line in text.splitlines())
    reader = YAML(typ="safe", pure=True)
    reader.Constructor = KubectlConstructor
    documents = reader.load_all(plain)
    objects = tuple(copy.deepcopy(d) for d in documents if isinstance(d, dict))
    return Manifest(path, header, objects)


def ids(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


# ---- what a manifest holds -------------------------------------------------------------------


def pod_templates(obj: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(template metadata, pod spec) of every Pod template an object holds."""
    spec = obj.get("spec") or {}
    kind = obj.get("kind")
    if kind == "Pod":
        yield obj.get("metadata") or {}, spec
    elif kind in ("Job", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"):
        template = spec.get("template") or {}
        yield template.get("metadata") or {}, template.get("spec") or {}
    elif kind == "JobSet":
        for rjob in spec.get("replicatedJobs") or []:
            template = rjob["template"]["spec"]["template"]
            yield template.get("metadata") or {}, template.get("spec") or {}
    elif kind == "LeaderWorkerSet":
        for key in ("leaderTemplate", "workerTemplate"):
            template = spec["leaderWorkerTemplate"].get(key)
            if template:
                yield template.get("metadata") or {}, template.get("spec") or {}
    elif kind in ("RayCluster", "RayJob", "RayService"):
        cluster_spec = ch.cluster_spec_of(obj)
        for group in [cluster_spec["headGroupSpec"], *cluster_spec.get("workerGroupSpecs", [])]:
            template = group["template"]
            yield template.get("metadata") or {}, template.get("spec") or {}


def chips(spec: Mapping[str, Any]) -> list[int]:
    return [n for n in map(ch.tpu_chips, ch.containers(spec, "containers")) if n]


def selector(spec: Mapping[str, Any]) -> dict[str, str]:
    """nodeSelector plus required node-affinity terms of one value (`In`)."""
    found = dict(spec.get("nodeSelector") or {})
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("operator") == "In" and len(expression.get("values") or []) == 1:
                found[expression["key"]] = expression["values"][0]
    return found


def derived_covers(m: Manifest) -> set[str]:
    kinds = {
        "Deployment": "deployment",
        "Job": "job",
        "JobSet": "jobset",
        "LeaderWorkerSet": "leaderworkerset",
        "RayCluster": "ray",
        "RayJob": "ray",
        "RayService": "ray",
        "Pod": "pod",
        "DaemonSet": "daemonset",
        "TrainJob": "trainjob",
        "PathwaysJob": "pathwaysjob",
    }
    found: set[str] = {"autopilot"} if m.autopilot else set()
    for obj in m.objects:
        if obj.get("kind") in kinds:
            found.add(kinds[obj["kind"]])
        if ch.kueue_queued(obj):
            found.add("kueue")
        for template_meta, spec in [*pod_templates(obj), *trainjob_templates(obj, m)]:
            annotations = template_meta.get("annotations") or {}
            found |= {"kueue-tas"} if any(a in annotations for a in TAS_ANNOTATIONS) else set()
            claims = tpu_claims(spec, m)
            if not chips(spec) and not claims:
                found |= {"chipless"} if selects_tpu_nodes(spec) else set()
                continue
            labels = {**selector(spec), **m.flavor}
            found |= {"dra"} if claims else set()
            found |= {"compute-class"} if COMPUTE_CLASS in labels else set()
            accelerator = labels.get(ch.ACCELERATOR) or compute_class_type(labels, m)
            if chips(spec) or accelerator:
                found.add(GENERATIONS.get(accelerator or "", "unknown-generation"))
            found |= {"hostnetwork"} if spec.get("hostNetwork") else set()
            found |= {"tpu7x-multi-container"} if len(chips(spec)) > 1 else set()
            slice_topology = annotations.get(SLICE_TOPOLOGY)
            if slice_topology and ch.TOPOLOGY not in labels:
                found.add("dynamic-slicing")
            elif slice_topology and labels[ch.TOPOLOGY] != slice_topology:
                found.add("sub-slicing")
        found |= pathways_covers(obj)
        found |= {"multislice"} if multislice(obj) else set()
    return found


def selects_tpu_nodes(spec: Mapping[str, Any]) -> bool:
    """A TPU key in the nodeSelector or in a required node-affinity term, any operator (a
    DaemonSet's `Exists` too)."""
    if any(k in (spec.get("nodeSelector") or {}) for k in TPU_KEYS):
        return True
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return any(
        e.get("key") in TPU_KEYS
        for term in affinity.get("nodeSelectorTerms") or []
        for e in term.get("matchExpressions") or []
    )


def compute_class_type(labels: Mapping[str, str], m: Manifest) -> str | None:
    """The TPU type of the first TPU priority of the custom ComputeClass the Pod selects, when
    the manifest holds it (GKE provisions a node of that priority: no accelerator selector)."""
    cc = m.named("ComputeClass", labels.get(COMPUTE_CLASS, "")) if COMPUTE_CLASS in labels else None
    types = [
        (p.get("tpu") or {}).get("type")
        for p in ((cc or {}).get("spec") or {}).get("priorities") or []
    ]
    return next((t for t in types if t), None)


def tpu_claims(spec: Mapping[str, Any], m: Manifest) -> list[str]:
    """The Pod's DRA claims whose ResourceClaimTemplate (in the manifest) asks the TPU
    DeviceClass: `devices.requests[].exactly.deviceClassName` (resource.k8s.io/v1) or
    `devices.requests[].deviceClassName` (v1beta1)."""
    found = []
    for claim in spec.get("resourceClaims") or []:
        template = m.named("ResourceClaimTemplate", claim.get("resourceClaimTemplateName", ""))
        requests = (((template or {}).get("spec") or {}).get("spec") or {}).get("devices") or {}
        for request in requests.get("requests") or []:
            exactly = request.get("exactly") or request
            if exactly.get("deviceClassName") == TPU_DEVICE_CLASS:
                found.append(claim["name"])
    return found


def trainjob_templates(
    obj: Mapping[str, Any], m: Manifest
) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """A TrainJob's Pod templates as its controller builds them (tests/corpus/controllers/
    trainer.py: the JobSet from its runtime in the manifest, its runtime patches, numNodes and
    resourcesPerNode), enough to derive categories."""
    if obj.get("kind") != "TrainJob":
        return
    for jobset in ch.children(ch.stored(obj), cluster=m.objects):
        yield from pod_templates(jobset)


def pathways_covers(obj: Mapping[str, Any]) -> set[str]:
    """A PathwaysJob's workers: the generation from the machine type, several slices."""
    if obj.get("kind") != "PathwaysJob":
        return set()
    found: set[str] = set()
    for worker in (obj.get("spec") or {}).get("workers") or []:
        machine = str(worker.get("type", ""))
        prefixes = [g for p, g in MACHINE_GENERATIONS.items() if machine.startswith(p)]
        found.add(prefixes[0] if prefixes else "unknown-generation")
        found |= {"multislice"} if int(worker.get("numSlices", 1)) > 1 else set()
    return found


def multislice(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "JobSet":
        return any(
            r.get("replicas", 1) > 1 and chips(r["template"]["spec"]["template"]["spec"])
            for r in spec.get("replicatedJobs") or []
        )
    if obj.get("kind") == "RayCluster":
        return any(
            g.get("replicas", 0) > 1 and g.get("numOfHosts", 1) > 1 and chips(g["template"]["spec"])
            for g in spec.get("workerGroupSpecs") or []
        )
    return False


# ---- what the API server accepts -------------------------------------------------------------


def api_problems(obj: Mapping[str, Any]) -> set[str]:
    """What the API server rejects, or what cannot run, in the object's Pod templates: one port
    number in two places of a Pod (its containers share one network namespace; with hostNetwork
    the API server defaults hostPort to containerPort and rejects a host port used twice), a port
    name twice in a container, an env name twice in a container, an env entry with both value and
    valueFrom, google.com/tpu requests that differ from limits. Init containers count alone."""
    found: set[str] = set()
    for _, spec in pod_templates(obj):
        host_network = bool(spec.get("hostNetwork"))
        groups = [ch.containers(spec, "containers")]
        groups += [[c] for c in ch.containers(spec, "initContainers")]
        for group in groups:
            ports: dict[str, list[str]] = {}
            for container in group:
                for port in container.get("ports") or []:
                    protocol = port.get("protocol", "TCP")
                    ports.setdefault(f"port {protocol}/{port.get('containerPort')}", []).append(
                        container["name"]
                    )
                    host = port.get("hostPort") or (
                        port.get("containerPort") if host_network else 0
                    )
                    if host:
                        ports.setdefault(f"host port {protocol}/{host}", []).append(
                            container["name"]
                        )
            for port, users in ports.items():
                if len(users) > 1:
                    found.add(f"{port} used by {' and '.join(users)}" + SEVERITY[port[0]])
        for container in ch.containers(spec):
            name = container["name"]
            port_names = [p["name"] for p in container.get("ports") or [] if p.get("name")]
            found |= {
                f"port name {n} twice in {name}" for n in port_names if port_names.count(n) > 1
            }
            env = [e for e in container.get("env") or [] if isinstance(e, dict)]
            env_names = [e.get("name") for e in env]
            found |= {f"env {n} twice in {name}" for n in env_names if env_names.count(n) > 1}
            found |= {
                f"env {e.get('name')} has value and valueFrom in {name}"
                for e in env
                if e.get("value") not in (None, "") and e.get("valueFrom") is not None
            }
            resources = container.get("resources") or {}
            asked = (resources.get("requests") or {}).get(ch.TPU)
            limit = (resources.get("limits") or {}).get(ch.TPU)
            if asked is not None and str(asked) != str(limit):
                found.add(f"{ch.TPU} requests {asked} but limits {limit} in {name}")
    return found


def qos_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """cpu or memory limits the patch added where the author set none: that changes the Pod's
    QoS class and throttles CPU (the authors of these manifests leave them out on purpose)."""
    found = []
    pairs = zip(pod_templates(before), pod_templates(after), strict=True)
    for (_, spec_before), (_, spec_after) in pairs:
        for was, now in zip(ch.containers(spec_before), ch.containers(spec_after), strict=True):
            had = (was.get("resources") or {}).get("limits") or {}
            has = (now.get("resources") or {}).get("limits") or {}
            found += [
                f"limits[{r}] {has[r]} added to {now['name']} (changes the QoS class)"
                for r in ("cpu", "memory")
                if r in has and r not in had
            ]
    return found


# ---- running a manifest ----------------------------------------------------------------------


@dataclass
class Run:
    denials: list[tuple[str, str, str]] = field(default_factory=list)  # (trail, code, message)
    problems: list[str] = field(default_factory=list)  # patches that break objects
    overridden: list[str] = field(default_factory=list)  # owner's worker variables changed
    steps: int = 0
    policy: Policy = POLICY  # with the cluster view of the manifest's own ComputeClasses

    def codes(self) -> set[str]:
        return {code for _, code, _ in self.denials}


def request(obj: Mapping[str, Any], operation: str, old: Mapping[str, Any] | None) -> Request:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    meta = obj.get("metadata") or {}
    return Request(
        uid="corpus",
        kind=GroupVersionKind(group, version, str(obj.get("kind", ""))),
        operation=operation,
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        object=obj,
        old_object=old,
    )


def decide(
    run: Run,
    trail: str,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None = None,
    before: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
    after: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """One admission: `before` (another mutating webhook), ours, `after`, then our validation of
    the final object, as the API server chains them. The final object, or None when denied."""
    run.steps += 1
    sent = before(obj) if before else copy.deepcopy(dict(obj))
    if ch.group_kind(sent) not in SENT:  # not in our configurations' rules: never sent to us
        return after(sent) if after else sent
    operation = "CREATE" if old is None else "UPDATE"
    mutated = review_request(request(sent, operation, old), "mutate", run.policy)
    try:
        patched = jsonpatch.apply_patch(copy.deepcopy(sent), list(mutated.patch))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        run.problems.append(f"{trail}: the patch does not apply: {error}")
        return None
    final = after(patched) if after else patched
    unpatched = after(sent) if after else sent
    run.problems += [f"{trail}: {p}" for p in sorted(api_problems(final) - api_problems(unpatched))]
    run.problems += [f"{trail}: {p}" for p in qos_changes(unpatched, final)]
    verdict = review_request(request(final, operation, old), "validate", run.policy)
    run.denials += [(trail, v.code, v.message) for v in verdict.denials]
    return None if verdict.denials else final


def trail_of(parent: str, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName", "") + "*"
    return f"{parent} > {obj.get('kind')}/{name}" if parent else f"{obj.get('kind')}/{name}"


def create(
    run: Run,
    m: Manifest,
    obj: Mapping[str, Any],
    shadow: Mapping[str, Any],
    parent: str = "",
    ancestors: tuple[tuple[Mapping[str, Any], Mapping[str, Any]], ...] = (),
    resume: bool = False,
) -> None:
    """Create `obj` and, when it is admitted, what its controllers create from it. A queued Job or
    RayJob (or a Job of a queued JobSet: `resume`) is then admitted by Kueue with an UPDATE; a
    queued JobSet's Jobs are created suspended and resumed each by such an UPDATE. `shadow` is the
    same object as it would be had our webhook patched none of its owners; `ancestors` holds the
    (stored, shadow) pairs of its owners."""
    trail = trail_of(parent, obj)
    kind = obj.get("kind")
    queued = ch.kueue_queued(obj) and kind in ("Job", "JobSet", "RayJob")
    sent = ch.kueue_suspend(obj) if queued else obj
    shadow = ch.kueue_suspend(shadow) if queued else shadow
    machinery = owner_webhook(sent)
    if machinery is None:
        final = decide(run, trail, sent)
    else:
        final = pod_both_orders(run, trail, sent, machinery, machinery(shadow))
    if final is None:
        return
    owner, shadow_owner = ch.stored(final), ch.stored(shadow)
    if (queued or resume) and kind in ("Job", "RayJob"):
        final = decide(run, f"{trail} (UPDATE)", ch.kueue_admit(owner, m.flavor), old=owner)
        if final is None:
            return
        owner, shadow_owner = ch.stored(final), ch.stored(ch.kueue_admit(shadow_owner, m.flavor))
    kids = ch.children(owner, [a for a, _ in ancestors], m.objects)
    shadow_kids = ch.children(shadow_owner, [s for _, s in ancestors], m.objects)
    for kid, shadow_kid in zip(kids, shadow_kids, strict=True):
        pairs = (*ancestors, (owner, shadow_owner))
        create(run, m, kid, shadow_kid, trail, pairs, queued and kind == "JobSet")


def owner_webhook(obj: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], dict[str, Any]] | None:
    """The owner's own Pod webhook that writes TPU worker variables, if any."""
    if obj.get("kind") != "Pod":
        return None
    labels = ch.labels_of(obj)
    if ch.LWS_NAME in labels:
        return ch.lws_pod_webhook
    if labels.get("app.kubernetes.io/name") == "kuberay":
        return ch.kuberay_tpu_webhook
    return None


def pod_both_orders(
    run: Run,
    trail: str,
    pod: Mapping[str, Any],
    machinery: Callable[..., dict[str, Any]],
    alone: Mapping[str, Any],
) -> dict[str, Any] | None:
    """The Pod through the owner's webhook and ours in both orders; its worker variables must end
    as the owner's webhook writes them on a Pod whose owners we never patched (`alone`)."""
    ours_first = decide(run, f"{trail} (ours first)", pod, after=machinery)
    theirs_first = decide(run, f"{trail} (owner's webhook first)", pod, before=machinery)
    for order, final in (("ours first", ours_first), ("owner's webhook first", theirs_first)):
        if final is None:
            continue
        for container, wanted in zip(
            ch.containers(final["spec"]), ch.containers(alone["spec"]), strict=True
        ):
            for variable in WORKER_VARIABLES:
                got, want = shown(container, variable), shown(wanted, variable)
                if got != want:
                    run.overridden.append(
                        f"{trail} ({order}): {container['name']} {variable}={got!r}, "
                        f"the owner's webhook alone writes {want!r}"
                    )
    return theirs_first


def shown(container: Mapping[str, Any], name: str) -> str | None:
    """An env entry's value, or its valueFrom field path."""
    for item in container.get("env") or []:
        if item.get("name") == name:
            source = (item.get("valueFrom") or {}).get("fieldRef") or {}
            return str(item["value"]) if "value" in item else f"<{source.get('fieldPath')}>"
    return None


@functools.cache
def run_manifest(path: Path) -> Run:
    """The cluster holds the manifest's ComputeClasses (as `tpu-webhook check` reads a file: the
    classes it holds are known, any other is unknown); on an Autopilot cluster, the autopilot
    profile applies."""
    m = manifest(path)
    options = Options(profile="autopilot" if m.autopilot else "standard")
    cluster = Cluster(view_for(CATALOG, m.objects))
    run = Run(policy=Policy(CATALOG, options, cluster=cluster))
    for obj in m.objects:
        create(run, m, obj, obj)
    return run


# ---- the tests -------------------------------------------------------------------------------


def test_the_corpus_has_enough_manifests_and_covers_every_category() -> None:
    covered: set[str] = set()
    for path in MANIFESTS:
        covered |= derived_covers(manifest(path))
    assert len(MANIFESTS) >= MINIMUM
    assert sorted(CATEGORIES - covered) == []


@pytest.mark.parametrize("path", MANIFESTS, ids=ids)
def test_header_names_source_placeholders_verdict_reason_and_what_it_covers(path: Path) -> None:
    m = manifest(path)
    assert SOURCE.fullmatch(m.header.get("Source", "")), m.header.get("Source")
    assert m.header.get("Placeholders")
    assert re.fullmatch(
        r"admitted|denied tpu\.[a-z-]+(, tpu\.[a-z-]+)*", m.header.get("Expect", "")
    )
    assert m.header.get("Why")
    assert sorted(m.header.get("Covers", "").split(", ")) == sorted(derived_covers(m))
    assert bool(m.flavor) == any(ch.kueue_queued(o) and o["kind"] != "RayJob" for o in m.objects)


@pytest.mark.parametrize("path", MANIFESTS, ids=ids)
def test_the_cli_reads_the_manifest(path: Path) -> None:
    """`tpu-webhook check` reads what kubectl reads (a trailing TAB after a value included)."""
    assert len(list(read_objects(str(path)))) == len(manifest(path).objects)


@pytest.mark.parametrize("path", MANIFESTS, ids=ids)
def test_the_manifest_and_its_controllers_children_get_the_expected_verdict(path: Path) -> None:
    run = run_manifest(path)
    assert sorted(run.codes()) == sorted(manifest(path).expected_denials), run.denials[:20]


@pytest.mark.parametrize("path", MANIFESTS, ids=ids)
def test_every_patch_applies_keeps_the_qos_class_and_leaves_objects_the_api_server_accepts(
    path: Path,
) -> None:
    assert run_manifest(path).problems == []


@pytest.mark.parametrize("path", MANIFESTS, ids=ids)
def test_worker_variables_of_lws_and_kuberay_pods_stay_as_their_own_webhook_writes_them(
    path: Path,
) -> None:
    assert run_manifest(path).overridden == []


# ---- the controllers' children, checked against what their sources make ----------------------


def corpus_object(name: str, kind: str) -> dict[str, Any]:
    (path,) = [p for p in MANIFESTS if p.stem == name]
    (obj,) = [o for o in manifest(path).objects if o["kind"] == kind]
    return ch.stored(obj)


def test_jobset_makes_one_indexed_job_per_replica_with_its_labels_and_subdomain() -> None:
    jobset = corpus_object("tpu-multislice-v6e-jax-workload", "JobSet")
    jobs = ch.children(jobset)
    assert [j["metadata"]["name"] for j in jobs] == [
        "v6e-multislice-slice-0",
        "v6e-multislice-slice-1",
    ]
    job = jobs[1]
    template = job["spec"]["template"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert template["spec"]["subdomain"] == "v6e-multislice"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    assert {
        k: template["metadata"]["labels"][k]
        for k in (
            "jobset.sigs.k8s.io/job-index",
            "jobset.sigs.k8s.io/replicatedjob-replicas",
            "jobset.sigs.k8s.io/global-replicas",
        )
    } == {
        "jobset.sigs.k8s.io/job-index": "1",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
        "jobset.sigs.k8s.io/global-replicas": "2",
    }


def test_the_job_controller_names_indexed_pods_by_index_and_owns_them() -> None:
    jobset = corpus_object("tpu-multislice-v6e-jax-workload", "JobSet")
    job = ch.stored(ch.children(jobset)[1])
    pods = ch.children(job)
    pod = pods[3]
    assert len(pods) == 4
    assert pod["metadata"]["generateName"] == "v6e-multislice-slice-1-3-"
    assert "name" not in pod["metadata"]  # given by the API server after mutating admission
    assert pod["spec"]["hostname"] == "v6e-multislice-slice-1-3"
    assert pod["metadata"]["annotations"][ch.COMPLETION_INDEX] == "3"
    assert pod["metadata"]["labels"][ch.COMPLETION_INDEX] == "3"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "v6e-multislice-slice-1"
    assert pod["metadata"]["ownerReferences"][0]["controller"] is True
    assert "JOB_COMPLETION_INDEX" in [e["name"] for e in pod["spec"]["containers"][0]["env"]]


def test_lws_makes_a_leader_statefulset_and_per_group_a_worker_statefulset_from_ordinal_1() -> None:
    lws = corpus_object("leaderworkerset-tpu-sample-v5e-4x4", "LeaderWorkerSet")
    (leader_sts,) = ch.children(lws)
    leaders = ch.children(leader_sts)
    (workers_sts,) = ch.children(leaders[2], [lws, leader_sts])
    assert (leader_sts["metadata"]["name"], leader_sts["spec"]["replicas"]) == (
        "leaderworkerset-sample",
        3,
    )
    assert [p["metadata"]["name"] for p in leaders] == [
        f"leaderworkerset-sample-{i}" for i in range(3)
    ]
    assert (workers_sts["metadata"]["name"], workers_sts["spec"]["replicas"]) == (
        "leaderworkerset-sample-2",
        3,
    )
    assert workers_sts["spec"]["ordinals"] == {"start": 1}
    assert workers_sts["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert [p["metadata"]["name"] for p in ch.children(workers_sts)] == [
        f"leaderworkerset-sample-2-{i}" for i in (1, 2, 3)
    ]


def test_lws_pod_webhook_writes_the_group_hostnames_leader_first_unless_a_worker_id_is_set() -> (
    None
):
    lws = corpus_object("leaderworkerset-tpu-sample-v5e-4x4", "LeaderWorkerSet")
    (leader_sts,) = ch.children(lws)
    (workers_sts,) = ch.children(ch.children(leader_sts)[0], [lws, leader_sts])
    worker = ch.children(workers_sts)[1]  # leaderworkerset-sample-0-2
    patched = ch.lws_pod_webhook(worker)["spec"]["containers"][0]
    svc = "leaderworkerset-sample"
    assert ch.env_value(patched, "TPU_WORKER_ID") == "2"
    assert ch.env_value(patched, "TPU_WORKER_HOSTNAMES") == ",".join(
        [f"leaderworkerset-sample-0.{svc}"]
        + [f"leaderworkerset-sample-0-{i}.{svc}" for i in (1, 2, 3)]
    )
    worker["spec"]["containers"][0]["env"] = [{"name": "TPU_WORKER_ID", "value": "7"}]
    skipped = ch.lws_pod_webhook(worker)["spec"]["containers"][0]
    assert ch.env_value(skipped, "TPU_WORKER_HOSTNAMES") is None


def test_kuberay_creates_replicas_times_hosts_worker_pods_owned_by_the_raycluster() -> None:
    cluster = corpus_object("raycluster-maxtext-multislice-v6e-4x4", "RayCluster")
    pods = ch.children(cluster)
    workers = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker"]
    assert len(pods) == 1 + 2 * 4
    assert sorted(
        (p["metadata"]["labels"][ch.RAY_REPLICA_INDEX], p["metadata"]["labels"][ch.RAY_HOST_INDEX])
        for p in workers
    ) == [(str(r), str(h)) for r in range(2) for h in range(4)]
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in pods} == {"RayCluster"}


def test_kueue_admission_merges_the_flavor_labels_and_unsuspends_the_job() -> None:
    (path,) = [p for p in MANIFESTS if p.stem == "microbenchmark-collectives-job-kueue-tpu7x-2x2x2"]
    job = ch.stored(ch.kueue_suspend(corpus_object(path.stem, "Job")))
    admitted = ch.kueue_admit(job, manifest(path).flavor)
    assert (ch.children(job), admitted["spec"]["suspend"]) == ([], False)
    assert admitted["spec"]["template"]["spec"]["nodeSelector"] == {
        ch.ACCELERATOR: "tpu7x",
        ch.TOPOLOGY: "2x2x2",
    }
    assert len(ch.children(ch.stored(admitted))) == 2


def test_the_daemonset_controller_replaces_required_node_affinity_with_the_node_name() -> None:
    daemonset = corpus_object("tpu-network-optimization-daemonset-v6e", "DaemonSet")
    (pod,) = ch.children(daemonset)
    spec = pod["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gke-tpu-node-0"]}]}
    ]
    assert not selects_tpu_nodes(spec)  # the template's TPU affinity term is gone
    keys = [(t.get("key"), t.get("effect")) for t in spec["tolerations"]]
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in keys  # hostNetwork
    assert (None, "NoExecute") in keys  # the template's own, kept
    assert pod["metadata"]["generateName"] == "tpu-network-optimization-"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"


def test_kinds_outside_the_webhook_rules_are_admitted_without_being_sent() -> None:
    compute_class = corpus_object("vllm-qwen3-32b-deployment-compute-class-v6e-2x2", "ComputeClass")
    run = Run()
    assert ("cloud.google.com", "ComputeClass") not in SENT
    assert (decide(run, "ComputeClass/tpu-v6e-2x2", compute_class), run.denials) == (
        compute_class,
        [],
    )


def test_pathwaysjob_makes_a_head_job_and_a_job_of_its_slice_hosts_per_slice() -> None:
    """PATHWAYS internal/controller/pathwaysjob_controller.go, as modelled in controllers/."""
    pw = corpus_object("pathwaysjob-v4-2x2x2-two-slices-reservation", "PathwaysJob")
    (jobset,) = ch.children(pw)
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "PathwaysJob"
    spec = jobset["spec"]
    assert (spec["startupPolicy"], spec["coordinator"], spec["failurePolicy"]) == (
        {"startupPolicyOrder": "InOrder"},
        {"replicatedJob": "pathways-head"},
        {"maxRestarts": 10},
    )
    head, worker = spec["replicatedJobs"]
    head_pod = head["template"]["spec"]["template"]["spec"]
    assert [c["name"] for c in head_pod["initContainers"]] == ["pathways-rm", "pathways-proxy"]
    assert {c["restartPolicy"] for c in head_pod["initContainers"]} == {"Always"}
    (main,) = head_pod["containers"]
    assert ch.env_value(main, "JAX_BACKEND_TARGET") == "grpc://$(PATHWAYS_HEAD):29000"
    assert "nodeSelector" not in head_pod  # default mode: CPU nodes
    assert (worker["replicas"], worker["template"]["spec"]["parallelism"]) == (2, 2)
    assert worker["template"]["spec"]["backoffLimit"] == 8  # 4 x hosts, on purpose
    worker_pod = worker["template"]["spec"]["template"]["spec"]
    assert worker_pod["nodeSelector"] == {
        "cloud.google.com/reservation-name": "reservation-name",
        ch.ACCELERATOR: "tpu-v4-podslice",
        ch.TOPOLOGY: "2x2x2",
    }
    assert worker_pod["containers"][0]["resources"] == {"limits": {ch.TPU: "4"}}
    jobs = ch.children(ch.stored(jobset))
    assert [j["metadata"]["name"] for j in jobs] == [
        "pathways-trial-pathways-head-0",
        "pathways-trial-worker-0",
        "pathways-trial-worker-1",
    ]


@pytest.mark.parametrize(
    ("machine_type", "topology", "hosts", "chips"),
    [
        ("ct5lp-hightpu-8t", "2x4", 1, 8),
        ("ct6e-standard-4t", "4x4", 4, 4),
        ("ct5p-hightpu-4t", "2x2x1", 1, 4),
        ("tpu7x-standard-4t", "4x4x4", 16, 4),
    ],
)
def test_pathwaysjob_hosts_and_chips_come_from_its_machine_type_and_topology(
    machine_type: str, topology: str, hosts: int, chips: int
) -> None:
    pw = corpus_object("pathwaysjob-v4-2x2x2-two-slices-reservation", "PathwaysJob")
    pw["spec"]["workers"][0].update(type=machine_type, topology=topology)
    (jobset,) = ch.children(pw)
    job = jobset["spec"]["replicatedJobs"][1]["template"]["spec"]
    (container,) = job["template"]["spec"]["containers"]
    assert (job["parallelism"], job["completions"], job["backoffLimit"]) == (
        hosts,
        hosts,
        4 * hosts,
    )
    assert container["resources"]["limits"][ch.TPU] == str(chips)


def test_pathwaysjob_whose_topology_its_machine_type_lacks_gets_no_jobset() -> None:
    """The controller validates the topology after the PathwaysJob is stored: status Failed."""
    pw = corpus_object("pathwaysjob-v4-2x2x2-two-slices-reservation", "PathwaysJob")
    pw["spec"]["workers"][0]["topology"] = "4x4"  # a v5e/v6e shape on TPU v4
    assert ch.children(pw) == []


def test_trainjob_makes_its_runtimes_jobset_with_its_patch_nodes_chips_and_jax_variables() -> None:
    """TRAINER's TrainJob controller, as modelled in controllers/ (tests/e2e/test_trainer.py
    checks the model against the real controller)."""
    path = "trainjob-jax-mnist-compute-class-v5e-2x4"
    trainjob = corpus_object(path, "TrainJob")
    (m,) = [manifest(p) for p in MANIFESTS if p.stem == path]
    (jobset,) = ch.children(trainjob, cluster=m.objects)
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    (rjob,) = jobset["spec"]["replicatedJobs"]
    job = rjob["template"]["spec"]
    assert (rjob["replicas"], job["parallelism"], job["completions"]) == (1, 2, 2)
    pod = job["template"]["spec"]
    assert pod["nodeSelector"][ch.TOPOLOGY] == "2x4"  # from the runtime patch
    (container,) = pod["containers"]
    assert container["resources"] == {"limits": {ch.TPU: "4"}, "requests": {ch.TPU: "4"}}
    assert [e["name"] for e in container["env"]] == [
        "JAX_NUM_PROCESSES",
        "JAX_PROCESS_ID",
        "JAX_COORDINATOR_ADDRESS",
        "JAX_PLATFORMS",
        "ENABLE_PJRT_COMPATIBILITY",
    ]
    assert ch.env_value(container, "JAX_COORDINATOR_ADDRESS") == (
        "jax-mnist-node-0-0.jax-mnist:29500"
    )
    # no runtime in the cluster: the controller makes nothing
    assert ch.children(trainjob) == []
