"""The image built from the Dockerfile and run as the chart's Pod spec says.

docker/build-local.sh builds it with buildah on a Debian bookworm root file system (the shipped
Dockerfile's python base is not reachable from here: the same Debian release and Python minor
version, checked here) and caches it by its inputs. The image holds exactly the locked
distributions, no pip, setuptools or wheel, and its SBOM, which lists them. podman runs it
with the flags derived from the chart's rendered Deployment (tests/support/image.py): uid/gid
65532, read-only root, all capabilities dropped, no privilege escalation, the TLS Secret mounted
read-only, /tmp as the emptyDir, the chart's environment. The figures (size, start-up time,
build time) are printed at the end of the session.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name
from ruamel.yaml import YAML

from dev.lock import RUNTIME_LOCK
from dev.processes import free_port
from dev.tools import tools_dir
from tests.support.audit import LIST_DISTRIBUTIONS, lock_packages, sbom_packages
from tests.support.image import (
    BuiltImage,
    container_pid,
    machine_run_args,
    pod_run_args,
    podman,
    proc_ids,
)
from tests.support.webhook_process import make_certs

pytestmark = [pytest.mark.e2e, pytest.mark.debian]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "tpu-webhook"
SEED = REPO_ROOT / "tests" / "seeds" / "v4-2x2x4-indexed-job.yaml"
READY_TIMEOUT_S = 30
#: 307 MiB measured (README.md, "What the image contains"): the Debian-built base 113 MB, the
#: venv 212 MB, of which the `kubernetes` client of the selfManaged certificate mode is 123 MB
#: (68 MB of it its asyncio copy, with aiohttp's 13 MB). A ceiling catches a build that ships
#: sources, caches or a second copy of something.
MAX_SIZE_BYTES = 340 * 1024 * 1024
DOCKERFILE = REPO_ROOT / "Dockerfile"


@dataclass
class Running:
    name: str
    base: str
    tls: ssl.SSLContext
    startup_seconds: float

    def request(self, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base + path, data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, context=self.tls, timeout=5) as resp:
            return int(resp.status), json.loads(resp.read())


def render_deployment(image: BuiltImage) -> dict[str, Any]:
    proc = subprocess.run(
        [
            str(tools_dir() / "helm"),
            "template",
            "tpu",
            str(CHART),
            "-n",
            "tpu-system",
            "--set",
            f"image.repository={image.repository}",
            "--set",
            f"image.tag={image.tag}",
            "--show-only",
            "templates/deployment.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    deployment: dict[str, Any] = YAML(typ="safe", pure=True).load(proc.stdout)
    return deployment


@pytest.fixture(scope="module")
def deployment(built_image: BuiltImage) -> dict[str, Any]:
    return render_deployment(built_image)


# No API server here: the chart's cluster reads and owner Events (on by default) are off for the
# run; they are tested against a real one in tests/e2e. Without this the server stops at once, as
# tested below.
OUTSIDE_A_CLUSTER = [
    "--env",
    "TPU_WEBHOOK_CLUSTER_OBJECTS=false",
    "--env",
    "TPU_WEBHOOK_OWNER_EVENTS=false",
]


def test_the_chart_pod_outside_a_cluster_says_what_it_misses(
    built_image: BuiltImage, deployment: dict[str, Any], tmp_path: Path
) -> None:
    make_certs(tmp_path)
    for f in tmp_path.iterdir():
        f.chmod(0o644)
    tmp_path.chmod(0o755)
    (secret,) = [
        v["secret"]["secretName"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    ]
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "TPU_WEBHOOK_CLUSTER_OBJECTS", "value": "true"} in env
    run = ["podman", "run", "--rm", *machine_run_args()]
    run += [*pod_run_args(deployment, {secret: tmp_path}), built_image.ref]
    done = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: no credentials for the API server (Service host/port is not set.)" in done.stderr


@pytest.fixture(scope="module")
def running(
    built_image: BuiltImage,
    deployment: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
    image_figures: dict[str, str],
) -> Iterator[Running]:
    """The image run with the chart's Pod spec; the TLS Secret's files as the kubelet mounts them
    (mode 0644, a read-only directory)."""
    certs = tmp_path_factory.mktemp("image-certs")
    make_certs(certs)
    for f in certs.iterdir():
        f.chmod(0o644)
    certs.chmod(0o755)  # pytest's temp folders are 0700: uid 65532 could not enter
    (secret,) = [
        v["secret"]["secretName"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    ]
    port = free_port()
    name = f"tpu-webhook-image-test-{uuid.uuid4().hex[:8]}"
    args = [
        "run",
        "--detach",
        "--name",
        name,
        *machine_run_args(),
        *pod_run_args(deployment, {secret: certs}),
        *OUTSIDE_A_CLUSTER,
        "--publish",
        f"127.0.0.1:{port}:8443",
        built_image.ref,
    ]
    tls = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    began = time.monotonic()
    podman(*args)
    try:
        server = Running(name, f"https://127.0.0.1:{port}", tls, 0.0)
        server.startup_seconds = wait_ready(server) - began
        image_figures["start-up (podman run -> /readyz 200)"] = f"{server.startup_seconds:.2f} s"
        yield server
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


def wait_ready(server: Running) -> float:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: object = None
    while time.monotonic() < deadline:
        try:
            status, _ = server.request("/readyz")
            if status == 200:
                return time.monotonic()
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            last = exc
        time.sleep(0.05)
    logs = podman("logs", server.name, check=False)
    pytest.fail(f"no /readyz within {READY_TIMEOUT_S} s ({last!r}):\n{logs}")


def seed_review(operation: str = "CREATE") -> dict[str, Any]:
    docs = YAML(typ="safe", pure=True).load_all(SEED.read_text())
    job = next(d for d in docs if d and d["kind"] == "Job")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "b5a6b3d2-0000-4000-8000-000000000014",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "operation": operation,
            "namespace": "team-a",
            "name": job["metadata"]["name"],
            "object": job,
            "oldObject": None,
            "dryRun": False,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        },
    }


# ------------------------------------------------------------------------------ the image


def test_image_is_built_from_the_dockerfile_within_its_size_ceiling(
    built_image: BuiltImage, image_figures: dict[str, str]
) -> None:
    image_figures["image"] = built_image.ref
    image_figures["size"] = f"{built_image.size_bytes / 1048576:.0f} MiB (uncompressed)"
    image_figures["archive"] = f"{built_image.archive.stat().st_size / 1048576:.0f} MiB"
    image_figures["build (cache entry)"] = f"{built_image.build_seconds} s"
    image_figures["build-local.sh this run"] = f"{built_image.elapsed_seconds:.1f} s"
    config = json.loads(podman("image", "inspect", built_image.ref))[0]["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["tpu-webhook", "serve"]
    assert "8443/tcp" in config["ExposedPorts"]
    assert config["Labels"]["org.opencontainers.image.version"] == built_image.tag.split("-")[0]
    assert 0 < built_image.size_bytes < MAX_SIZE_BYTES


def test_image_ships_the_venv_but_no_sources_pip_or_build_secret(built_image: BuiltImage) -> None:
    listing = podman(
        "run",
        "--rm",
        *machine_run_args(),
        "--entrypoint",
        "/bin/sh",
        built_image.ref,
        "-c",
        "ls /opt/venv/bin; ls -d /src /run/secrets /opt/venv/bin/pip 2>&1; id -u; id -g",
    )
    assert "tpu-webhook" in listing.split()
    assert "No such file or directory" in listing
    for absent in ("/src", "/run/secrets", "/opt/venv/bin/pip"):
        assert f"cannot access '{absent}'" in listing
    assert listing.split()[-2:] == ["65532", "65532"]


def in_image(
    image: BuiltImage, entrypoint: str, *args: str, user: str = "65532:65532"
) -> subprocess.CompletedProcess[str]:
    """`podman run` of one command in the image (not the server), whatever its exit status."""
    return subprocess.run(
        ["podman", "run", "--rm", *machine_run_args(), "--user", user,
         "--entrypoint", entrypoint, image.ref, *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def canonical(packages: list[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(canonicalize_name(name), version) for name, version in packages}


def test_pip_setuptools_and_wheel_are_absent_from_the_image(built_image: BuiltImage) -> None:
    pip = in_image(built_image, "pip", "--version")
    assert pip.returncode != 0
    assert 'exec: "pip": executable file not found in $PATH' in pip.stderr
    module = in_image(built_image, "python3", "-m", "pip", "--version")
    assert module.returncode == 1
    assert "No module named pip" in module.stderr
    # Neither the venv's interpreter nor the base's own (its site-packages) finds one of them.
    probe = (
        "import importlib.util as u, sys; "
        "print(sys.prefix, [m for m in ('pip', 'setuptools', 'wheel', 'pkg_resources', "
        "'ensurepip') if u.find_spec(m)])"
    )
    base = "$(readlink -f /opt/venv/bin/python3)"
    script = f'for py in python3 "{base}"; do "$py" -I -c "{probe}"; done'
    found = in_image(built_image, "/bin/sh", "-c", script)
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert [line.split()[1:] for line in lines] == [["[]"], ["[]"]]
    assert lines[0].split()[0] == "/opt/venv"
    assert lines[1].split()[0] != "/opt/venv"
    # Nor Debian's wheels for them, nor its packages in dpkg's database (what scanners read).
    debian = in_image(
        built_image,
        "/bin/sh",
        "-c",
        "ls /usr/share/python-wheels; dpkg-query --show --showformat '${db:Status-Status} "
        "${Package}\\n' 'python3*-venv' 'python3-pip*' 'python3-setuptools*' 'python3-wheel*' "
        "python3.11-minimal | grep '^installed '",
    )
    assert "cannot access '/usr/share/python-wheels'" in debian.stderr
    assert debian.stdout.split() == ["installed", "python3.11-minimal"]  # the query works


def test_the_image_carries_the_sbom_written_next_to_it(built_image: BuiltImage) -> None:
    labels = json.loads(podman("image", "inspect", built_image.ref))[0]["Config"]["Labels"]
    assert labels["io.tpu-webhook.sbom"] == built_image.sbom_in_image
    carried = in_image(built_image, "cat", built_image.sbom_in_image)
    assert carried.returncode == 0, carried.stderr
    assert carried.stdout == built_image.sbom.read_text()
    assert json.loads(carried.stdout)["bomFormat"] == "CycloneDX"


def test_the_sbom_lists_exactly_the_image_venv_which_is_the_lock(
    built_image: BuiltImage, image_figures: dict[str, str]
) -> None:
    listed = in_image(built_image, "python3", "-I", "-c", LIST_DISTRIBUTIONS)
    assert listed.returncode == 0, listed.stderr
    in_venv = canonical([(name, version) for name, version in json.loads(listed.stdout)])
    assert canonical(sbom_packages(built_image.sbom)) == in_venv
    version = next(v for name, v in in_venv if name == "tpu-webhook")
    assert in_venv == canonical(lock_packages(RUNTIME_LOCK)) | {("tpu-webhook", version)}
    image_figures["SBOM"] = f"{len(in_venv)} distributions (tpu-webhook and {len(in_venv) - 1})"


#: What the official python image has (under /usr/local), planted in the Debian base's own site
#: and scripts directories (shell variables $site and $scripts) for remove-installers.sh to find.
PLANTED = [
    "$site/pip/__init__.py", "$site/pip-24.0.dist-info/METADATA",
    "$site/setuptools/__init__.py", "$site/setuptools-65.5.1.dist-info/METADATA",
    "$site/pkg_resources/__init__.py", "$site/_distutils_hack/__init__.py",
    "$site/distutils-precedence.pth", "$site/wheel/__init__.py",
    "$scripts/pip", "$scripts/pip3", "$scripts/pip3.11", "$scripts/wheel",
]  # fmt: skip
SYSCONFIG = "python3 -I -c \"import sysconfig; print(sysconfig.get_path('{}'))\""


def run_remove_installers(image: BuiltImage, plant: list[str]) -> subprocess.CompletedProcess[str]:
    """docker/remove-installers.sh run as root in the base, after the files `plant` were made;
    prints "removed" when it succeeded, then "left: PATH" for each of them still there."""
    script = REPO_ROOT / "docker" / "remove-installers.sh"
    shell = (
        f"site=$({SYSCONFIG.format('purelib')}); scripts=$({SYSCONFIG.format('scripts')}); "
        f"stdlib=$({SYSCONFIG.format('stdlib')}); "
        + "".join(f'mkdir -p "$(dirname "{f}")" && touch "{f}"; ' for f in plant)
        + "sh /run/remove-installers.sh >&2 && echo removed; "
        + "".join(f'test -e "{f}" && echo "left: {f}"; ' for f in plant)
        + "true"
    )
    return subprocess.run(
        ["podman", "run", "--rm", *machine_run_args(), "--user", "0:0",
         "--volume", f"{script}:/run/remove-installers.sh:ro", "--entrypoint", "/bin/sh",
         image.base, "-c", shell],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_remove_installers_removes_what_the_official_base_has(built_image: BuiltImage) -> None:
    proc = run_remove_installers(built_image, PLANTED)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["removed"], proc.stdout + proc.stderr


def test_remove_installers_fails_when_one_is_left_importable(built_image: BuiltImage) -> None:
    """A pip where the script does not look (the standard library's directory) is found."""
    proc = run_remove_installers(built_image, ["$stdlib/pip/__init__.py"])
    assert "remove-installers.sh: still importable: ['pip']" in proc.stderr
    assert proc.stdout.splitlines() == ["left: /usr/lib/python3.11/pip/__init__.py"]


def test_the_test_base_has_the_shipped_base_s_debian_release_and_python_minor(
    built_image: BuiltImage,
) -> None:
    """The shipped base is python:3.X.Y-slim-<codename>; the base built here is Debian's."""
    shipped = re.search(
        r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)\.\d+-slim-([a-z]+)@", DOCKERFILE.read_text(), re.M
    )
    assert shipped is not None
    minor, codename = shipped.groups()
    probe = in_image(
        built_image,
        "/bin/sh",
        "-c",
        '. /etc/os-release; echo "$VERSION_CODENAME"; '
        "python3 -c 'import sys; print(*sys.version_info[:2], sep=\".\")'",
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == [codename, minor]


# ------------------------------------------------------------------- run as the chart runs it


def test_readyz_answers_over_verified_tls(running: Running) -> None:
    status, body = running.request("/readyz")
    assert status == 200
    assert body["status"] == "ok"
    assert running.startup_seconds < READY_TIMEOUT_S


def test_server_runs_as_65532_with_a_read_only_root(running: Running) -> None:
    uids, gids = proc_ids(container_pid(running.name))
    assert set(uids) == {"65532"}
    assert set(gids) == {"65532"}
    root = subprocess.run(
        ["podman", "exec", running.name, "touch", "/opt/venv/written"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert root.returncode != 0
    assert "Read-only file system" in root.stderr
    tmp = subprocess.run(
        ["podman", "exec", running.name, "touch", "/tmp/written"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert tmp.returncode == 0, tmp.stderr


def test_a_review_is_answered_with_the_tpu_patch(running: Running) -> None:
    status, body = running.request("/mutate", seed_review())
    assert status == 200
    response = body["response"]
    assert response["uid"] == "b5a6b3d2-0000-4000-8000-000000000014"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    env_ops = [op for op in patch if op["path"].endswith("/env")]
    (env_op,) = env_ops
    names = [e["name"] for e in env_op["value"]]
    assert names == ["TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"]
    status, body = running.request("/validate", seed_review())
    assert status == 200
    assert body["response"]["allowed"] is True


def test_server_stops_cleanly_on_sigterm(running: Running, image_figures: dict[str, str]) -> None:
    began = time.monotonic()
    podman("stop", "--time", "30", running.name, timeout=60)
    image_figures["stop (SIGTERM -> exit)"] = f"{time.monotonic() - began:.2f} s"
    state = json.loads(podman("inspect", running.name))[0]["State"]
    assert state["ExitCode"] == 0, podman("logs", running.name, check=False)
