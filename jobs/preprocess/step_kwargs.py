"""Step settings from YAML checked against the step's annotated parameters, before Ray starts.

Most steps store their numeric settings as given, so ``min_user_chars: 10k`` (the string "10k")
built a HardFilter that raised ``TypeError`` in the first batch, on the cluster, after its start-up.
A setting whose parameter is annotated with plain types only (``int``, ``float``, ``bool``, ``str``,
``None`` and unions of them) must be a value of one of them: an integer where a number is allowed,
but not ``true`` where an integer is. Other annotations (lists, patterns, detectors) are left to the
step's own constructor.
"""

from __future__ import annotations

import types
import typing
from typing import Any

_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


def _plain_types(hint: Any) -> tuple[type, ...]:
    """The plain types ``hint`` allows, or () when it is anything else."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    parts = typing.get_args(hint) if union else (hint,)
    return tuple(parts) if parts and all(part in _NAMES for part in parts) else ()


def _fits(value: Any, allowed: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # YAML's yes/no/true: not a count
        return bool in allowed
    if isinstance(value, int):
        return int in allowed or float in allowed
    return type(value) in allowed


def kwargs_problem(factory: Any, kwargs: dict[str, Any]) -> str | None:
    """What is wrong with ``kwargs`` for ``factory`` (a class or function), judged by its
    annotations; None when nothing is, or when the annotations cannot be resolved."""
    target = factory.__init__ if isinstance(factory, type) else factory
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # annotations naming what this process cannot import: the constructor judges
        return None
    for name, value in kwargs.items():
        allowed = _plain_types(hints[name]) if name in hints else ()
        if allowed and not _fits(value, allowed):
            wanted = " or ".join(_NAMES[t] for t in allowed)
            return f"{name} must be {wanted}, got {value!r} ({type(value).__name__})"
    return None
