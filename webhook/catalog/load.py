"""Read, validate and merge catalog files into an indexed `Catalog`.

The packaged `tpus.yaml` is always loaded; an operator's file (`--catalog`) extends it: an
accelerator with a known name replaces the packaged entry, a new name is added.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from webhook.catalog.quantity import QuantityError, parse_quantity
from webhook.catalog.tpu import (
    Autopilot,
    Catalog,
    DraDriver,
    MachineType,
    Port,
    build_accelerator,
    build_catalog,
    topology_dimensions,
)


class CatalogError(ValueError):
    """A catalog file that cannot be used; the message names the file and the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Port(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", max_length=15)
    container_port: int = Field(alias="containerPort", ge=1, le=65535)


class _MachineType(_Model):
    name: str = Field(min_length=1)
    chips: int = Field(gt=0)
    # Omitted where no public source gives the figure: requests are then not checked against it.
    cpu: str | None = None
    memory: str | None = None
    unconfirmed: tuple[Literal["cpu", "memory"], ...] = ()

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _quantity(cls, value: Any) -> str | None:
        if value is None:
            return None
        try:
            parse_quantity(value)
        except QuantityError as error:
            raise ValueError(
                f"must be a Kubernetes quantity such as 240 or 407G: {error}"
            ) from None
        return str(value)


class _MultiHost(_Model):
    chips_per_host: int = Field(alias="chipsPerHost", gt=0)
    topologies: tuple[str, ...] = ()
    multiple_of: int | None = Field(default=None, alias="multipleOf", gt=0)
    max_chips: int | None = Field(default=None, alias="maxChips", gt=0)

    @model_validator(mode="after")
    def _rule_is_complete(self) -> _MultiHost:
        if (self.multiple_of is None) != (self.max_chips is None):
            raise ValueError("multipleOf and maxChips go together")
        return self


class _Xpk(_Model):
    """How xpk names the accelerator's device types: `<prefix>-<TensorCores>` (`v5p-128`)."""

    prefix: str = Field(min_length=1, max_length=63)
    cores_per_chip: int = Field(default=1, alias="coresPerChip", ge=1, le=16)


class _Accelerator(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$", max_length=63)
    generation: str = ""
    dimensions: int = Field(ge=2, le=3)
    machine_types: tuple[_MachineType, ...] = Field(alias="machineTypes", min_length=1)
    single_host: tuple[str, ...] = Field(default=(), alias="singleHost")
    multi_host: _MultiHost | None = Field(default=None, alias="multiHost")
    multiple_tpu_containers: bool = Field(default=False, alias="multipleTpuContainers")
    aliases: tuple[str, ...] = ()
    dynamic_slicing: bool = Field(default=False, alias="dynamicSlicing")
    dra_generation: str | None = Field(default=None, alias="draGeneration", min_length=1)
    xpk: _Xpk | None = None

    @model_validator(mode="after")
    def _topologies_fit(self) -> _Accelerator:
        multi = self.multi_host.topologies if self.multi_host else ()
        chips = {m.chips for m in self.machine_types}
        for topology in (*self.single_host, *multi):
            dims = topology_dimensions(topology)
            if dims is None or len(dims) != self.dimensions:
                raise ValueError(
                    f"topology {topology!r} must have {self.dimensions} dimensions, like "
                    f"{'x'.join(['2'] * self.dimensions)}"
                )
        for topology in self.single_host:
            total = _product(topology)
            if total not in chips:
                raise ValueError(
                    f"single-host topology {topology} has {total} chips but no machine type "
                    f"has {total} (machine types have {sorted(chips)})"
                )
        if self.multi_host and self.multi_host.chips_per_host not in chips:
            raise ValueError(
                f"multiHost.chipsPerHost {self.multi_host.chips_per_host} matches no machine type"
            )
        return self


class _Dra(_Model):
    driver: str = Field(min_length=1)
    device_classes: tuple[str, ...] = Field(alias="deviceClasses", min_length=1)
    attributes: tuple[str, ...] = Field(min_length=1)


class _Autopilot(_Model):
    disallowed_node_selectors: tuple[str, ...] = Field(default=(), alias="disallowedNodeSelectors")


class _CatalogFile(_Model):
    version: int = Field(ge=1, le=1)
    # An operator's file that is the whole catalog rather than an extension of the packaged one.
    replace_packaged: bool = Field(default=False, alias="replacePackaged")
    ports: tuple[_Port, ...] | None = None
    unverified_accelerators: tuple[str, ...] | None = Field(
        default=None, alias="unverifiedAccelerators"
    )
    accelerators: tuple[_Accelerator, ...] = ()
    dra: _Dra | None = None
    autopilot: _Autopilot | None = None


def load_catalog(extra: Path | None = None) -> Catalog:
    """The packaged catalog, extended by `extra` when given. Raises CatalogError."""
    packaged = resources.files("webhook.catalog").joinpath("tpus.yaml").read_text("utf-8")
    base = _parse(packaged, "packaged tpus.yaml")
    if extra is None:
        return _build(base)
    try:
        text = extra.read_text("utf-8")
    except OSError as error:
        raise CatalogError(f"catalog {extra}: cannot read: {error.strerror}") from None
    operator = _parse(text, f"catalog {extra}")
    return _build(operator if operator.replace_packaged else _merge(base, operator))


def _parse(text: str, source: str) -> _CatalogFile:
    try:
        data = YAML(typ="safe", pure=True).load(text)
    except YAMLError as error:
        raise CatalogError(f"{source}: not valid YAML: {error}") from None
    try:
        return _CatalogFile.model_validate(data)
    except ValidationError as error:
        errors = error.errors()
        deeper = [e["loc"] for e in errors]
        problems = "; ".join(
            f"{_where(data, e['loc'])}: {e['msg']}"
            for e in errors
            # a list that is "too short" only because its items failed says nothing new
            if not (
                e["type"] == "too_short"
                and any(len(d) > len(e["loc"]) and d[: len(e["loc"])] == e["loc"] for d in deeper)
            )
        )
        raise CatalogError(f"{source}: {problems}") from None


def _where(data: Any, loc: tuple[int | str, ...]) -> str:
    """`accelerators[tpu-v9].machineTypes[0].chips`: list items named where they have a name."""
    text, node = "", data
    for step in loc:
        if isinstance(step, int):
            item = node[step] if isinstance(node, list) and step < len(node) else None
            name = item.get("name") if isinstance(item, dict) else None
            text += f"[{name}]" if isinstance(name, str) and name else f"[{step}]"
            node = item
        else:
            text += f".{step}" if text else str(step)
            node = node.get(step) if isinstance(node, dict) else None
    return text or "(top level)"


def _merge(base: _CatalogFile, extra: _CatalogFile) -> _CatalogFile:
    accelerators = {a.name: a for a in base.accelerators}
    accelerators.update({a.name: a for a in extra.accelerators})
    return _CatalogFile.model_construct(
        version=extra.version,
        ports=extra.ports if extra.ports is not None else base.ports,
        unverified_accelerators=(
            extra.unverified_accelerators
            if extra.unverified_accelerators is not None
            else base.unverified_accelerators
        ),
        accelerators=tuple(accelerators.values()),
        dra=extra.dra if extra.dra is not None else base.dra,
        autopilot=extra.autopilot if extra.autopilot is not None else base.autopilot,
    )


def _build(data: _CatalogFile) -> Catalog:
    accelerators = [
        build_accelerator(
            name=a.name,
            generation=a.generation,
            dimensions=a.dimensions,
            machine_types=[
                MachineType(
                    m.name,
                    m.chips,
                    None if m.cpu is None else parse_quantity(m.cpu),
                    None if m.memory is None else parse_quantity(m.memory),
                    m.cpu or "",
                    m.memory or "",
                    frozenset(m.unconfirmed),
                )
                for m in a.machine_types
            ],
            single_host=a.single_host,
            multi_host=a.multi_host.topologies if a.multi_host else (),
            multi_host_chips_per_host=a.multi_host.chips_per_host if a.multi_host else None,
            multiple_of=a.multi_host.multiple_of if a.multi_host else None,
            max_chips=a.multi_host.max_chips if a.multi_host else None,
            multiple_tpu_containers=a.multiple_tpu_containers,
            aliases=a.aliases,
            dynamic_slicing=a.dynamic_slicing,
            dra_generation=a.dra_generation,
            xpk_prefix=a.xpk.prefix if a.xpk else "",
            xpk_cores_per_chip=a.xpk.cores_per_chip if a.xpk else 1,
        )
        for a in data.accelerators
    ]
    ports = [Port(p.name, p.container_port) for p in data.ports or ()]
    dra = (
        DraDriver(data.dra.driver, frozenset(data.dra.device_classes), data.dra.attributes)
        if data.dra is not None
        else None
    )
    autopilot = Autopilot(
        frozenset(data.autopilot.disallowed_node_selectors) if data.autopilot else frozenset()
    )
    return build_catalog(accelerators, ports, data.unverified_accelerators or (), dra, autopilot)


def _product(topology: str) -> int:
    total = 1
    for side in topology_dimensions(topology) or ():
        total *= side
    return total
