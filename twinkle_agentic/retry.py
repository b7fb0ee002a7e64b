"""Retry policy for transient endpoint failures: exponential backoff with jitter, ``Retry-After``
honoured.

The one backoff rule of the project: the chat-completions client (blocking and asyncio), remote
tools and the OpenEnv client all wait ``RetryPolicy.delay_s`` between attempts, so a flaky endpoint
sees the same pacing from every caller."""

from __future__ import annotations

import random
from dataclasses import dataclass

# A server asking for a longer pause than this is treated as "not now": the error is raised.
MAX_RETRY_AFTER_S = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` sends at most (1 = no retry); the k-th retry waits
    ``min(max_s, base_s * 2**k)`` scaled by a random factor in ``[1 - jitter, 1 + jitter]``, or the
    server's ``Retry-After`` when it gives one (up to 60 s)."""

    attempts: int = 5
    base_s: float = 0.5
    max_s: float = 8.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) or self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be an integer >= 1, got {self.attempts!r}")
        if self.base_s < 0 or self.max_s < 0:
            raise ValueError(f"RetryPolicy delays must be >= 0, got base_s={self.base_s}, max_s={self.max_s}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"RetryPolicy.jitter must be in [0, 1), got {self.jitter}")

    def delay_s(self, retry_index: int, retry_after_s: float | None = None) -> float:
        if retry_after_s is not None and 0 <= retry_after_s <= MAX_RETRY_AFTER_S:
            return retry_after_s
        base = min(self.max_s, self.base_s * (2.0 ** min(retry_index, 60)))
        return max(0.0, base * random.uniform(1 - self.jitter, 1 + self.jitter))


def parse_retry_after(headers: object) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (numeric forms); None when absent."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = get(name)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except (TypeError, ValueError):
            continue
    return None
