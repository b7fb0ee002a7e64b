"""Two of Ray Data's start-up waits, shortened for the length of one job run.

Both are class-level settings of Ray Data 2.60 that cost a fixed second or more per run, which is
~10 % of a 200k-row job on two CPUs (measured with ``ray.timeline()``; docs/bench/preprocess_job.md):

* The streaming executor learns the cluster's size from the autoscaling coordinator actor, whose
  answer arrives after the first scheduling step, and re-reads it once per second
  (``ResourceManager.GLOBAL_LIMITS_UPDATE_INTERVAL_S``). For that first second its limits are zero
  and only one task runs: the second read task started 1.05-1.1 s after the first in every run.
* A hash shuffle buffers its input until it has a sample of 8 bundles or 128 MiB before it starts
  its aggregator actors (to size their memory). The fused read tasks yield a few large blocks each,
  so at 200k rows the sample was complete only after three of the four read tasks; the aggregator
  process then took ~1.5 s to start while the shuffle tasks waited for it, after the reads. One
  bundle is a sound sample here: frames have the same layout in every block.

The settings are restored when the run ends, so other datasets in the process keep Ray's defaults.
A setting Ray no longer has is left alone, and an explicit ``RAY_DATA_MEMORY_ESTIMATION_SAMPLE_*``
environment variable wins over ours.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

LIMITS_REFRESH_S = 0.1
SHUFFLE_SAMPLE_BUNDLES = 1
SAMPLE_ENV = ("RAY_DATA_MEMORY_ESTIMATION_SAMPLE_MIN_BUNDLES", "RAY_DATA_MEMORY_ESTIMATION_SAMPLE_MAX_BUNDLES")


def short_run_overrides() -> list[tuple[Any, str, Any]]:
    """(class, attribute, value) for each setting this Ray version has and the user did not set."""
    from ray.data._internal.execution.operators import hash_shuffle
    from ray.data._internal.execution.resource_manager import ResourceManager

    wanted = [(ResourceManager, "GLOBAL_LIMITS_UPDATE_INTERVAL_S", LIMITS_REFRESH_S)]
    if not any(name in os.environ for name in SAMPLE_ENV):
        shuffle = getattr(hash_shuffle, "HashShufflingOperatorBase", None)
        wanted += [
            (shuffle, "_MEMORY_ESTIMATION_SAMPLE_MIN_BUNDLES", SHUFFLE_SAMPLE_BUNDLES),
            (shuffle, "_MEMORY_ESTIMATION_SAMPLE_MAX_BUNDLES", SHUFFLE_SAMPLE_BUNDLES),
        ]
    return [(owner, name, value) for owner, name, value in wanted if owner is not None and hasattr(owner, name)]


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
