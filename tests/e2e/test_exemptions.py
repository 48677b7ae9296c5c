"""Exemptions the admin controls, against the real API server (issue 19).

The chart's switches (`webhook.exemptions.*`): for each, a `tpu-webhook serve` on loopback with
the environment the chart's Deployment gives the server for those values, registered with the
chart's url-mode configurations for the same values (a release of its own), and broken TPU Pods
that use the opt-outs, created with `kubectl create --dry-run=server` (admission runs, nothing
is stored). The suite's own registration (tests/e2e/conftest.py, default values) may be live at
the same time: it never sends a labelled object (its objectSelector) and admits an annotated
one, so each outcome here is the switched release's, and its server's review log shows it.

And the ValidatingAdmissionPolicy of the chart README, applied as written there: the opt-out
label is refused outside the namespaces it lists.

And `webhook.namespaceSelector`, the admin's choice of the namespaces sent at all.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from dev.chart import CHART, server_environment, url_mode_configurations
from dev.controlplane import ControlPlane
from tests.support.webhook_process import WebhookProcess, make_certs
from webhook.catalog.tpu import OPT_OUT_LABEL, SKIP_CHECK_ANNOTATION
from webhook.policy.workloads import WORKLOADS

pytestmark = pytest.mark.e2e

EXEMPTION_SETTINGS = (
    "TPU_WEBHOOK_HONOUR_OPT_OUT_LABEL",
    "TPU_WEBHOOK_HONOUR_SKIP_ANNOTATION",
    "TPU_WEBHOOK_EXEMPTION_NAMESPACES",
)
DENIED = 'admission webhook "validate.tpu-webhook.io" denied the request: '
CHIPS = (
    "spec.containers[0].resources.limits[google.com/tpu]: Invalid value: 3: "
    "tpu-v5-lite-podslice 2x4 runs 4 or 8 chips per host; set requests and limits to 4 or 8"
)
RUN = uuid.uuid4().hex[:6]
RESEARCH, TEAM = f"research-{RUN}", f"team-{RUN}"


def broken_pod(*, labelled: bool = False, annotated: bool = False) -> dict[str, Any]:
    """A v5e 2x4 Pod with 3 chips: tpu-webhook refuses it (tpu.chips-per-host)."""
    metadata: dict[str, Any] = {"name": f"broken-{uuid.uuid4().hex[:6]}"}
    if labelled:
        metadata["labels"] = {OPT_OUT_LABEL: "true"}
    if annotated:
        metadata["annotations"] = {SKIP_CHECK_ANNOTATION: "true"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                "cloud.google.com/gke-tpu-topology": "2x4",
            },
            "containers": [
                {
                    "name": "main",
                    "image": "trainer",
                    "resources": {"limits": {"google.com/tpu": "3"}},
                }
            ],
        },
    }


def dry_run(cp: ControlPlane, namespace: str, obj: dict[str, Any]) -> Any:
    return cp.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(obj)
    )


# --------------------------------------------------------------------- chart switches


@dataclass
class Switched:
    """A release with some `webhook.exemptions` values, served by its own server."""

    name: str
    server: WebhookProcess
    environment: dict[str, str]

    def answer(self, namespace: str, name: str, wait: float = 3.0) -> str | None:
        """What this release's server answered for the object (its review log), or None when it
        never got it within `wait` seconds (review lines are written in batches)."""
        deadline = time.monotonic() + wait
        while True:
            for line in self.server.logs().splitlines():
                entry = json.loads(line) if line.startswith("{") else {}
                if (
                    entry.get("msg") == "review"
                    and entry.get("endpoint") == "validate"
                    and (entry.get("namespace"), entry.get("name")) == (namespace, name)
                ):
                    return str(entry["outcome"])
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def observed(self, cp: ControlPlane, namespace: str, pod: dict[str, Any]) -> str:
        """`kubectl create --dry-run=server`'s verdict, and this release's server's answer."""
        proc = dry_run(cp, namespace, pod)
        if proc.returncode == 0:
            verdict = "admitted"
        elif DENIED + CHIPS in proc.stderr:
            verdict = "refused"
        else:
            verdict = f"failed: {proc.stderr.strip()}"
        return f"{verdict}, {self.answer(namespace, pod['metadata']['name']) or 'never sent'}"


ENABLED = "tpu-webhook.io/enabled"  # the README's example of a webhook.namespaceSelector label
SWITCHES = {
    "no-opt-out-label": ["webhook.exemptions.optOutLabel=false"],
    "no-skip-annotation": ["webhook.exemptions.skipAnnotation=false"],
    "research-only": [f"webhook.exemptions.namespaces={{{RESEARCH}}}"],
    # not an exemption: the admin's choice of the namespaces sent at all (RESEARCH is labelled)
    "selected-namespaces": ["webhook.namespaceSelector.matchLabels.tpu-webhook\\.io/enabled=true"],
}
# where a switch's release is first seen refusing a broken Pod
LIVE_IN = {"selected-namespaces": RESEARCH}


@pytest.fixture(scope="module")
def namespaces(control_plane: ControlPlane) -> Iterator[None]:
    for name in (RESEARCH, TEAM):
        control_plane.kubectl("create", "namespace", name, check=True)
    control_plane.kubectl("label", "namespace", RESEARCH, f"{ENABLED}=true", check=True)
    yield
    for name in (RESEARCH, TEAM):
        control_plane.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="module")
def switched(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    namespaces: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Switched]:
    """`request.param` names the switch (SWITCHES): its server and configurations are live."""
    name: str = request.param
    values = SWITCHES[name]
    given = server_environment(values)
    environment = {setting: given[setting] for setting in EXEMPTION_SETTINGS}
    certs = tmp_path_factory.mktemp(f"exemptions-{name}")
    make_certs(certs)
    with WebhookProcess(certs, env=environment) as server:
        configurations = url_mode_configurations(
            server.url, server.ca_file.read_bytes(), release=f"exempt-{name}", extra_values=values
        )
        manifest = "\n".join(json.dumps(c) for c in configurations)
        control_plane.kubectl("apply", "-f", "-", input=manifest, check=True)
        try:
            switched = Switched(name, server, environment)
            # live once this release's server refuses a plain broken Pod
            deadline = time.monotonic() + 60
            live_in = LIVE_IN.get(name, TEAM)
            while switched.observed(control_plane, live_in, broken_pod()) != "refused, denied":
                assert time.monotonic() < deadline, f"{name} never went live"
                time.sleep(0.5)
            yield switched
        finally:
            control_plane.kubectl("delete", "-f", "-", input=manifest, check=True)


@pytest.mark.parametrize(
    ("switched", "expected"),
    [
        ("no-opt-out-label", ("false", "true", "[]")),
        ("no-skip-annotation", ("true", "false", "[]")),
        ("research-only", ("true", "true", f'["{RESEARCH}"]')),
    ],
    indirect=["switched"],
)
def test_the_server_gets_the_settings_of_the_switch(
    switched: Switched, expected: tuple[str, str, str]
) -> None:
    assert tuple(switched.environment[n] for n in EXEMPTION_SETTINGS) == expected


CASES = [
    # switch, the opt-out the broken Pod uses, its namespace, what happens
    ("no-opt-out-label", "label", TEAM, "refused, denied"),
    ("no-opt-out-label", "annotation", TEAM, "admitted, allowed"),  # still honoured
    ("no-skip-annotation", "annotation", TEAM, "refused, denied"),
    # still honoured, by the objectSelector: the release never receives it
    ("no-skip-annotation", "label", TEAM, "admitted, never sent"),
    # no objectSelector: every labelled Pod is sent, the server decides by namespace
    ("research-only", "label", RESEARCH, "admitted, allowed"),
    ("research-only", "label", TEAM, "refused, denied"),
    ("research-only", "annotation", RESEARCH, "admitted, allowed"),
    ("research-only", "annotation", TEAM, "refused, denied"),
]


@pytest.mark.parametrize(
    ("switched", "opt_out", "namespace", "expected"),
    CASES,
    ids=[f"{c[0]}-{c[1]}-{'research' if c[2] == RESEARCH else 'team'}" for c in CASES],
    indirect=["switched"],
)
def test_a_broken_pod_that_opts_out_is_refused_where_the_admin_switched_its_opt_out_off(
    control_plane: ControlPlane, switched: Switched, opt_out: str, namespace: str, expected: str
) -> None:
    pod = broken_pod(labelled=opt_out == "label", annotated=opt_out == "annotation")
    assert switched.observed(control_plane, namespace, pod) == expected


@pytest.mark.parametrize("switched", ["selected-namespaces"], indirect=True)
def test_only_the_namespaces_the_selector_selects_are_sent(
    control_plane: ControlPlane, switched: Switched
) -> None:
    assert switched.observed(control_plane, RESEARCH, broken_pod()) == "refused, denied"
    # The API server never sends this release a Pod of another namespace (the suite's own
    # registration, when live, may still refuse it: only this release's answer is asserted).
    assert switched.observed(control_plane, TEAM, broken_pod()).endswith(", never sent")


# --------------------------------------------------- the README's ValidatingAdmissionPolicy

README = CHART / "README.md"
VAP_NAME = "tpu-webhook-opt-out-label"
VAP_DENIAL = (
    f"ValidatingAdmissionPolicy '{VAP_NAME}' with binding '{VAP_NAME}' denied request: "
    "the label tpu-webhook.io/ignore=true (no TPU checks) is allowed only in the namespaces "
    "the cluster admin chose; remove it"
)
LISTED, OTHER = f"vap-research-{RUN}", f"vap-team-{RUN}"


def readme_policy(readme: Path = README) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, as the chart README writes them."""
    blocks = re.findall(r"```yaml\n(.*?)```", readme.read_text(), flags=re.DOTALL)
    (text,) = [b for b in blocks if "kind: ValidatingAdmissionPolicy\n" in b]
    return [d for d in YAML(typ="safe", pure=True).load_all(text) if d]


def plain_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def create(cp: ControlPlane, namespace: str, obj: dict[str, Any]) -> Any:
    return cp.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj))


def test_the_readme_policy_covers_exactly_the_kinds_tpu_webhook_is_registered_for() -> None:
    policy, _ = readme_policy()
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    covered = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert covered == {(w.group, w.resource) for w in WORKLOADS.values()}
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in rules)


@pytest.fixture(scope="module")
def opt_out_policy(control_plane: ControlPlane) -> Iterator[list[dict[str, Any]]]:
    """The README's policy with `research` replaced by a namespace of this run, live; a
    Pod labelled before it exists in the other namespace."""
    cp = control_plane
    for name in (LISTED, OTHER):
        cp.kubectl("create", "namespace", name, check=True)
    documents = readme_policy()
    binding = documents[1]
    (names,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert names["values"] == ["research"]
    names["values"] = [LISTED]
    create(cp, OTHER, plain_pod("labelled-before", {OPT_OUT_LABEL: "true"})).check_returncode()
    manifest = "\n".join(json.dumps(d) for d in documents)
    cp.kubectl("apply", "-f", "-", input=manifest, check=True)
    try:
        deadline = time.monotonic() + 60
        probe = plain_pod("probe", {OPT_OUT_LABEL: "true"})
        while VAP_DENIAL not in dry_run(cp, OTHER, probe).stderr:
            assert time.monotonic() < deadline, "the policy never went live"
            time.sleep(0.5)
        yield documents
    finally:
        cp.kubectl("delete", "-f", "-", input=manifest, check=True)
        # gone before other tests label objects (policies leave asynchronously too)
        deadline = time.monotonic() + 60
        while dry_run(cp, OTHER, plain_pod("probe", {OPT_OUT_LABEL: "true"})).returncode != 0:
            assert time.monotonic() < deadline, "the policy never went away"
            time.sleep(0.5)
        for name in (LISTED, OTHER):
            cp.kubectl("delete", "namespace", name, "--wait=false")


def test_the_policy_refuses_a_labelled_pod_outside_the_listed_namespaces(
    control_plane: ControlPlane, opt_out_policy: list[dict[str, Any]]
) -> None:
    proc = create(control_plane, OTHER, plain_pod("labelled", {OPT_OUT_LABEL: "true"}))
    assert proc.returncode != 0
    assert f'pods "labelled" is forbidden: {VAP_DENIAL}' in proc.stderr


def test_the_policy_admits_a_labelled_pod_in_a_listed_namespace(
    control_plane: ControlPlane, opt_out_policy: list[dict[str, Any]]
) -> None:
    proc = create(control_plane, LISTED, plain_pod("labelled", {OPT_OUT_LABEL: "true"}))
    assert proc.returncode == 0, proc.stderr


def test_the_policy_refuses_adding_the_label_later_and_admits_other_values(
    control_plane: ControlPlane, opt_out_policy: list[dict[str, Any]]
) -> None:
    cp = control_plane
    assert create(cp, OTHER, plain_pod("unlabelled")).returncode == 0
    added = cp.kubectl("label", "-n", OTHER, "pod", "unlabelled", f"{OPT_OUT_LABEL}=true")
    assert added.returncode != 0
    assert VAP_DENIAL in added.stderr
    other_value = cp.kubectl("label", "-n", OTHER, "pod", "unlabelled", f"{OPT_OUT_LABEL}=no")
    assert other_value.returncode == 0, other_value.stderr


def test_an_object_labelled_before_the_policy_can_still_be_updated_and_unlabelled(
    control_plane: ControlPlane, opt_out_policy: list[dict[str, Any]]
) -> None:
    # the garbage collector and the Job controller must still write such objects
    cp, at = control_plane, ["-n", OTHER, "pod", "labelled-before"]
    finalizer = {"metadata": {"finalizers": ["example.com/hold"]}}
    held = cp.kubectl("patch", *at, "--type=merge", "-p", json.dumps(finalizer))
    assert held.returncode == 0, held.stderr
    released = cp.kubectl("patch", *at, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    assert released.returncode == 0, released.stderr
    removed = cp.kubectl("label", *at, f"{OPT_OUT_LABEL}-")
    assert removed.returncode == 0, removed.stderr
    again = cp.kubectl("label", *at, f"{OPT_OUT_LABEL}=true")
    assert again.returncode != 0
    assert VAP_DENIAL in again.stderr
