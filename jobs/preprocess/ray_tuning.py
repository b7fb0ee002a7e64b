"""One of Ray Data's start-up waits, shortened for the length of one job run.

The streaming executor learns the cluster's size from the autoscaling coordinator actor, whose answer
arrives after the first scheduling step, and re-reads it once per second
(``ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S``). For that first second its limits are zero and
only one task runs: the second read task started 1.05-1.1 s after the first in every run, ~10 % of a
200k-row job on two CPUs (measured with ``ray.timeline()``; docs/bench/preprocess_job.md).

The interval is restored when the run ends, so other datasets in the process keep Ray's default. A
Ray without the attribute is left alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

LIMITS_REFRESH_S = 0.1


def short_run_overrides() -> list[tuple[Any, str, Any]]:
    """(class, attribute, value) for each setting this Ray version has."""
    from ray.data._internal.execution.resource_manager import ResourceManager

    wanted = []
    if hasattr(ResourceManager, "GLOBAL_LIMITS_UPDATE_INTERVAL_S"):
        wanted.append((ResourceManager, "GLOBAL_LIMITS_UPDATE_INTERVAL_S", LIMITS_REFRESH_S))
    return wanted


@contextlib.contextmanager
def short_run_scheduling() -> Iterator[None]:
    """Apply :func:`short_run_overrides` for the ``with`` block, then restore Ray's values."""
    overrides = short_run_overrides()
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in overrides]
    try:
        for owner, name, value in overrides:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
