"""What a user reads with `kubectl describe` and `kubectl get events`, as plain facts: a Pod's
phase, why the scheduler left it Pending, its containers' waiting states and restarts, a Job's
conditions, a suspension or a scheduling gate, and the Events about them, newest first."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EVENTS_SHOWN = 6  # the newest Events printed
STUCK_WAITING = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "InvalidImageName",
        "RunContainerError",
    }
)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A container that waits for a reason that does not pass by itself."""

    pod: str
    container: str
    reason: str
    message: str
    restarts: int
    last_exit: str  # `exit code 1 (Error)` of its last termination, or ""


@dataclass(frozen=True, slots=True)
class Unschedulable:
    pod: str
    message: str  # the scheduler's: `0/1 nodes are available: ...`


def mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(mapping(obj.get("metadata")).get("name", ""))


def phase(pod: Mapping[str, Any]) -> str:
    return str(mapping(pod.get("status")).get("phase") or "Unknown")


def conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = mapping(obj.get("status")).get("conditions")
    return [c for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def unschedulable(pod: Mapping[str, Any]) -> Unschedulable | None:
    """PodScheduled=False for the reason Unschedulable, with the scheduler's message."""
    for condition in conditions(pod):
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return Unschedulable(name_of(pod), str(condition.get("message") or ""))
    return None


def waiting(pod: Mapping[str, Any]) -> list[Waiting]:
    """Its containers (init containers too) stuck waiting: crash loops, images not pulled."""
    status = mapping(pod.get("status"))
    found = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or ():
            if not isinstance(container, dict):
                continue
            state = mapping(mapping(container.get("state")).get("waiting"))
            reason = str(state.get("reason") or "")
            if reason not in STUCK_WAITING:
                continue
            last = mapping(mapping(container.get("lastState")).get("terminated"))
            exit_text = ""
            if last:
                exit_text = f"exit code {last.get('exitCode')} ({last.get('reason') or 'Error'})"
            found.append(
                Waiting(
                    name_of(pod),
                    str(container.get("name", "")),
                    reason,
                    str(state.get("message") or ""),
                    int(container.get("restartCount") or 0),
                    exit_text,
                )
            )
    return found


def gates(pod: Mapping[str, Any]) -> list[str]:
    """The Pod's scheduling gates (Kueue's admission and topology gates among them)."""
    found = mapping(pod.get("spec")).get("schedulingGates")
    names = (g.get("name") for g in found if isinstance(g, dict)) if isinstance(found, list) else ()
    return [str(n) for n in names if n]


def true_conditions(obj: Mapping[str, Any], types: Iterable[str]) -> list[Mapping[str, Any]]:
    wanted = set(types)
    return [c for c in conditions(obj) if c.get("type") in wanted and c.get("status") == "True"]


def pod_summary(pods: Sequence[Mapping[str, Any]]) -> str:
    """`4 Pods: 1 Running, 3 Pending`."""
    counts: dict[str, int] = {}
    for pod in pods:
        counts[phase(pod)] = counts.get(phase(pod), 0) + 1
    parts = ", ".join(f"{n} {p}" for p, n in sorted(counts.items(), key=lambda i: -i[1]))
    return f"{len(pods)} Pod{'s' * (len(pods) != 1)}" + (f": {parts}" if parts else "")


def event_time(event: Mapping[str, Any]) -> dt.datetime | None:
    """When it last happened: lastTimestamp, eventTime, series.lastObservedTime, or created."""
    series = mapping(event.get("series")).get("lastObservedTime")
    created = mapping(event.get("metadata")).get("creationTimestamp")
    for value in (event.get("lastTimestamp"), series, event.get("eventTime"), created):
        if isinstance(value, str) and value:
            try:
                return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
    return None


def newest_events(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The newest EVENTS_SHOWN events, newest first (one per uid)."""
    unique = {str(mapping(e.get("metadata")).get("uid") or id(e)): e for e in events}
    floor = dt.datetime.min.replace(tzinfo=dt.UTC)
    ordered = sorted(unique.values(), key=lambda e: event_time(e) or floor, reverse=True)
    return ordered[:EVENTS_SHOWN]


def age(since: dt.datetime | None, now: dt.datetime) -> str:
    """As kubectl prints an age: 45s, 3m12s, 25m, 5h, 3d."""
    if since is None:
        return "<unknown>"
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    return f"{minutes // 60}h" if minutes < 48 * 60 else f"{minutes // 1440}d"


def event_line(event: Mapping[str, Any], now: dt.datetime) -> str:
    """`12s  Warning  FailedScheduling  pod/train-0  0/1 nodes are available: ...`."""
    about = mapping(event.get("involvedObject"))
    count = event.get("count")
    times = f" (x{count})" if isinstance(count, int) and count > 1 else ""
    return (
        f"{age(event_time(event), now)}  {event.get('type', '')}  {event.get('reason', '')}  "
        f"{str(about.get('kind', '')).lower()}/{about.get('name', '')}  "
        f"{' '.join(str(event.get('message') or '').split())}{times}"
    )
