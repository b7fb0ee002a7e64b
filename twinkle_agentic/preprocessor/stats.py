"""Per-step statistics: the same record in one process or summed across Ray tasks."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepStats:
    step: str
    before: int = 0
    after: int = 0
    dropped: int = 0
    seconds: float = 0.0
    reasons: Counter = field(default_factory=Counter)

    def __add__(self, other: StepStats) -> StepStats:
        if other.step != self.step:
            raise ValueError(f"cannot add stats of step {other.step!r} to step {self.step!r}")
        return StepStats(
            self.step,
            self.before + other.before,
            self.after + other.after,
            self.dropped + other.dropped,
            self.seconds + other.seconds,
            self.reasons + other.reasons,
        )

    def to_dict(self) -> dict[str, Any]:
        """Always the same keys, whatever the values."""
        return {
            "step": self.step,
            "before": self.before,
            "after": self.after,
            "dropped": self.dropped,
            "seconds": round(self.seconds, 6),
            "reasons": dict(sorted(self.reasons.items())),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepStats:
        return cls(
            data["step"],
            int(data["before"]),
            int(data["after"]),
            int(data["dropped"]),
            float(data["seconds"]),
            Counter(data.get("reasons") or {}),
        )
