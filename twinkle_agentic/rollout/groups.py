"""GRPO groups: the ``samples_per_prompt`` trajectories of one prompt, collected, checked and normalised.

Trajectories come back from a farm in any order. A ``GroupCollector`` holds each one until every
member of its group (``group_id``, ``group_size``) is there, then releases the group with each
member's ``advantage``: its reward against the group's, so a trainer sees which samples of a prompt
did better than the others. Estimators (``GroupConfig.advantage``):

- ``grpo``: ``(r - mean) / (std + epsilon)``;
- ``dr_grpo``: ``r - mean`` (mean only, as in Dr. GRPO: no division by the group's spread).

``mean`` and ``std`` are over the group's rewards; ``std`` is the **population** standard deviation
(divided by the group size, not size - 1), so a singleton group has std 0 and advantage 0 (as has
any group of equal rewards, epsilon 0 included).

A member **fails** when its rollout failed (``stop_reason`` ``"error"``: the engine or the farm gave
up on it; ``"api_error"`` for API rollouts), when scoring failed (``reward`` None with a ``reward_error``), and, with
``tool_errors_fail``, when a tool answered ``Error: ...``. A failed member is first retried in a
fresh rollout (``add`` hands back a copy of its input under a new trajectory id, up to
``max_member_retries`` times); once retries run out, the whole group is failed: every member gets
``group_failed: True`` and ``advantage`` None, because dropping only the failed member would bias
the group's mean towards the samples that happened to succeed. A group whose members all succeeded
but carry no reward (no reward function configured) is released with ``advantage`` None.

``roll_groups`` drives a farm with a collector: it runs the trajectories, then the retries the
collector asks for in a further run, until every group is released (a retry waits for the run it
failed in to end).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.errors import ConfigError

ADVANTAGE_ESTIMATORS = ("grpo", "dr_grpo")
DEFAULT_EPSILON = 1e-6
RETRY_SUFFIX = "/retry"  # a retried member runs as "<trajectory_id>/retry<k>"
ROLLOUT_FAILURES = ("error", "api_error")  # stop reasons of a rollout that failed (rollout.base)
TOOL_ERROR_PREFIX = "Error:"  # how a tool call's failure reads to the model (ToolManager)


@dataclass(frozen=True)
class GroupConfig:
    """How groups are scored and when they fail (see the module docstring)."""

    advantage: str = field(
        default="grpo",
        metadata={"help": "advantage estimator: grpo ((r - mean) / (std + epsilon)) or dr_grpo (r - mean)",
                  "choices": ADVANTAGE_ESTIMATORS},
    )  # fmt: skip
    epsilon: float = field(default=DEFAULT_EPSILON, metadata={"help": "added to the group's std (grpo)"})
    tool_errors_fail: bool = field(
        default=False, metadata={"help": "a tool call answering 'Error: ...' fails its group member"}
    )
    max_member_retries: int = field(
        default=1, metadata={"help": "fresh rollouts of a failed member before its group is failed"}
    )

    def validate(self) -> GroupConfig:
        if self.advantage not in ADVANTAGE_ESTIMATORS:
            raise ConfigError(f"groups.advantage must be one of {list(ADVANTAGE_ESTIMATORS)}, got {self.advantage!r}")
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, (int, float)) or not self.epsilon >= 0:
            raise ConfigError(f"groups.epsilon must be a number >= 0, got {self.epsilon!r}")
        if not isinstance(self.tool_errors_fail, bool):
            raise ConfigError(f"groups.tool_errors_fail must be true or false, got {self.tool_errors_fail!r}")
        retries = self.max_member_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"groups.max_member_retries must be an integer >= 0, got {retries!r}")
        return self


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation of a non-empty list; equal values give exactly (value, 0)
    (a summed mean may miss the value by a rounding error, which std + a tiny epsilon would magnify)."""
    if min(values) == max(values):
        return values[0], 0.0
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def advantages(rewards: list[float], config: GroupConfig) -> list[float]:
    """Each reward's advantage within its group, by ``config.advantage``."""
    if not rewards:
        raise ValueError("a group needs at least one reward")
    mean, std = mean_std([float(r) for r in rewards])
    if config.advantage == "dr_grpo":
        return [float(r) - mean for r in rewards]
    if std + config.epsilon == 0:  # equal rewards and no epsilon: every r - mean is 0
        return [0.0] * len(rewards)
    return [(float(r) - mean) / (std + config.epsilon) for r in rewards]


def tool_errors(trajectory: Mapping[str, Any]) -> int:
    """Tool results in the trajectory's messages that report a failed call (``Error: ...``)."""
    return sum(
        1
        for message in trajectory.get("messages") or []
        if isinstance(message, Mapping)
        and message.get("role") == "tool"
        and isinstance(message.get("content"), str)
        and message["content"].startswith(TOOL_ERROR_PREFIX)
    )


def member_failure(trajectory: Mapping[str, Any], config: GroupConfig) -> str | None:
    """Why this finished trajectory fails its group member (None when it does not)."""
    if trajectory.get("stop_reason") in ROLLOUT_FAILURES:
        return f"rollout failed: {trajectory.get('error') or 'no error recorded'}"
    if trajectory.get("reward") is None and trajectory.get("reward_error"):
        return f"reward failed: {trajectory['reward_error']}"
    if config.tool_errors_fail:
        count = tool_errors(trajectory)
        if count:
            return f"{count} tool call(s) answered an error"
    return None


def retry_id(trajectory_id: str, attempt: int) -> str:
    """The trajectory id a member's ``attempt``-th retry runs under (unique within a farm run)."""
    return f"{trajectory_id}{RETRY_SUFFIX}{attempt}"


@dataclass
class Collected:
    """What one ``GroupCollector.add`` made ready: groups to write (members in sample order) and fresh
    member inputs to roll out again."""

    groups: list[list[dict[str, Any]]] = field(default_factory=list)
    retries: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Group:
    size: int
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # trajectory_id -> its input
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # trajectory_id -> its last result
    failures: dict[str, str] = field(default_factory=dict)  # trajectory_id -> why it failed, retries spent


class GroupCollector:
    """Collects finished trajectories into groups and releases each complete group (module docstring).

    ``expect`` registers the inputs (each with ``trajectory_id``, ``group_id``, ``group_size``);
    ``add`` takes each finished trajectory, whatever its order, under its own id or a retry id.
    Released members keep their input's ``trajectory_id`` and get ``group_id``, ``group_size``,
    ``advantage``, ``group_failed``, ``group_error`` (None, or which member failed and why) and
    ``member_attempts`` (1 plus the retries it took).
    """

    def __init__(self, config: GroupConfig | None = None):
        self.config = (config or GroupConfig()).validate()
        self._groups: dict[str, _Group] = {}
        self._member_group: dict[str, str] = {}
        self._attempts: dict[str, int] = {}  # trajectory_id -> rollouts started
        self._running: dict[str, str] = {}  # id a rollout runs under -> the member's trajectory_id
        self.released = 0
        self.failed = 0
        self.retried = 0

    def expect(self, trajectories: Iterable[Mapping[str, Any]]) -> None:
        for trajectory in trajectories:
            tid, gid, size = (trajectory.get(k) for k in ("trajectory_id", "group_id", "group_size"))
            if tid is None or gid is None or not isinstance(size, int) or size < 1:
                raise ValueError(
                    f"trajectory {tid!r} needs trajectory_id, group_id and a positive group_size to be grouped, "
                    f"got group_id={gid!r}, group_size={size!r}"
                )
            if tid in self._member_group:
                raise ValueError(f"trajectory {tid!r} is expected twice")
            group = self._groups.setdefault(str(gid), _Group(size))
            if group.size != size:
                raise ValueError(f"group {gid!r} has members with group_size {group.size} and {size}")
            if len(group.inputs) >= size:
                raise ValueError(f"group {gid!r} has more than its group_size={size} members")
            group.inputs[tid] = dict(trajectory)
            self._member_group[tid] = str(gid)
            self._attempts[tid] = 1
            self._running[tid] = tid

    @property
    def pending(self) -> int:
        """Groups not yet released."""
        return len(self._groups)

    def add(self, trajectory: Mapping[str, Any]) -> Collected:
        """Record one finished trajectory; returns the groups it completed and the retries it asks for."""
        run_id = trajectory.get("trajectory_id")
        tid = self._running.pop(run_id, None)
        if tid is None:
            raise ValueError(f"trajectory {run_id!r} was not expected (or came back twice)")
        group = self._groups[self._member_group[tid]]
        result = {**trajectory, "trajectory_id": tid, "member_attempts": self._attempts[tid]}
        out = Collected()
        failure = member_failure(result, self.config)
        if failure is not None and self._attempts[tid] <= self.config.max_member_retries:
            fresh = {**group.inputs[tid], "trajectory_id": retry_id(tid, self._attempts[tid])}
            self._attempts[tid] += 1
            self._running[fresh["trajectory_id"]] = tid
            self.retried += 1
            out.retries.append(fresh)
            return out
        group.done[tid] = result
        if failure is not None:
            group.failures[tid] = failure
        if len(group.done) == group.size:
            out.groups.append(self._release(self._member_group[tid], group))
        return out

    def _release(self, gid: str, group: _Group) -> list[dict[str, Any]]:
        del self._groups[gid]
        members = [group.done[tid] for tid in group.inputs]  # in the order they were expected
        for member in members:
            del self._member_group[member["trajectory_id"]]
            del self._attempts[member["trajectory_id"]]
        self.released += 1
        common = {"group_id": gid, "group_size": group.size}
        if group.failures:
            self.failed += 1
            reason = "; ".join(f"member {tid}: {group.failures[tid]}" for tid in group.inputs if tid in group.failures)
            return [{**m, **common, "advantage": None, "group_failed": True, "group_error": reason} for m in members]
        rewards = [m.get("reward") for m in members]
        values: list[float | None] = [None] * len(members)
        if all(isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) for r in rewards):
            values = list(advantages(rewards, self.config))
        return [
            {**m, **common, "advantage": value, "group_failed": False, "group_error": None}
            for m, value in zip(members, values, strict=True)
        ]


def roll_groups(
    run: Callable[[Iterable[dict[str, Any]]], Iterable[Any]],
    trajectories: Iterable[dict[str, Any]],
    collector: GroupCollector,
) -> Iterator[tuple[Any, list[list[dict[str, Any]]]]]:
    """Roll out ``trajectories`` with ``run`` (``RolloutFarm.run``: batches with ``.trajectories``) and
    yield each batch with the groups it completed; failed members go to a further ``run`` until every
    group is released. A list is registered with the collector at once; any other iterable (a
    generator over a large file) as ``run`` reads it, so only the groups in flight are held. Raises
    RuntimeError if ``run`` loses a trajectory."""
    pending: Iterable[dict[str, Any]]
    if isinstance(trajectories, list):
        collector.expect(trajectories)
        pending = trajectories
    else:
        pending = _expected(trajectories, collector)
    while True:
        retries: list[dict[str, Any]] = []
        for batch in run(pending):
            groups: list[list[dict[str, Any]]] = []
            for trajectory in batch.trajectories:
                collected = collector.add(trajectory)
                groups += collected.groups
                retries += collected.retries
            yield batch, groups
        if not retries:
            break
        pending = retries
    if collector.pending:
        raise RuntimeError(f"{collector.pending} group(s) did not complete: the rollout lost trajectories")


def _expected(trajectories: Iterable[dict[str, Any]], collector: GroupCollector) -> Iterator[dict[str, Any]]:
    """``trajectories``, each registered with ``collector`` as it is read."""
    for trajectory in trajectories:
        collector.expect([trajectory])
        yield trajectory
