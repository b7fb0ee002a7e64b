"""The rollout job's figures: throughput, tool latency, and where the engines' time went.

Definitions (measured inside the workers, see ``actors/activity.py``):

- ``trajectories_per_s``, ``generated_tokens_per_s``: trajectories finished in this run and the tokens
  the policy generated for them, over the rollout's wall time (first batch sent to last batch back;
  engine start-up is reported separately);
- ``tool_latency_p50_s`` / ``p99``: each tool call as the worker saw it (HTTP or WebSocket round trip
  included; environment resets are calls named ``<env>.reset``);
- ``engine_idle_waiting_for_tools``: over the time workers spent inside batches, the share in which a
  tool call was outstanding and no generation request was in flight;
- ``engine_idle_share``: the share of the engines' wall time (engines x rollout wall time) with zero
  generation requests in flight, whatever the reason (tools, bookkeeping, no batch); the same measure
  in every mode (``sync``: between batched turns; ``async``: when no trajectory is generating);
- ``trajectory_retries``: extra attempts a failure policy made (``async`` mode's ``rollout_attempts``);
- ``worker_utilisation``: time inside batches over workers x rollout wall time;
- ``groups``, ``failed_groups``: groups written (the samples of one prompt) and those failed because a
  member still failed after ``groups.max_member_retries`` fresh rollouts; ``member_retries``: those
  fresh rollouts; ``mean_reward`` / ``reward_std`` (population): over the trajectories written with a
  numeric ``reward`` (``scored``), failed groups' members included;
- ``policy_versions``: trajectories per policy version (the version of the weights that generated a
  trajectory's last token; ``"none"`` where unknown or no token was generated), for this run and,
  as ``policy_versions_in_output``, for the whole output.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.actors.activity import Activity


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def is_reward(value: Any) -> bool:
    """A trajectory's ``reward`` is a score (not None, a bool or NaN)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class RewardStats:
    """Count, mean and population spread of rewards, updated one at a time (Welford's method), so a
    tally over millions of trajectories holds three numbers, not every reward."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations from the running mean

    @classmethod
    def of(cls, rewards: Iterable[float]) -> RewardStats:
        stats = cls()
        for reward in rewards:
            stats.add(reward)
        return stats

    def add(self, reward: float) -> None:
        self.count += 1
        delta = float(reward) - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (float(reward) - self.mean)

    def merged(self, other: RewardStats) -> RewardStats:
        """The figures of both sets of rewards together (Chan et al.'s pairwise combination)."""
        count = self.count + other.count
        if not count:
            return RewardStats()
        delta = other.mean - self.mean
        mean = self.mean + delta * other.count / count
        return RewardStats(count, mean, self.m2 + other.m2 + delta * delta * self.count * other.count / count)

    @property
    def std(self) -> float:
        return math.sqrt(max(0.0, self.m2) / self.count) if self.count else 0.0


def reward_figures(rewards: RewardStats | Iterable[float]) -> dict[str, Any]:
    """``scored``, ``mean_reward`` and ``reward_std`` (population; None without rewards)."""
    stats = rewards if isinstance(rewards, RewardStats) else RewardStats.of(rewards)
    if not stats.count:
        return {"scored": 0, "mean_reward": None, "reward_std": None}
    return {"scored": stats.count, "mean_reward": round(stats.mean, 6), "reward_std": round(stats.std, 6)}


def policy_version_key(trajectory: dict[str, Any]) -> str:
    """The key a trajectory is counted under: its ``policy_version`` as a string, ``"none"`` without one."""
    version = trajectory.get("policy_version")
    return "none" if version is None else str(version)


@dataclass
class RolloutTally:
    """Running totals while batches come back."""

    trajectories: int = 0
    generated_tokens: int = 0
    total_tokens: int = 0
    stop_reasons: Counter = field(default_factory=Counter)
    policy_versions: Counter = field(default_factory=Counter)
    activity: Activity = field(default_factory=Activity)  # time sums; its calls are in ``tool_latencies``
    tool_latencies: dict[str, array] = field(default_factory=dict)  # tool -> seconds per call (8 bytes each)
    tool_errors: Counter = field(default_factory=Counter)
    retries: int = 0
    groups: int = 0
    failed_groups: int = 0
    member_retries: int = 0
    rewards: RewardStats = field(default_factory=RewardStats)

    def add(
        self, trajectories: list[dict[str, Any]], activity: Activity | None = None, generated_tokens: int = 0
    ) -> None:
        """Count written ``trajectories``, and a batch's ``activity`` and ``generated_tokens``."""
        self.trajectories += len(trajectories)
        self.generated_tokens += generated_tokens
        self.total_tokens += sum(len(t.get("input_ids") or []) for t in trajectories)
        self.stop_reasons.update(t.get("stop_reason") for t in trajectories)
        self.policy_versions.update(policy_version_key(t) for t in trajectories)
        self.retries += sum(max(0, int(t.get("rollout_attempts") or 1) - 1) for t in trajectories)
        for t in trajectories:
            if is_reward(t.get("reward")):
                self.rewards.add(float(t["reward"]))
        if activity is not None:  # summed in place: a tally over a long run copies nothing per batch
            self.activity.active_s += activity.active_s
            self.activity.engine_busy_s += activity.engine_busy_s
            self.activity.tool_wait_s += activity.tool_wait_s
            for call in activity.tool_calls:
                self.tool_latencies.setdefault(call.tool, array("d")).append(call.latency_s)
                self.tool_errors[call.tool] += not call.ok

    def add_group(self, members: list[dict[str, Any]]) -> None:
        """Count a released group and write its members' figures (``add``)."""
        self.groups += 1
        self.failed_groups += bool(members and members[0].get("group_failed"))
        self.add(members)


@dataclass
class RolloutSummary:
    output: str
    files: dict[str, str]
    tally: RolloutTally
    resumed: int
    total_in_output: int
    stop_reasons_in_output: Counter
    wall_s: float
    rollout_s: float
    startup_s: float
    engines: int
    restarts: int
    given_up: int
    policy_versions_in_output: Counter = field(default_factory=Counter)
    groups_in_output: int = 0
    failed_groups_in_output: int = 0
    rewards_in_output: RewardStats = field(default_factory=RewardStats)
    cluster: str = ""
    services: dict[str, str] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        return rollout_figures(self.tally, self.rollout_s, self.engines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "output": self.output,
            "files": self.files,
            "this_run": self.figures(),
            "resumed_from_earlier_runs": self.resumed,
            "trajectories_in_output": self.total_in_output,
            "stop_reasons_in_output": dict(self.stop_reasons_in_output),
            "policy_versions_in_output": dict(self.policy_versions_in_output),
            "groups_in_output": {
                "groups": self.groups_in_output,
                "failed_groups": self.failed_groups_in_output,
                **reward_figures(self.rewards_in_output),
            },
            "wall_s": round(self.wall_s, 3),
            "rollout_s": round(self.rollout_s, 3),
            "engine_startup_s": round(self.startup_s, 3),
            "engines": self.engines,
            "worker_restarts": self.restarts,
            "trajectories_given_up": self.given_up,
            "cluster": self.cluster,
            "services": self.services,
        }

    def render(self) -> str:
        f = self.figures()
        reasons = ", ".join(
            f"{k} {v}" for k, v in sorted(self.stop_reasons_in_output.items(), key=lambda kv: -kv[1])
        )
        lines = [
            f"rollout: {f['trajectories']} new trajectories in {self.rollout_s:.1f} s on {self.engines} engine(s) "
            f"(+{self.startup_s:.1f} s engine start-up, {self.wall_s:.1f} s in all); {self.resumed} resumed from an "
            "earlier run",
            f"  throughput     {f['trajectories_per_s']:.2f} trajectories/s, {f['generated_tokens_per_s']:.0f} generated "
            f"tokens/s ({f['generated_tokens']} generated, {f['total_tokens']} in all)",
            f"  tool calls     {f['tool_calls']}, latency p50 {_ms(f['tool_latency_p50_s'])}, p99 "
            f"{_ms(f['tool_latency_p99_s'])}",
        ]
        for name, tool in f["tools"].items():
            lines.append(
                f"    {name:<20} {tool['calls']:>6} calls, {tool['errors']} errors, p50 {_ms(tool['p50_s'])}, "
                f"p99 {_ms(tool['p99_s'])}"
            )
        lines += [
            f"  engine time    busy {_pct(f['engine_busy_share'])}, idle waiting for tools "
            f"{_pct(f['engine_idle_waiting_for_tools'])}, other {_pct(f['other_share'])} (of time inside batches); "
            f"worker utilisation {_pct(f['worker_utilisation'])}",
            f"  engine idle    {_pct(f['engine_idle_share'])} of engine wall time with no request in flight",
            f"  restarts       {self.restarts} worker restart(s), {self.given_up} trajectories given up, "
            f"{f['trajectory_retries']} trajectory retries",
            f"  groups         {f['groups']} ({f['failed_groups']} failed, {f['member_retries']} member retries); "
            f"reward mean {_num(f['mean_reward'])}, std {_num(f['reward_std'])} over {f['scored']} scored trajectories",
            f"  output         {self.total_in_output} trajectories ({reasons or 'none'}) in {self.groups_in_output} "
            f"groups ({self.failed_groups_in_output} failed)",
            f"  policy         trajectories per version: {_versions(self.policy_versions_in_output)} in the output, "
            f"{_versions(self.tally.policy_versions)} in this run",
        ]
        lines += [f"    {label:<12} {path}" for label, path in self.files.items()]
        return "\n".join(lines)


def rollout_figures(tally: RolloutTally, rollout_s: float, engines: int) -> dict[str, Any]:
    """The module docstring's figures for one rollout (``tally`` over ``rollout_s`` on ``engines``)."""
    activity = tally.activity
    per_tool = tally.tool_latencies
    latencies = [value for values in per_tool.values() for value in values]
    failed = tally.tool_errors
    active = activity.active_s

    def rate(count: float) -> float:
        return count / rollout_s if rollout_s > 0 else 0.0

    return {
        "trajectories": tally.trajectories,
        "trajectories_per_s": round(rate(tally.trajectories), 3),
        "generated_tokens": tally.generated_tokens,
        "generated_tokens_per_s": round(rate(tally.generated_tokens), 1),
        "total_tokens": tally.total_tokens,
        "tool_calls": len(latencies),
        "tool_latency_p50_s": _round(percentile(latencies, 50)),
        "tool_latency_p99_s": _round(percentile(latencies, 99)),
        "tools": {
            name: {
                "calls": len(values),
                "errors": failed[name],
                "p50_s": _round(percentile(values, 50)),
                "p99_s": _round(percentile(values, 99)),
            }
            for name, values in sorted(per_tool.items())
        },
        "engine_busy_share": _share(activity.engine_busy_s, active),
        "engine_idle_waiting_for_tools": _share(activity.tool_wait_s, active),
        "engine_idle_share": _share(
            max(0.0, engines * rollout_s - activity.engine_busy_s), engines * rollout_s
        ),
        "trajectory_retries": tally.retries,
        "groups": tally.groups,
        "failed_groups": tally.failed_groups,
        "member_retries": tally.member_retries,
        **reward_figures(tally.rewards),
        "other_share": _share(activity.other_s, active),
        "worker_utilisation": _share(active, engines * rollout_s),
        "stop_reasons": dict(tally.stop_reasons),
        "policy_versions": dict(tally.policy_versions),
    }


def _versions(counts: Counter) -> str:
    """``v0 12, v1 30, none 2``: numbered versions in order, then the unknown."""
    numbered = sorted((k for k in counts if k != "none"), key=lambda k: (len(k), k))  # "2" before "10"
    parts = [f"v{k} {counts[k]}" for k in numbered] + ([f"none {counts['none']}"] if counts.get("none") else [])
    return ", ".join(parts) or "n/a"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole > 0 else None


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"
