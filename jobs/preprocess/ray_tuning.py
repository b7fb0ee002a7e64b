"""One of Ray Data's start-up waits, shortened for the length of one job run.

The streaming executor learns the cluster's size from the autoscaling coordinator actor, whose answer
arrives after the first scheduling step, and re-reads it once per second
(``ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S``). For that first second its limits are zero and
only one task runs: the second read task started 1.05-1.1 s after the first in every run, ~10 % of a
200k-row job on two CPUs (measured with ``ray.timeline()``; docs/bench/preprocess_job.md).

So during a run the interval is ``LIMITS_REFRESH_S`` until the limits are known, then Ray's own
again: every refresh is a call to the coordinator actor, and refreshing at 0.1 s for a whole 200k-row
run made ~108 calls instead of ~12, 0.1-0.3 CPU s of the actor's and up to ~0.4 of the driver's. Ray's
value is restored when the run ends, so other datasets in the process keep Ray's default. A Ray
without the attribute is left alone.

Why a Ray Data internal stays patched here (the job's edge, never the library): without it a 200k-row
job on 2 CPUs takes ~0.5 s longer per run (alternating A/B at 22cf1b6: first job 11.7 / 11.1 / 12.4 s
against 11.2 / 10.8 / 11.4 s, second job 10.1 / 10.0 / 10.8 s against 9.6 / 9.9 / 9.5 s), about 4
points of the job's 2-CPU parallel efficiency, whose target (80 %) it meets by a thin margin.
``tests/jobs/preprocess/test_ray_tuning.py`` fails when a Ray upgrade renames the attribute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

LIMITS_REFRESH_S = 0.1


class RefreshUntilKnown:
    """Stands in for the class attribute: ``fast`` while a resource manager's limits are still zero
    (the coordinator has not answered), ``known`` (Ray's interval) once they are not. Read on the
    class itself, it is ``fast``, as a plain override would be."""

    def __init__(self, fast: float, known: float, zero: Any):
        self.fast, self.known, self.zero = fast, known, zero

    def __get__(self, manager: Any, owner: type | None = None) -> float:
        limits = getattr(manager, "_global_limits", None)
        return self.fast if limits is None or limits == self.zero else self.known


def short_run_overrides() -> list[tuple[Any, str, Any]]:
    """(class, attribute, value) for each setting this Ray version has."""
    from ray.data._internal.execution.interfaces.execution_options import ExecutionResources
    from ray.data._internal.execution.resource_manager import ResourceManager

    wanted = []
    if hasattr(ResourceManager, "GLOBAL_LIMITS_UPDATE_INTERVAL_S"):
        refresh = RefreshUntilKnown(
            LIMITS_REFRESH_S, ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S, ExecutionResources.zero()
        )
        wanted.append((ResourceManager, "GLOBAL_LIMITS_UPDATE_INTERVAL_S", refresh))
    return wanted


@contextlib.contextmanager
def short_run_scheduling() -> Iterator[None]:
    """Apply :func:`short_run_overrides` for the ``with`` block, then restore Ray's values."""
    overrides = short_run_overrides()
    saved = [(owner, name, vars(owner).get(name, getattr(owner, name))) for owner, name, _ in overrides]
    try:
        for owner, name, value in overrides:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
