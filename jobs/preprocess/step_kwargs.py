"""Step settings from YAML checked against the step's annotated parameters, before Ray starts.

Most steps store their numeric settings as given, so ``min_user_chars: 10k`` (the string "10k")
built a HardFilter that raised ``TypeError`` in the first batch, on the cluster, after its start-up.
A setting whose parameter is annotated with plain types only (``int``, ``float``, ``bool``, ``str``,
``None`` and unions of them) must be a value of one of them: an integer where a number is allowed,
but not ``true`` where an integer is. Other annotations (lists, patterns, detectors) are left to the
step's own constructor.
"""

from __future__ import annotations

import typing
from typing import Any

from twinkle_agentic.checks import type_problem


def kwargs_problem(factory: Any, kwargs: dict[str, Any]) -> str | None:
    """What is wrong with ``kwargs`` for ``factory`` (a class or function), judged by its
    annotations; None when nothing is, or when the annotations cannot be resolved."""
    target = factory.__init__ if isinstance(factory, type) else factory
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # annotations naming what this process cannot import: the constructor judges
        return None
    for name, value in kwargs.items():
        problem = type_problem(name, value, hints[name]) if name in hints else None
        if problem:
            return problem
    return None
