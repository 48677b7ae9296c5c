"""`tpu-webhook` in-process: check, render, explain and certs, with files under tmp_path."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from ruamel.yaml import YAML

from webhook.cli import main

SEEDS = Path(__file__).resolve().parents[1] / "seeds"
BROKEN_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: train-0}
spec:
  nodeSelector:
    cloud.google.com/gke-tpu-accelerator: tpu-v5-lite-podslice
    cloud.google.com/gke-tpu-topology: 2x4
  containers: [{name: main, image: trainer, resources: {limits: {google.com/tpu: 3}}}]
"""
GOOD_POD = BROKEN_POD.replace("google.com/tpu: 3", "google.com/tpu: 8").replace("train-0", "ok-0")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def yaml_documents(text: str) -> list[Any]:
    return [d for d in YAML(typ="safe", pure=True).load_all(text) if d is not None]


@pytest.mark.parametrize(
    ("seed", "headlines"),
    [
        (
            "v4-2x2x4-indexed-job.yaml",
            [
                "Service/headless-svc: admitted",
                "Job/tpu-available-chips: admitted with warnings (patched: 1 operation)",
            ],
        ),
        ("v5e-2x4-single-host-pod.yaml", ["Pod/tpu-job-jax-v5: admitted (patched: 1 operation)"]),
        (
            "jetstream-deployment.yaml",
            ["Deployment/maxengine-server: admitted (patched: 2 operations)"],
        ),
    ],
)
def test_check_admits_each_seed_file(
    capsys: pytest.CaptureFixture[str], seed: str, headlines: list[str]
) -> None:
    code, out, _ = run(capsys, "check", "-f", str(SEEDS / seed))
    assert code == 0
    assert [line for line in out.splitlines() if not line.startswith("  ")] == headlines


def test_check_prints_the_v4_seeds_memory_warning_under_its_job(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = run(capsys, "check", "-f", str(SEEDS / "v4-2x2x4-indexed-job.yaml"))
    assert out.splitlines()[2].startswith(
        "  warning [tpu.resources-exceed-node] spec.template.spec.containers[0].resources."
        'requests[memory]: Invalid value: "500Gi": a ct4p-hightpu-4t VM'
    )


def test_check_of_a_broken_file_exits_1_with_the_code_and_the_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(BROKEN_POD)
    code, out, _ = run(capsys, "check", "-f", str(path))
    assert code == 1
    assert out.splitlines() == [
        "Pod/train-0: denied",
        # the mutating step copied the limit into requests, which is what validation then reads
        "  error [tpu.chips-per-host] spec.containers[0].resources.limits[google.com/tpu]: "
        "Invalid "
        "value: 3: tpu-v5-lite-podslice 2x4 runs 4 or 8 chips per host; set requests and limits "
        "to 4 or 8",
    ]


def test_check_outputs_json_with_the_verdict_and_the_patch(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(BROKEN_POD + "---\n" + GOOD_POD)
    code, out, _ = run(capsys, "check", "-f", str(path), "-o", "json")
    broken, good = json.loads(out)
    assert code == 1
    assert set(broken) == {"kind", "name", "allowed", "violations", "warnings", "patch"}
    assert (broken["kind"], broken["name"], broken["allowed"]) == ("Pod", "train-0", False)
    assert [set(v) for v in broken["violations"]] == [{"code", "field", "message"}]
    assert broken["violations"][0]["code"] == "tpu.chips-per-host"
    assert broken["violations"][0]["field"] == (
        "spec.containers[0].resources.limits[google.com/tpu]"
    )
    assert (good["allowed"], good["violations"], good["warnings"]) == (True, [], [])
    assert [op["op"] for op in good["patch"]] == ["add", "add"]


def test_check_reads_a_duplicate_key_as_kubectl_does_and_warns_with_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # kubectl create keeps the last value without a word; we say so, and decide that object
    path = tmp_path / "dup.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\nspec: {}\n")
    assert run(capsys, "check", "-f", str(path)) == (
        0,
        "Pod/b: admitted\n",
        f"warning: {path}: line 5: duplicate key 'name': kubectl keeps the last value\n",
    )


def test_check_reads_a_value_followed_by_a_tab_as_kubectl_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "tab.yaml"
    path.write_text(BROKEN_POD.replace("name: train-0}", "name: train-0}\t"))
    code, out, err = run(capsys, "check", "-f", str(path))
    assert (code, out.splitlines()[0], err) == (1, "Pod/train-0: denied", "")


def test_check_exits_2_for_a_missing_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.yaml"
    assert run(capsys, "check", "-f", str(missing)) == (
        2,
        "",
        f"error: {missing}: no such file or directory\n",
    )


def test_check_exits_2_for_a_document_that_is_not_an_object(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    assert run(capsys, "check", "-f", str(path)) == (
        2,
        "",
        f"error: {path}: line 1: a document is not a Kubernetes object\n",
    )


def test_check_reads_stdin_for_dash(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(GOOD_POD))
    assert run(capsys, "check", "-f", "-") == (
        0,
        "Pod/ok-0: admitted (patched: 2 operations)\n",
        "",
    )


def test_check_expands_a_list_kind_into_its_items(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    items = yaml_documents(BROKEN_POD + "---\n" + GOOD_POD)
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    code, out, _ = run(capsys, "check", "-f", str(path))
    assert code == 1
    assert [line for line in out.splitlines() if not line.startswith("  ")] == [
        "Pod/train-0: denied",
        "Pod/ok-0: admitted (patched: 2 operations)",
    ]


def test_check_reads_every_manifest_of_a_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "b.yml").write_text(GOOD_POD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yaml").write_text(GOOD_POD.replace("ok-0", "ok-1"))
    (tmp_path / "notes.txt").write_text("not a manifest: {")
    code, out, _ = run(capsys, "check", "-f", str(tmp_path))
    assert code == 0
    assert out.splitlines() == [
        "Pod/ok-0: admitted (patched: 2 operations)",
        "Pod/ok-1: admitted (patched: 2 operations)",
    ]


def test_check_reads_several_filenames(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "check",
        "-f",
        str(SEEDS / "v5e-2x4-single-host-pod.yaml"),
        "-f",
        str(SEEDS / "jetstream-deployment.yaml"),
    )
    assert code == 0
    assert out.splitlines() == [
        "Pod/tpu-job-jax-v5: admitted (patched: 1 operation)",
        "Deployment/maxengine-server: admitted (patched: 2 operations)",
    ]


def test_render_prints_the_stored_job_with_the_worker_variables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "render", "-f", str(SEEDS / "v4-2x2x4-indexed-job.yaml"))
    service, job = yaml_documents(out)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert code == 0
    assert service["kind"] == "Service"
    assert [e["name"] for e in env] == ["TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"]
    assert env[1]["value"] == ",".join(f"tpu-available-chips-{i}.headless-svc" for i in range(4))


def test_render_exits_1_and_reports_denials_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(BROKEN_POD)
    code, out, err = run(capsys, "render", "-f", str(path))
    assert code == 1
    assert yaml_documents(out)[0]["metadata"]["name"] == "train-0"
    assert err.startswith("# Pod/train-0: denied [tpu.chips-per-host] spec.containers[0]")


def test_explain_describes_the_hosts_and_prints_a_job_that_passes_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "explain", "tpu-v4-podslice", "2x2x4")
    header, _, manifests = out.partition("---\n")
    service, job = yaml_documents(manifests)
    assert code == 0
    assert "  2x2x4 = 16 chips at 4 per host needs 4 hosts" in header.splitlines()
    assert (service["kind"], service["spec"]["clusterIP"]) == ("Service", "None")
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (4, 4)
    path = tmp_path / "explained.yaml"
    path.write_text(manifests)
    assert run(capsys, "check", "-f", str(path)) == (
        0,
        "Service/tpu-job: admitted\nJob/tpu-job: admitted (patched: 2 operations)\n",
        "",
    )


def test_explain_prints_a_jobset_for_the_slice_that_passes_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(capsys, "explain", "tpu-v6e-slice", "4x4", "--kind", "jobset")
    _, _, manifests = out.partition("---\n")
    (jobset,) = yaml_documents(manifests)
    assert code == 0
    assert jobset["kind"] == "JobSet"
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (4, 4, "Indexed")
    path = tmp_path / "jobset.yaml"
    path.write_text(manifests)
    assert run(capsys, "check", "-f", str(path)) == (
        0,
        "JobSet/tpu-jobset: admitted (patched: 1 operation)\n",
        "",
    )


def test_explain_without_a_topology_lists_what_the_accelerator_offers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "explain", "tpu-v5-lite-podslice")
    assert code == 0
    assert "  topologies: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16" in out.splitlines()
    assert "    2x4: 8 chips at 8 per host needs 1 host; 8 chips at 4 per host needs 2 hosts" in (
        out.splitlines()
    )


def test_explain_of_a_typo_exits_1_with_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "explain", "tpu-v5p-slise") == (
        1,
        "",
        "error: tpu-v5p-slise is not in the TPU catalog; did you mean tpu-v5p-slice?\n",
    )


def test_explain_of_a_topology_not_offered_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "explain", "tpu-v5-lite-podslice", "2x3")
    assert code == 1
    assert err == "error: tpu-v5-lite-podslice offers 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16\n"


def test_certs_writes_a_ca_and_a_serving_cert_for_the_service_names(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "certs"
    code, out, _ = run(
        capsys,
        "certs",
        "--out",
        str(out_dir),
        "--service",
        "s",
        "--namespace",
        "n",
        "--dns",
        "extra.example",
    )
    serving = x509.load_pem_x509_certificate((out_dir / "tls.crt").read_bytes())
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert code == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert base64.b64decode(out.strip()) == (out_dir / "ca.crt").read_bytes()
    assert sans.get_values_for_type(x509.DNSName) == [
        "s",
        "s.n",
        "s.n.svc",
        "s.n.svc.cluster.local",
        "extra.example",
    ]
    assert sans.get_values_for_type(x509.IPAddress) == []
    ca = x509.load_pem_x509_certificate((out_dir / "ca.crt").read_bytes())
    assert serving.issuer == ca.subject
    assert oct((out_dir / "tls.key").stat().st_mode & 0o777) == "0o600"


CLASS_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: vllm}
spec:
  nodeSelector: {cloud.google.com/compute-class: tpu-v6e-2x2}
  containers: [{name: server, image: vllm, resources: {limits: {google.com/tpu: 8}}}]
"""
COMPUTE_CLASSES = """\
apiVersion: v1
kind: List
items:
- apiVersion: cloud.google.com/v1
  kind: ComputeClass
  metadata: {name: tpu-v6e-2x2}
  spec:
    priorities:
    - tpu: {type: tpu-v6e-slice, count: 4, topology: 2x2}
"""


def test_check_reads_compute_classes_from_a_cluster_export(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "pod.yaml").write_text(CLASS_POD)
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "computeclasses.yaml").write_text(COMPUTE_CLASSES)
    code, out, _ = run(
        capsys,
        "check",
        "-f",
        str(tmp_path / "pod.yaml"),
        "--cluster-objects",
        str(tmp_path / "cluster"),
    )
    assert code == 1
    assert out.splitlines()[0] == "Pod/vllm: denied"
    assert "compute class tpu-v6e-2x2 priority 1 (tpu-v6e-slice 2x2, 4 chips per node)" in out


def test_check_reads_a_compute_class_given_with_the_manifests(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    manifest = COMPUTE_CLASSES.split("items:\n- ", 1)[1].replace("\n  ", "\n") + "---\n" + CLASS_POD
    (tmp_path / "all.yaml").write_text(manifest)
    code, out, _ = run(capsys, "check", "-f", str(tmp_path / "all.yaml"), "-o", "json")
    results = json.loads(out)
    assert code == 1
    assert [(r["kind"], r["allowed"]) for r in results] == [("ComputeClass", True), ("Pod", False)]
    assert {v["code"] for v in results[1]["violations"]} == {"tpu.compute-class-mismatch"}


def test_check_without_the_class_warns_that_it_was_not_checked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "pod.yaml").write_text(CLASS_POD)
    code, out, _ = run(capsys, "check", "-f", str(tmp_path / "pod.yaml"), "-o", "json")
    (result,) = json.loads(out)
    assert code == 0
    assert [w["code"] for w in result["warnings"]] == ["tpu.compute-class-unknown"]
