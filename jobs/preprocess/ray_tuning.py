"""Two of Ray Data's start-up waits, shortened for the length of one job run.

Both are class-level behaviours of Ray Data 2.60 that cost a fixed second or more per run, which is
~10 % of a 200k-row job on two CPUs (measured with ``ray.timeline()``; docs/bench/preprocess_job.md):

* The streaming executor learns the cluster's size from the autoscaling coordinator actor, whose
  answer arrives after the first scheduling step, and re-reads it once per second
  (``ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S``). For that first second its limits are zero
  and only one task runs: the second read task started 1.05-1.1 s after the first in every run.
* A hash shuffle starts its aggregator actors only once a sample of its input has arrived (to size
  their memory from it), and the fused read tasks yield their blocks at their end. The aggregator
  process then took ~1 s to start (a fresh process importing Ray Data) while the first shuffle task
  held a CPU waiting for it. Here the shuffle starts when its operator starts, sized from the
  planning-time estimate of the input (the read's file sizes), which Ray also uses when the sample
  says less: the aggregator is up before the first block arrives.

Both are restored when the run ends, so other datasets in the process keep Ray's defaults. A Ray
without these attributes is left alone, and an explicit ``RAY_DATA_MEMORY_ESTIMATION_SAMPLE_*``
environment variable (a wish to size from a sample) keeps Ray's sampling.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

LIMITS_REFRESH_S = 0.1
SAMPLE_ENV = ("RAY_DATA_MEMORY_ESTIMATION_SAMPLE_MIN_BUNDLES", "RAY_DATA_MEMORY_ESTIMATION_SAMPLE_MAX_BUNDLES")
# The methods the early start calls on a hash shuffle operator; all must exist for it to apply.
SHUFFLE_INTERNALS = ("start", "_start_shuffle", "_extrapolate_dataset_bytes")


def start_shuffle_at_once(original: Callable[..., None]) -> Callable[..., None]:
    """``start`` of a hash shuffle operator that also starts its aggregators right away."""

    def start(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not getattr(self, "_shuffle_started", True):  # an operator that does not say: leave it
            self._start_shuffle(estimated_dataset_bytes=self._extrapolate_dataset_bytes())

    start.wrapped = original  # type: ignore[attr-defined]
    return start


def short_run_overrides() -> list[tuple[Any, str, Any]]:
    """(class, attribute, value) for each setting this Ray version has and the user did not set."""
    from ray.data._internal.execution.operators import hash_shuffle
    from ray.data._internal.execution.resource_manager import ResourceManager

    wanted = []
    if hasattr(ResourceManager, "GLOBAL_LIMITS_UPDATE_INTERVAL_S"):
        wanted.append((ResourceManager, "GLOBAL_LIMITS_UPDATE_INTERVAL_S", LIMITS_REFRESH_S))
    shuffle = getattr(hash_shuffle, "HashShufflingOperatorBase", None)
    if not any(name in os.environ for name in SAMPLE_ENV) and all(
        hasattr(shuffle, name) for name in SHUFFLE_INTERNALS
    ):
        wanted.append((shuffle, "start", start_shuffle_at_once(shuffle.start)))
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
