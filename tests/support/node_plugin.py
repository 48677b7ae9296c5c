"""Pytest plugin: the built image (``built_image``) and the one-node cluster (``cluster_node``;
``dra_cluster_node``: the same as a node of a TPU DRA node pool, without the image).

Loaded from ``tests/conftest.py``. Like the control plane's tools, the image is built (or found
in its cache) during collection, and only when a collected test uses one of these fixtures, so a
cold build does not count against a test's timeout. ``cluster_node`` is separate from
``control_plane`` and lives for one test module: tests that do not need a kubelet never start
one, and none keeps running after its module. Figures (image size and
start-up, node start-up, the scenarios' counts) are printed in the terminal summary.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from dev.tools import REPO_ROOT, tools_dir
from tests.support.image import BuiltImage
from tests.support.image import built_image as build_image
from tests.support.node import DRA_NODE_LABELS, ClusterNode

IMAGE_FIXTURES = {"built_image", "cluster_node"}

_image_error = pytest.StashKey[BaseException]()
_figures = pytest.StashKey[dict[str, dict[str, str]]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_figures] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.option.collectonly:
        return
    if any(IMAGE_FIXTURES & set(getattr(item, "fixturenames", ())) for item in items):
        try:
            build_image()
        except Exception as exc:  # reported by the fixture, per test
            config.stash[_image_error] = exc


def _figures_of(config: pytest.Config, section: str) -> dict[str, str]:
    return config.stash[_figures].setdefault(section, {})


@pytest.fixture(scope="session")
def built_image(request: pytest.FixtureRequest, debian_packages: None) -> BuiltImage:
    """The image from the repository's Dockerfile (docker/build-local.sh, cached by inputs)."""
    if _image_error in request.config.stash:
        raise request.config.stash[_image_error]
    return build_image()


@pytest.fixture(scope="session")
def image_figures(request: pytest.FixtureRequest) -> dict[str, str]:
    return _figures_of(request.config, "image")


@pytest.fixture(scope="session")
def node_figures(request: pytest.FixtureRequest) -> dict[str, str]:
    return _figures_of(request.config, "one-node cluster")


@pytest.fixture(scope="session")
def certificate_figures(request: pytest.FixtureRequest) -> dict[str, str]:
    """Figures of the selfManaged certificate mode (start-up, renewals, create loops)."""
    return _figures_of(request.config, "selfManaged certificates")


@pytest.fixture(scope="session")
def deletion_figures(request: pytest.FixtureRequest) -> dict[str, str]:
    """How long the orphaning deletes of owners with the real operators took."""
    return _figures_of(request.config, "orphaning deletes")


@pytest.fixture(scope="module")
def cluster_node(
    request: pytest.FixtureRequest, built_image: BuiltImage, node_figures: dict[str, str]
) -> Iterator[ClusterNode]:
    """A control plane and one kubelet node (TPU-labelled) with the webhook image imported.

    Per module: the kubelet, containerd and their Pods stop when the module's tests are done,
    so they do not load the machine during the rest of the session.
    """
    node = ClusterNode(tools_dir(), images=[built_image.archive])
    yield from _run_node(request, node, node_figures, "")


@pytest.fixture(scope="module")
def dra_cluster_node(
    request: pytest.FixtureRequest, debian_packages: None, node_figures: dict[str, str]
) -> Iterator[ClusterNode]:
    """The same one-node cluster as a node of a pool GKE gives to the TPU DRA driver: its
    labels (DRA_NODE_LABELS), no ``google.com/tpu`` advertised, no webhook image. Per module."""
    node = ClusterNode(tools_dir(), labels=DRA_NODE_LABELS, tpu_chips=0)
    yield from _run_node(request, node, node_figures, "DRA ")


def _run_node(
    request: pytest.FixtureRequest, node: ClusterNode, node_figures: dict[str, str], kind: str
) -> Iterator[ClusterNode]:
    """Start `node`, record its figures, and stop it (keeping its logs if a test failed)."""
    node.start()
    node_figures[f"{kind}node start (control plane, containerd, kubelet, Ready)"] = (
        f"{node.start_seconds:.1f} s"
    )
    for step, seconds in node.figures.items():
        node_figures[f"  {kind}{step}"] = f"{seconds:.1f} s"
    failed_before = request.session.testsfailed
    try:
        yield node
    finally:
        keep = None
        if request.session.testsfailed > failed_before:
            stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
            keep = REPO_ROOT / ".e2e-logs" / f"node-{stamp}"
        kept = node.stop(keep_logs_in=keep)
        if kept is not None:
            node_figures[f"{kind}logs kept in"] = str(kept)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for section, figures in terminalreporter.config.stash.get(_figures, {}).items():
        if not figures:
            continue
        terminalreporter.write_sep("-", f"figures: {section}")
        for name, value in figures.items():
            terminalreporter.write_line(f"{name}: {value}")
