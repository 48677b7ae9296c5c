"""One kubelet per machine: a second ClusterNode waits for the first one's lock and gives up
with a message that says why, without starting anything. Uses its own lock path, so it never
contends with a real node of another session, and starts no node: it needs none of the node's
Debian packages (their check is stubbed, and tested by itself)."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest

from tests.support import node as node_module
from tests.support import node_cleanup
from tests.support.node import ClusterNode, NodeError


@pytest.fixture
def private_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    lock = tmp_path / "node.lock"
    monkeypatch.setattr(node_module, "LOCK_FILE", lock)
    monkeypatch.setattr(node_module, "STATE_FILE", tmp_path / "node.json")
    return lock


def test_a_node_without_its_debian_packages_says_which_and_takes_no_lock(
    private_lock: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_module, "missing_debian_tools", lambda: ["containerd", "runc"])
    node = ClusterNode(tmp_path / "no-tools", lock_timeout=0.5)
    with pytest.raises(NodeError, match=r"^missing Debian packages: containerd runc \(make setup"):
        node.start()
    assert not private_lock.exists()
    assert node.control_plane is None


def test_a_second_node_is_refused_while_the_lock_is_held(
    private_lock: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_module, "missing_debian_tools", lambda: [])  # the lock is next
    with private_lock.open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = ClusterNode(tmp_path / "no-tools", lock_timeout=0.5)
        with pytest.raises(
            NodeError, match=r"another test session holds .* \(one kubelet per machine\)"
        ):
            second.start()
    assert second.control_plane is None  # nothing was started
    assert not (tmp_path / "node.json").exists()


def test_a_dead_nodes_leftovers_are_cleaned_before_the_next_start(
    private_lock: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "tpu-webhook-node-dead"
    (workdir / "kubelet").mkdir(parents=True)
    state = {
        "owner": 1,
        "workdir": str(workdir),
        "containerd_socket": str(workdir / "containerd" / "containerd.sock"),
        "pids": [],
        "netns_before": [],
        "kubepods_before": True,  # leave the machine's cgroups alone in this test
    }
    (tmp_path / "node.json").write_text(json.dumps(state))
    monkeypatch.setattr(node_cleanup, "NETNS_DIR", tmp_path / "no-netns")
    monkeypatch.setattr(node_cleanup, "CONTAINER_LOGS_DIR", tmp_path / "no-logs")
    monkeypatch.setattr(node_cleanup, "RUN_CONTAINERD", tmp_path / "no-run-containerd")
    monkeypatch.setattr(node_cleanup, "BRIDGE", "tpuwh-none")  # a real node's bridge stays
    node = ClusterNode(tmp_path / "no-tools", lock_timeout=0.5)
    node._acquire_lock()
    try:
        node._recover_stale()
    finally:
        node._release_lock()
    assert not workdir.exists()
    assert not (tmp_path / "node.json").exists()
