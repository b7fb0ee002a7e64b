"""``LiveFeed``: the input of a farm run that keeps taking trajectories while the run goes on.

``RolloutFarm.run`` reads its input lazily, but an ordinary iterator with nothing to give yet would
block the driver loop, which then could not collect the batches that finish meanwhile. A feed never
blocks it: the run takes what has been ``put`` (polling every ``poll_s`` while trajectories are in
flight) and ends only once the feed is ``close``-d and everything put has come back. ``wake`` makes the
run hand control back to the loop reading it (an empty batch), so that loop, the only code allowed to
touch the farm, can load new weights or put more trajectories while others are still in flight. Any
thread may call ``put``, ``close`` and ``wake``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from twinkle_agentic.errors import ConfigError

POLL_S = 0.02  # how often a run with trajectories in flight looks for new input and wake-ups


class LiveFeed:
    """A thread-safe queue of trajectories for one farm run (module docstring)."""

    def __init__(self, poll_s: float = POLL_S):
        if isinstance(poll_s, bool) or not isinstance(poll_s, (int, float)) or not poll_s > 0:
            raise ConfigError(f"poll_s must be a number of seconds > 0, got {poll_s!r}")
        self.poll_s = float(poll_s)
        self._items: deque[Any] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._woken = False

    # -- the producers' side ---------------------------------------------------------------------------

    def put(self, trajectories: Iterable[Any]) -> None:
        """Add trajectories to the run (in order, after those already put)."""
        items = list(trajectories)
        with self._cond:
            if self._closed:
                raise RuntimeError("the feed is closed: a closed run takes no more trajectories (open a new LiveFeed)")
            self._items.extend(items)
            self._cond.notify_all()

    def close(self) -> None:
        """No more input: the run ends once everything put has come back."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wake(self) -> None:
        """Have the run yield an empty batch soon, handing control to the loop that reads it."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    # -- the run's side --------------------------------------------------------------------------------

    def take(self, limit: int) -> list[Any]:
        """Up to ``limit`` trajectories put and not yet taken; never waits."""
        with self._cond:
            return [self._items.popleft() for _ in range(min(limit, len(self._items)))]

    def take_wake(self) -> bool:
        """Whether ``wake`` was called since the last look (and forget it)."""
        with self._cond:
            woken, self._woken = self._woken, False
            return woken

    def wait(self, timeout: float | None = None) -> None:
        """Wait until something is put, the feed is closed or woken (or ``timeout`` passes)."""
        with self._cond:
            if not (self._items or self._closed or self._woken):
                self._cond.wait(timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def exhausted(self) -> bool:
        """Closed, and every trajectory put has been taken."""
        with self._cond:
            return self._closed and not self._items

    def __len__(self) -> int:
        """Trajectories put and not yet taken."""
        with self._cond:
            return len(self._items)
