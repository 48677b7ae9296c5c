"""Registration: the Mutating and Validating WebhookConfigurations that tell the API server what to
send the webhook, from one definition.

- `rules()`, `tpu_match_expression()` and `spec_changed_expression()` are generated from the
  policy's workload table (group, version, resource, where each kind keeps its pod specs), and
  the entries of both configurations from `HOOKS`. The chart ships them as
  `files/webhook-rules.json`, `files/tpu-workload.cel`, `files/spec-changed.cel` and
  `files/webhooks.json` (`make chart-files`; a unit test keeps them identical), and its
  templates/webhooks.yaml renders the configurations from those files.
- `url_configurations()` is what the chart renders in url mode with its default values, from the
  same definitions: what `tpu-webhook serve` prints in development mode. tests/chart checks it
  against `helm template`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from webhook.admission.trigger import (
    AFFINITY_TERMS,
    CONTAINER_LISTS,
    RESOURCE_CLAIMS,
    TPU_RESOURCES,
    TPU_SELECTOR_KEYS,
)
from webhook.policy.templates import EACH
from webhook.policy.workloads import WORKLOADS, Workload

EVERY_ITEM = EACH  # a path step: every item of the list at this point
API_GROUP = "admissionregistration.k8s.io/v1"

Steps = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind the webhook is sent, as the configurations need it."""

    group: str
    version: str
    kind: str
    resource: str
    pod_specs: tuple[Steps, ...]  # from the object's root; EVERY_ITEM steps into lists
    slice_fields: tuple[Steps, ...] = ()  # host counts, completion mode, retries: likewise


def registered_kinds(workloads: Iterable[Workload] = WORKLOADS.values()) -> tuple[Kind, ...]:
    """The workload table, read for registration (the one place that reads its fields)."""
    return tuple(
        Kind(
            w.group,
            w.version,
            w.kind,
            w.resource,
            w.pod_spec_paths,
            tuple(p for t in w.templates if t.hosts for p in t.hosts.paths.values()),
        )
        for w in workloads
    )


def rules(kinds: Iterable[Kind] | None = None) -> list[dict[str, Any]]:
    """One rule per (group, version), resources in table order; the operations are the hook's."""
    by_version: dict[tuple[str, str], list[str]] = {}
    for kind in registered_kinds() if kinds is None else kinds:
        by_version.setdefault((kind.group, kind.version), []).append(kind.resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": resources,
            "scope": "Namespaced",
        }
        for (group, version), resources in by_version.items()
    ]


# ---------------------------------------------------------------------------------------- CEL


def tpu_match_expression(kinds: Iterable[Kind] | None = None) -> str:
    """CEL that is true only for objects whose pod specs name a TPU selector or request chips.

    Per kind, the list of its pod specs (a list step filters the items that have the rest of
    the path, then maps them to it); then one test over that list. Every step is guarded with
    has(): an evaluation error would count as a webhook failure.
    """
    kinds = tuple(registered_kinds() if kinds is None else kinds)
    names = [k.kind for k in kinds]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"kinds of the same name in two groups need a group test: {duplicated}")
    by_specs: dict[str, list[str]] = {}
    for kind in kinds:
        if not kind.pod_specs:
            continue  # sent whole, below
        specs = " + ".join(_specs("object", path) for path in kind.pod_specs)
        by_specs.setdefault(specs, []).append(kind.kind)
    branches = ""
    for specs, kind_names in by_specs.items():
        test = " || ".join(f"request.kind.kind == '{name}'" for name in kind_names)
        branches += f"({test})\n  ? {specs}\n  : "
    pod_specs = f"({branches}[]\n).exists(s,\n{_tpu_spec('s')})"
    whole = [f"'{k.kind}'" for k in kinds if not k.pod_specs]
    if not whole:
        return pod_specs
    # kinds without pod templates are sent whole: a claim (whether its device class selects
    # TPUs is the server's to read), an owner read by its own fields (TrainJob, PathwaysJob)
    return f"request.kind.kind in [{', '.join(whole)}]\n|| {pod_specs}"


def _specs(base: str, path: Steps) -> str:
    """A CEL list of the pod specs at `path` under `base`: [] where a step is missing."""
    if EVERY_ITEM not in path:
        return f"({_guard(base, path)} ? [{_field(base, path)}] : [])"
    star = path.index(EVERY_ITEM)
    before, after = path[:star], path[star + 1 :]
    if EVERY_ITEM in after:
        raise ValueError(f"one list step per pod spec path, not {'.'.join(path)}")
    items = _field(base, before)
    picked = f"{items}.filter(i, {_guard('i', after)}).map(i, {_field('i', after)})"
    if not before:
        return picked
    return f"({_guard(base, before)} ? {picked} : [])"


def _field(base: str, path: Steps) -> str:
    return ".".join((base, *path))


def _guard(base: str, path: Steps) -> str:
    return " && ".join(f"has({_field(base, path[: i + 1])})" for i in range(len(path))) or "true"


def _tpu_spec(s: str) -> str:
    keys = "[" + ", ".join(f"'{key}'" for key in TPU_SELECTOR_KEYS) + "]"
    selector = "\n        || ".join(f"'{key}' in {s}.nodeSelector" for key in TPU_SELECTOR_KEYS)
    terms = _field(s, AFFINITY_TERMS)
    containers = "\n      + ".join(
        f"(has({s}.{name}) ? {s}.{name} : [])" for name in CONTAINER_LISTS
    )
    asks = "\n        || ".join(
        f"(has(c.resources.{which}) && '{resource}' in c.resources.{which})"
        for resource in TPU_RESOURCES
        for which in ("requests", "limits")
    )
    return (
        f"  (has({s}.nodeSelector)\n"
        f"    && ({selector}))\n"
        f"  || ({_guard(s, AFFINITY_TERMS)}\n"
        f"    && {terms}.exists(t, has(t.matchExpressions)\n"
        f"      && t.matchExpressions.exists(e, e.key in {keys})))\n"
        f"  || ({containers}).exists(c,\n"
        f"    has(c.resources)\n"
        f"    && ({asks}))\n"
        f"  || has({s}.{RESOURCE_CLAIMS})"
    )


def spec_changed_expression(kinds: Iterable[Kind] | None = None) -> str:
    """CEL that is true for a CREATE, and for an UPDATE that changes a top-level field holding
    the kinds' pod specs or host counts: `spec`, for every kind of the table.

    The server allows an UPDATE whose `spec` equals the old one's, whatever else it changes
    (ownerReferences, finalizers, labels: the garbage collector's orphaning, the Job
    controller's finalizers), so the API server need not send it; a `spec` missing on both
    sides is unchanged there too. Runtime cost: `!=` on two maps costs a tenth of the smaller
    one's top-level size in CEL's accounting, far below the matchConditions budget.
    """
    kinds = tuple(registered_kinds() if kinds is None else kinds)
    roots = sorted({path[0] for kind in kinds for path in (*kind.pod_specs, *kind.slice_fields)})
    if not roots:
        raise ValueError("no kind says where it keeps its pod specs")
    changed = "\n  || ".join(
        f"(has(object.{r}) ? !has(oldObject.{r}) || object.{r} != oldObject.{r} "
        f": has(oldObject.{r}))"
        for r in roots
    )
    return f"request.operation != 'UPDATE'\n  || {changed}"


# ------------------------------------------------------------------------- configurations


Configuration = Literal["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
#: namespaces in warn mode: not selected on, excluded (while warn mode is on) or the only ones
WarnNamespaces = Literal["any", "exclude", "only"]
#: whose failurePolicy: webhook.failurePolicy, webhook.validating.updateFailurePolicy or
#: webhook.warnMode.failurePolicy
FailurePolicyOf = Literal["create", "update", "warn"]


@dataclass(frozen=True, slots=True)
class Hook:
    """One webhook entry of the configurations (the chart renders them from files/webhooks.json).

    UPDATEs have an entry and a failurePolicy of their own: the cluster's own machinery (the
    garbage collector, the Job controller, Kueue) updates TPU workloads, and an outage of the
    webhook must not stop it; an UPDATE that leaves the spec as it was is never sent. The
    mutating entry is invoked again when another webhook changed the object (our patches only
    add what is missing). Namespaces labelled for warn mode go to /validate/warn, where
    violations come back as warnings.
    """

    name: str  # prefix of <name>.tpu-webhook.io
    configuration: Configuration
    path: str
    operations: tuple[str, ...]
    warn: WarnNamespaces
    failure_policy: FailurePolicyOf = "create"
    spec_changed: bool = False  # an UPDATE is sent only when it changes the spec
    reinvocation: bool = False

    def chart_entry(self) -> dict[str, Any]:
        """As files/webhooks.json carries it for templates/webhooks.yaml."""
        return {
            "name": self.name,
            "configuration": self.configuration,
            "path": self.path,
            "operations": list(self.operations),
            "warn": self.warn,
            "failurePolicy": self.failure_policy,
            "specChanged": self.spec_changed,
            "reinvocation": self.reinvocation,
        }


MUTATING: Configuration = "MutatingWebhookConfiguration"
VALIDATING: Configuration = "ValidatingWebhookConfiguration"
HOOKS = (
    Hook("mutate", MUTATING, "/mutate", ("CREATE",), "any", reinvocation=True),
    Hook("validate", VALIDATING, "/validate", ("CREATE",), "exclude"),
    Hook(
        "validate-update",
        VALIDATING,
        "/validate",
        ("UPDATE",),
        "exclude",
        failure_policy="update",
        spec_changed=True,
    ),
    Hook(
        "validate-warn",
        VALIDATING,
        "/validate/warn",
        ("CREATE", "UPDATE"),
        "only",
        failure_policy="warn",
        spec_changed=True,
    ),
)


@dataclass(frozen=True, slots=True)
class ChartValues:
    """The chart's default values that shape the configurations (charts/tpu-webhook/values.yaml)."""

    failure_policy: str = "Fail"
    update_failure_policy: str = "Ignore"
    warn_failure_policy: str = "Ignore"
    timeout_seconds: int = 5
    opt_out_label: str = "tpu-webhook.io/ignore"
    warn_label: str = "tpu-webhook.io/mode"
    warn_value: str = "warn"
    exclude_namespaces: tuple[str, ...] = ()
    # webhook.exemptions: the objectSelector drops opted-out objects only while every namespace
    # may opt out (a selector cannot be limited to namespaces: the server decides then)
    exempt_opt_out_label: bool = True
    exemption_namespaces: tuple[str, ...] = ()

    def failure_policy_of(self, hook: Hook) -> str:
        return {
            "create": self.failure_policy,
            "update": self.update_failure_policy,
            "warn": self.warn_failure_policy,
        }[hook.failure_policy]


def url_configurations(
    base_url: str,
    ca_pem: bytes,
    name: str = "tpu-webhook",
    namespace: str = "tpu-webhook",
    values: ChartValues = ChartValues(),
) -> list[dict[str, Any]]:
    """What `helm template <name> charts/tpu-webhook -n <namespace>` renders in url mode
    (`webhook.url.base=<base_url>`, `webhook.url.caBundle=<ca_pem>`), without the chart's labels."""
    bundle = base64.b64encode(ca_pem.strip() + b"\n").decode()
    excluded = list(dict.fromkeys(("kube-system", namespace, *values.exclude_namespaces)))
    tpu = {"name": "tpu-workload", "expression": tpu_match_expression()}
    changed = {"name": "spec-changed", "expression": spec_changed_expression()}
    object_selector = values.exempt_opt_out_label and not values.exemption_namespaces
    documents: dict[str, dict[str, Any]] = {}
    for hook in HOOKS:
        entry: dict[str, Any] = {
            "name": f"{hook.name}.tpu-webhook.io",
            "clientConfig": {"url": base_url + hook.path, "caBundle": bundle},
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "timeoutSeconds": values.timeout_seconds,
            "failurePolicy": values.failure_policy_of(hook),
            "matchPolicy": "Equivalent",
            "rules": [{**rule, "operations": list(hook.operations)} for rule in rules()],
            "namespaceSelector": {"matchExpressions": _namespaces(hook, excluded, values)},
        }
        if object_selector:
            entry["objectSelector"] = {
                "matchExpressions": [
                    {"key": values.opt_out_label, "operator": "NotIn", "values": ["true"]}
                ]
            }
        entry["matchConditions"] = [tpu, changed] if hook.spec_changed else [tpu]
        if hook.reinvocation:
            entry["reinvocationPolicy"] = "IfNeeded"
        document = documents.setdefault(
            hook.configuration,
            {
                "apiVersion": API_GROUP,
                "kind": hook.configuration,
                "metadata": {"name": name},
                "webhooks": [],
            },
        )
        document["webhooks"].append(entry)
    return list(documents.values())


def _namespaces(hook: Hook, excluded: list[str], values: ChartValues) -> list[dict[str, Any]]:
    expressions: list[dict[str, Any]] = [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded},
        {"key": values.opt_out_label, "operator": "NotIn", "values": ["true"]},
    ]
    if hook.warn != "any":
        operator = "In" if hook.warn == "only" else "NotIn"
        expressions.append(
            {"key": values.warn_label, "operator": operator, "values": [values.warn_value]}
        )
    return expressions


def development_configurations(host: str, port: int, ca_file: Path) -> str:
    """What `serve` prints in development mode: the url-mode configurations and how to apply
    them, as JSON documents (which kubectl reads as YAML)."""
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "localhost") else host
    host = f"[{host}]" if ":" in host else host
    documents = url_configurations(f"https://{host}:{port}", ca_file.read_bytes())
    text = "".join(
        "---\n" + orjson.dumps(d, option=orjson.OPT_INDENT_2).decode() + "\n" for d in documents
    )
    return (
        f"# tpu-webhook development mode: https://{host}:{port} (CA: {ca_file}).\n"
        "# Register it with: kubectl apply -f - <<'EOF'\n" + text + "EOF\n"
    )


def chart_files() -> dict[str, str]:
    """The chart's generated files (charts/tpu-webhook/files/), by name."""
    return {
        "tpu-workload.cel": tpu_match_expression() + "\n",
        "spec-changed.cel": spec_changed_expression() + "\n",
        "webhook-rules.json": _json(rules()),
        "webhooks.json": _json([hook.chart_entry() for hook in HOOKS]),
    }


def _json(data: Any) -> str:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"


if __name__ == "__main__":  # `make chart-files`
    import sys

    target = Path(sys.argv[1])
    for file_name, content in chart_files().items():
        (target / file_name).write_text(content)
