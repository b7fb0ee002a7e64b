"""Value checks for settings, written once: mappings of known keys, positive numbers, and values
against plain type hints.

Every config layer (the jobs, the farm, the Serve apps, the pipeline's steps) refuses a bad number
or a value of the wrong type with the same wording, naming the setting; ``error`` picks the
``ConfigError`` subclass a layer raises.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError

_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


def check_keys(
    label: str, given: Any, allowed: Iterable[str], *, error: type[ConfigError] = ConfigError
) -> Mapping[str, Any]:
    """``given`` when it is a mapping whose keys are all ``allowed``; else ``error`` naming ``label``,
    the unknown keys and the accepted ones (no silent fallbacks)."""
    if not isinstance(given, Mapping):
        raise error(f"{label} must be a mapping, got {type(given).__name__}")
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise error(f"{label}: unknown key(s) {unknown}; known: {list(allowed)}")
    return given


def check_positive(
    name: str,
    value: Any,
    *,
    integer: bool = False,
    allow_zero: bool = False,
    allow_none: bool = False,
    error: type[ConfigError] = ConfigError,
) -> Any:
    """``value`` when it is a number > 0 (>= 0 with ``allow_zero``; an int with ``integer``; None with
    ``allow_none``), else ``error`` naming the setting."""
    if value is None and allow_none:
        return value
    kinds = (int,) if integer else (int, float)
    ok = not isinstance(value, bool) and isinstance(value, kinds) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        noun = "integer" if integer else "number"
        kind = f"{'an' if integer else 'a'} {noun} >= 0" if allow_zero else f"a positive {noun}"
        none = " or null" if allow_none else ""
        raise error(f"{name} must be {kind}{none}, got {value!r}")
    return value


def plain_types(hint: Any) -> tuple[type, ...]:
    """The plain types (int, float, bool, str, None) ``hint`` allows, or () when it allows anything else."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    parts = typing.get_args(hint) if union else (hint,)
    return tuple(parts) if parts and all(part in _TYPE_NAMES for part in parts) else ()


def fits(value: Any, allowed: tuple[type, ...]) -> bool:
    """Whether ``value`` is one of ``allowed``: an int is a number, but true/false is not a count."""
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed
    return type(value) in allowed


def type_problem(name: str, value: Any, hint: Any) -> str | None:
    """What is wrong with ``value`` for a setting annotated ``hint``; None when it fits, or when the
    hint is not made of plain types (the owner of the setting judges those)."""
    allowed = plain_types(hint)
    if not allowed or fits(value, allowed):
        return None
    wanted = " or ".join(_TYPE_NAMES[t] for t in allowed)
    return f"{name} must be {wanted}, got {value!r} ({type(value).__name__})"
