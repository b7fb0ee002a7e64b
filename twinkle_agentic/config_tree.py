"""A config as a tree of dataclasses, built from its YAML-shaped mapping and checked once.

A field typed as a dataclass is a **section**. It is nested by default (``engine: {num_cpus: 1}`` in
YAML, ``--engine.num_cpus 1`` as a flag); ``flatten`` spells its fields at the parent's level
(``max_turns: 6``, ``--max-turns 6``), and ``hoist`` spells some of a nested section's fields there
(``model:`` for ``engine.model``). A ``list[Dataclass]`` field is a list of such mappings. A section
may name a ``build`` function that turns its mapping into the object (``SamplingParams.from_dict``).

Sections given in part are merged over the field's default, so ``sampling: {max_tokens: 96}`` keeps
the default temperature. Values of plain-typed fields (int, float, bool, str, None and unions of
them) are checked here, naming the setting by its path; unknown keys are refused with the known
ones listed. Everything else is judged by the dataclasses' own checks.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .checks import check_keys, type_problem
from .errors import ConfigError


def section(help_: str, *, flatten: bool = False, hoist: tuple[str, ...] = (), build: Callable | None = None,
            dump: Callable | None = None) -> dict[str, Any]:  # fmt: skip
    """The metadata of a section field (see the module docstring)."""
    return {"help": help_, "section": True, "flatten": flatten, "hoist": hoist, "build": build, "dump": dump,
            "cli": False}  # fmt: skip


def config_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` that are settings (``metadata={"config": False}`` marks a runtime field)."""
    return [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("config", True)]


def hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def section_class(hint: Any) -> type | None:
    """The dataclass a field's hint names, if it is one (``X`` or ``X | None``)."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return hint
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and dataclasses.is_dataclass(args[0]) and typing.get_origin(hint) is not list:
        return args[0]
    return None


def list_item_class(hint: Any) -> type | None:
    """``X`` when the hint is ``list[X]`` with X a dataclass."""
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint) or (None,)
        if dataclasses.is_dataclass(item):
            return item
    return None


def surface_keys(cls: type) -> list[str]:
    """The keys a mapping of ``cls`` may hold: its fields, flattened sections' keys, hoisted ones."""
    keys: list[str] = []
    types = hints(cls)
    for f in config_fields(cls):
        sub = section_class(types[f.name]) if f.metadata.get("section") else None
        if sub is not None and f.metadata.get("flatten"):
            keys += surface_keys(sub)
            continue
        keys.append(f.name)
        if sub is not None:
            keys += list(f.metadata.get("hoist", ()))
    return keys


def build(cls: type, data: Mapping[str, Any], where: str, error: type[ConfigError], base: Any = None,
          *, path: str = "") -> Any:  # fmt: skip
    """An instance of ``cls`` from ``data`` over ``base`` (an instance whose values are the defaults).

    ``where`` names the source in messages (a file, "command line"; "config" adds nothing); ``path``
    is the dotted name of this section (``engine``), which prefixes its settings' names."""

    def fail(message: str) -> ConfigError:
        return error(message if where in ("", "config") else f"{where}: {message}")

    label = path or "config"
    try:
        check_keys(label, data, surface_keys(cls), error=error)
    except ConfigError as exc:
        raise fail(str(exc)) from None
    types = hints(cls)
    values: dict[str, Any] = {}
    for f in config_fields(cls):
        name = f"{path}.{f.name}" if path else f.name
        default = getattr(base, f.name) if base is not None else _default(f)
        sub = section_class(types[f.name]) if f.metadata.get("section") else None
        if sub is not None:
            if f.metadata.get("flatten"):
                given: Any = {k: data[k] for k in surface_keys(sub) if k in data}
                sub_path = path
            else:
                given = data.get(f.name)
                given = {} if given is None else given
                if not isinstance(given, Mapping):
                    raise fail(f"{name} must be a mapping, got {type(given).__name__}")
                given = dict(given)
                for key in f.metadata.get("hoist", ()):
                    if key in given:
                        raise fail(f"{name}.{key}: write it at the top level as '{key}:' (or --{key.replace('_', '-')})")
                    if key in data:
                        given[key] = data[key]
                sub_path = name
            values[f.name] = _build_section(sub, f, given, where, error, default, sub_path)
            continue
        if f.name not in data:
            if default is dataclasses.MISSING:
                raise fail(f"{name} is required: add '{f.name}:' to {label}")
            values[f.name] = default
            continue
        value = data[f.name]
        item = list_item_class(types[f.name])
        if item is not None:
            values[f.name] = _build_list(item, value, where, error, name)
            continue
        problem = type_problem(name, value, types[f.name])
        if problem:
            raise fail(problem)
        values[f.name] = value
    try:
        return cls(**values)
    except ConfigError as exc:
        raise (exc if isinstance(exc, error) else fail(f"{label}: {exc}")) from exc
    except (TypeError, ValueError) as exc:
        raise fail(f"{label}: {exc}") from exc


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _build_section(sub: type, f: dataclasses.Field, given: Mapping[str, Any], where: str,
                   error: type[ConfigError], default: Any, path: str) -> Any:  # fmt: skip
    base = default if isinstance(default, sub) else None
    builder = f.metadata.get("build")
    if builder is None:
        return build(sub, given, where, error, base, path=path)
    merged = {**(dump_value(base, f) if base is not None else {}), **given}
    prefix = "" if where in ("", "config") else f"{where}: "
    try:
        return builder(merged)
    except ConfigError as exc:
        raise (exc if isinstance(exc, error) else error(f"{prefix}{path}: {exc}")) from exc
    except (TypeError, ValueError) as exc:
        raise error(f"{prefix}{path}: {exc}") from exc


def _build_list(item: type, value: Any, where: str, error: type[ConfigError], path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        prefix = "" if where in ("", "config") else f"{where}: "
        raise error(f"{prefix}{path} must be a list of mappings, got {type(value).__name__}")
    return [e if isinstance(e, item) else build(item, e, where, error, path=f"{path}[{i}]") for i, e in enumerate(value)]


def dump_value(obj: Any, f: dataclasses.Field | None = None) -> Any:
    """The YAML-shaped view of a built value: the inverse of ``build`` (hoisted keys excluded)."""
    dump = f.metadata.get("dump") if f is not None else None
    if dump is not None:
        return dump(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_mapping(obj)
    if isinstance(obj, list):
        return [dump_value(v) for v in obj]
    if isinstance(obj, tuple):
        return [dump_value(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: dump_value(v) for k, v in obj.items()}
    return obj


def to_mapping(obj: Any) -> dict[str, Any]:
    """``obj`` as the mapping ``build`` reads: flattened sections inline, hoisted keys at this level."""
    out: dict[str, Any] = {}
    hoisted: dict[str, Any] = {}
    for f in config_fields(type(obj)):
        value = getattr(obj, f.name)
        if f.metadata.get("section") and dataclasses.is_dataclass(value):
            dumped = dump_value(value, f)
            if f.metadata.get("flatten"):
                out.update(dumped)
                continue
            for key in f.metadata.get("hoist", ()):
                hoisted[key] = dumped.pop(key, None)
            out[f.name] = dumped
            continue
        out[f.name] = dump_value(value)
    return {**hoisted, **out}


def walk(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """Every plain setting of ``cls`` as ``(surface path, field, hint)``: nested sections as
    ``engine.num_cpus``, flattened ones and hoisted fields at the parent's level."""
    types = hints(cls)
    for f in config_fields(cls):
        sub = section_class(types[f.name]) if f.metadata.get("section") else None
        if sub is None:
            yield prefix + f.name, f, types[f.name]
            continue
        hoist = f.metadata.get("hoist", ())
        inner = prefix if f.metadata.get("flatten") else f"{prefix}{f.name}."
        for path, sub_field, hint in walk(sub, inner):
            name = path[len(inner):]
            yield (prefix + name if name in hoist else path), sub_field, hint


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at the dotted surface ``path`` of a YAML-shaped mapping."""
    *parents, leaf = path.split(".")
    for part in parents:
        child = data.get(part)
        if not isinstance(child, dict):
            child = data[part] = dict(child or {}) if isinstance(child, Mapping) else {}
        data = child
    data[leaf] = value
