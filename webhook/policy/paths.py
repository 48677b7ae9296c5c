"""Field paths printed the Kubernetes way and addressed the JSON Pointer way.

FieldPath.root("spec").child("containers").index(0).child("resources").key("google.com/tpu")
str(...)      -> "spec.containers[0].resources[google.com/tpu]"
.pointer()    -> "/spec/containers/0/resources/google.com~1tpu"
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldPath:
    parts: tuple[tuple[str, str | int], ...] = ()

    @classmethod
    def root(cls, *names: str) -> FieldPath:
        return cls(tuple(("field", name) for name in names))

    @classmethod
    def of(cls, steps: tuple[str | int, ...]) -> FieldPath:
        """Names and list indices: ("spec", "replicatedJobs", 0) -> spec.replicatedJobs[0]."""
        return cls(tuple(("index", s) if isinstance(s, int) else ("field", s) for s in steps))

    def child(self, *names: str) -> FieldPath:
        return FieldPath((*self.parts, *(("field", name) for name in names)))

    def index(self, position: int) -> FieldPath:
        return FieldPath((*self.parts, ("index", position)))

    def key(self, name: str) -> FieldPath:
        return FieldPath((*self.parts, ("key", name)))

    def __str__(self) -> str:
        text = ""
        for kind, value in self.parts:
            if kind == "field":
                text += f".{value}" if text else str(value)
            else:
                text += f"[{value}]"
        return text

    def pointer(self) -> str:
        return "".join("/" + escape_pointer(str(value)) for _, value in self.parts)


def escape_pointer(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): `~` as `~0`, `/` as `~1`."""
    return token.replace("~", "~0").replace("/", "~1")
