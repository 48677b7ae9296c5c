"""Field paths printed the Kubernetes way and addressed the JSON Pointer way.

FieldPath.root("spec").child("containers").index(0).child("resources").key("google.com/tpu")
str(...)      -> "spec.containers[0].resources[google.com/tpu]"
.pointer()    -> "/spec/containers/0/resources/google.com~1tpu"
"""

from __future__ import annotations


class FieldPath:
    """An immutable value. (A plain class: several are made per review, and a frozen dataclass
    pays an object.__setattr__ call for its field.)"""

    __slots__ = ("parts",)

    def __init__(self, parts: tuple[tuple[str, str | int], ...] = ()) -> None:
        self.parts = parts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldPath) and self.parts == other.parts

    def __hash__(self) -> int:
        return hash(self.parts)

    @classmethod
    def root(cls, *names: str) -> FieldPath:
        return cls(tuple(("field", name) for name in names))

    @classmethod
    def of(cls, steps: tuple[str | int, ...]) -> FieldPath:
        """Names and list indices: ("spec", "replicatedJobs", 0) -> spec.replicatedJobs[0]."""
        return cls(tuple(("index", s) if isinstance(s, int) else ("field", s) for s in steps))

    def child(self, *names: str) -> FieldPath:
        if len(names) == 1:
            return FieldPath((*self.parts, ("field", names[0])))
        return FieldPath((*self.parts, *(("field", name) for name in names)))

    def index(self, position: int) -> FieldPath:
        return FieldPath((*self.parts, ("index", position)))

    def key(self, name: str) -> FieldPath:
        return FieldPath((*self.parts, ("key", name)))

    def __repr__(self) -> str:
        return f"FieldPath({self.parts!r})"

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


def from_pointer(pointer: str) -> FieldPath:
    """`/spec/containers/0/env` -> spec.containers[0].env (a number is taken for an index)."""
    steps: list[str | int] = []
    for token in pointer.strip("/").split("/") if pointer.strip("/") else ():
        token = token.replace("~1", "/").replace("~0", "~")
        steps.append(int(token) if token.isdigit() else token)
    return FieldPath.of(tuple(steps))


def escape_pointer(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901): `~` as `~0`, `/` as `~1`."""
    return token.replace("~", "~0").replace("/", "~1")
