"""Undoing a one-node cluster: what its processes leave on the machine outside its folder.

A node records what it started and what the machine looked like before (tests/support/node.py
keeps that state in a file), so a node that stopped cleanly and one whose session was killed are
cleaned the same way: kill its processes and containerd's shims (found by the node's unique
socket path), unmount and remove its folder, the Pod network namespaces and bridge it made, the
kubelet's cgroups and log links, and restore ip_forward.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.node_config import BRIDGE, CTR_NAMESPACE

NETNS_DIR = Path("/run/netns")
CONTAINER_LOGS_DIR = Path("/var/log/containers")  # the kubelet's fixed symlink folder
CGROUP_ROOT = Path("/sys/fs/cgroup")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
RUN_CONTAINERD = Path("/run/containerd")  # shim sockets and runc state: fixed paths in 1.6


def machine_state() -> dict[str, Any]:
    """What the cleanup must leave as it found it."""
    return {
        "netns_before": sorted(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else [],
        "kubepods_before": (CGROUP_ROOT / "memory" / "kubepods").exists(),
        "ip_forward_before": IP_FORWARD.read_text().strip(),
        "run_containerd_before": RUN_CONTAINERD.exists(),
        "netns_dir_before": NETNS_DIR.exists(),
    }


def _mounts_below(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first (from /proc/self/mountinfo)."""
    prefix = str(root).rstrip("/")
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def _umount_below(root: Path) -> None:
    for point in _mounts_below(root):
        subprocess.run(["umount", "--lazy", point], capture_output=True, timeout=30, check=False)


def _pids_with(needle: str) -> list[int]:
    """PIDs whose command line contains `needle` (this node's unique socket path)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace"
            ):
                found.append(int(proc.name))
    return found


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _remove_cgroups(name: str) -> None:
    """rmdir /sys/fs/cgroup/<controller>/<name> and everything below, deepest first."""
    for controller in CGROUP_ROOT.iterdir():
        top = controller / name
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, top]:
            with contextlib.suppress(OSError):
                d.rmdir()


def clean_up(state: dict[str, Any]) -> None:
    """Undo what a node recorded in its state, whether it stopped cleanly or died."""
    workdir = Path(state["workdir"])
    _kill([p for p in state.get("pids", []) if p != os.getpid()])
    _kill(_pids_with(state["containerd_socket"]))  # the shims outlive containerd
    _umount_below(workdir)
    _remove_network(state)
    if not state.get("kubepods_before", False):
        _remove_cgroups("kubepods")
    _remove_log_links(workdir)
    _remove_runtime_dirs(state)
    if "ip_forward_before" in state:
        with contextlib.suppress(OSError):
            IP_FORWARD.write_text(state["ip_forward_before"])
    shutil.rmtree(workdir, ignore_errors=True)


def _remove_network(state: dict[str, Any]) -> None:
    for ns in sorted(set(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else set()):
        if ns not in state.get("netns_before", []):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)


def _remove_log_links(workdir: Path) -> None:
    if CONTAINER_LOGS_DIR.is_dir():
        for link in CONTAINER_LOGS_DIR.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(workdir)):
                    link.unlink()


def _remove_runtime_dirs(state: dict[str, Any]) -> None:
    """containerd's fixed runtime folders (shim sockets, runc state): only empty ones go."""
    for d in (
        RUN_CONTAINERD / "s",
        RUN_CONTAINERD / "runc" / CTR_NAMESPACE,
        RUN_CONTAINERD / "runc",
    ):
        with contextlib.suppress(OSError):
            d.rmdir()
    for d, existed in ((RUN_CONTAINERD, "run_containerd_before"), (NETNS_DIR, "netns_dir_before")):
        if not state.get(existed, True):
            with contextlib.suppress(OSError):
                d.rmdir()  # only when empty
