"""What the asynchronous rollout does with trajectories that fail.

A trajectory **fails** when its ``stop_reason`` is one of ``failure_reasons`` (default ``error``: the
engine, the bridge, the template or the tool-manager factory failed for it). A tool call that answers
``Error: ...`` or times out is not a failure: the model sees it and the trajectory goes on.

``FailurePolicy(max_retries=N, on_failure=..., oversample=k)``:

- **retry**: a failed trajectory is rolled out again from its input (fresh state, and a fresh tool
  manager when a factory builds them) as soon as it fails, up to ``max_retries`` times; the first
  attempt that does not fail is its result, else the last failure. Applies before ``on_failure``.
- ``on_failure='keep'`` (default): a trajectory that still failed is returned in its place; the output
  has the input's count and order (the rollout contract, SPEC 17.1).
- ``on_failure='drop'``: failed trajectories are left out of the output; the others keep their input
  order. The dropped ones are reported (``FailureReport.dropped``: input index and trajectory), so
  nothing is lost.
- ``on_failure='replace'``: the caller passes ``N + oversample`` trajectories (the pool) and gets
  back ``N``: **the first N in input order that do not fail**, in input order. The whole pool starts
  at once; a trajectory is cancelled (engine request aborted, tool calls abandoned) as soon as N
  trajectories before it in input order have succeeded, since it can no longer be chosen. Selection
  depends only on success and input position, never on speed, so short trajectories are not
  favoured. If fewer than N succeed, the output is topped up to N with the earliest failures (still
  in input order) and ``FailureReport.shortfall`` says by how many.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .base import ERROR, STOP, STOP_REASONS

ON_FAILURE = ("keep", "drop", "replace")


class FailurePolicyError(ConfigError):
    """A failure policy setting is invalid; the message names it and the allowed values."""


@dataclass(frozen=True)
class FailurePolicy:
    max_retries: int = 0
    on_failure: str = "keep"
    oversample: int = 0
    failure_reasons: frozenset[str] = frozenset({ERROR})

    def __post_init__(self) -> None:
        for name in ("max_retries", "oversample"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise FailurePolicyError(f"failure_policy.{name} must be an integer >= 0, got {value!r}")
        if self.on_failure not in ON_FAILURE:
            raise FailurePolicyError(
                f"failure_policy.on_failure must be one of {ON_FAILURE}, got {self.on_failure!r}"
            )
        if (self.on_failure == "replace") != (self.oversample > 0):
            raise FailurePolicyError(
                "failure_policy: on_failure='replace' needs oversample >= 1 (the spare trajectories), and "
                f"oversample needs on_failure='replace'; got on_failure={self.on_failure!r}, oversample={self.oversample}"
            )
        reasons = frozenset(self.failure_reasons)
        if not reasons or not reasons <= STOP_REASONS - {STOP}:
            raise FailurePolicyError(
                f"failure_policy.failure_reasons must be a non-empty subset of {sorted(STOP_REASONS - {STOP})}, "
                f"got {sorted(reasons)}"
            )
        object.__setattr__(self, "failure_reasons", reasons)

    @classmethod
    def parse(cls, value: FailurePolicy | str | Mapping[str, Any] | None) -> FailurePolicy:
        """From a policy, ``'keep'``/``'drop'``, a mapping of the fields, or None (keep, no retries)."""
        if value is None:
            return cls()
        if isinstance(value, FailurePolicy):
            return value
        if isinstance(value, str):
            if value not in ("keep", "drop"):
                raise FailurePolicyError(
                    f"failure_policy {value!r}: as a string only 'keep' or 'drop'; give a mapping such as "
                    "{'max_retries': 2} or {'on_failure': 'replace', 'oversample': 4}"
                )
            return cls(on_failure=value)
        if not isinstance(value, Mapping):
            raise FailurePolicyError(
                f"failure_policy must be a FailurePolicy, a string or a mapping, got {type(value).__name__}"
            )
        known = ("max_retries", "on_failure", "oversample", "failure_reasons")
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise FailurePolicyError(f"failure_policy: unknown key(s) {unknown}; known: {list(known)}")
        values = dict(value)
        if "failure_reasons" in values:
            reasons = values["failure_reasons"]
            values["failure_reasons"] = frozenset([reasons] if isinstance(reasons, str) else reasons)
        return cls(**values)

    def failed(self, trajectory: Mapping[str, Any]) -> bool:
        return trajectory.get("stop_reason") in self.failure_reasons

    def wanted(self, count: int) -> int:
        """How many trajectories a call with ``count`` inputs returns when none fails."""
        if self.on_failure != "replace":
            return count
        if count <= self.oversample:
            raise FailurePolicyError(
                f"on_failure='replace' with oversample={self.oversample} needs more than {self.oversample} "
                f"trajectories (N wanted + {self.oversample} spares), got {count}"
            )
        return count - self.oversample


@dataclass
class FailureReport:
    """What the policy did in one rollout call (indices are input positions)."""

    retries: int = 0  # extra attempts started
    recovered: int = 0  # trajectories that failed, then succeeded on a retry
    failed: list[int] = field(default_factory=list)  # still failed after their retries
    dropped: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # on_failure='drop'
    cancelled: list[int] = field(default_factory=list)  # on_failure='replace': no longer needed
    spares_used: int = 0  # on_failure='replace': returned trajectories from beyond the first N
    shortfall: int = 0  # on_failure='replace': returned failures because too few succeeded

    def counts(self) -> dict[str, int]:
        return {
            "retries": self.retries,
            "recovered": self.recovered,
            "failed": len(self.failed),
            "dropped": len(self.dropped),
            "cancelled": len(self.cancelled),
            "spares_used": self.spares_used,
            "shortfall": self.shortfall,
        }


class OutcomeBook:
    """Applies a ``FailurePolicy`` to one call's trajectories as their attempts finish (pure logic)."""

    def __init__(self, policy: FailurePolicy, count: int):
        self.policy = policy
        self.count = count
        self.wanted = policy.wanted(count)
        self.attempts = [0] * count
        self.final: dict[int, dict[str, Any]] = {}
        self.cancelled: set[int] = set()
        self.report = FailureReport()

    def settle(self, index: int, trajectory: dict[str, Any]) -> bool:
        """Record an attempt's result; True when the trajectory should be rolled out again."""
        self.attempts[index] += 1
        failed = self.policy.failed(trajectory)
        if failed and self.attempts[index] <= self.policy.max_retries:
            self.report.retries += 1
            return True
        self.final[index] = trajectory
        if failed:
            self.report.failed.append(index)
        elif self.attempts[index] > 1:
            self.report.recovered += 1
        return False

    def succeeded(self, index: int) -> bool:
        return index in self.final and not self.policy.failed(self.final[index])

    def to_cancel(self, running: Iterable[int]) -> list[int]:
        """Running trajectories that can no longer be returned (``replace`` only); marks them cancelled."""
        if self.policy.on_failure != "replace":
            return []
        running = sorted(set(running) - self.cancelled)
        out, successes, position = [], 0, 0
        for index in running:
            while position < index:
                successes += self.succeeded(position)
                position += 1
            if successes >= self.wanted:
                out.append(index)
        self.cancelled.update(out)
        return out

    def results(self) -> list[dict[str, Any]]:
        """The output list the policy asks for (call once every trajectory is final or cancelled)."""
        self.report.failed.sort()
        self.report.cancelled = sorted(self.cancelled)
        action = self.policy.on_failure
        if action == "keep":
            return [self.final[i] for i in range(self.count)]
        if action == "drop":
            self.report.dropped = [(i, self.final[i]) for i in self.report.failed]
            return [self.final[i] for i in range(self.count) if not self.policy.failed(self.final[i])]
        chosen = [i for i in range(self.count) if self.succeeded(i)][: self.wanted]
        self.report.shortfall = self.wanted - len(chosen)
        chosen = sorted(chosen + self.report.failed[: self.report.shortfall])
        self.report.spares_used = sum(1 for i in chosen if i >= self.wanted)
        return [self.final[i] for i in chosen]

    def finished(self) -> list[dict[str, Any]]:
        """Every trajectory that reached a final result, in input order (what traces record)."""
        return [self.final[i] for i in sorted(self.final)]
