"""Where an engine's processes go: one Ray placement group per multi-GPU engine, plain resources otherwise.

An engine sharded over several GPUs (``tensor_parallel_size * pipeline_parallel_size > 1``) needs all
its GPUs reserved at once, and a tensor-parallel group's GPUs on one node, which ``num_gpus`` on a
single actor cannot say. Such an engine gets a placement group: bundle 0 holds the rollout worker
actor (its CPUs only), then one bundle per shard with one GPU, the ``accelerator_type:<X>`` resource
and the custom ``resources``. The worker runs vLLM with its Ray executor, which finds the group the
actor runs in and starts one process on each GPU bundle. A one-shard engine keeps plain actor
options (``num_gpus``) plus the same accelerator type and custom resources.

``engine_placement`` is pure (no Ray); ``create_group``, ``group_strategy`` and ``remove_group``
are the Ray edge the farm's driver calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import EngineConfig

STRATEGIES = ("STRICT_PACK", "PACK", "SPREAD", "STRICT_SPREAD")
SPLITS_NODES = ("SPREAD", "STRICT_SPREAD")  # may put a tensor-parallel group's GPUs on different nodes
ACCELERATOR_PREFIX = "accelerator_type:"  # Ray's resource of a node's accelerator model (ray._common.utils)
ACCELERATOR_AMOUNT = 0.001  # what Ray's own accelerator_type option requests: a node constraint, not a count
WORKER_BUNDLE = 0  # the bundle the rollout worker actor runs in


def default_strategy(tensor_parallel_size: int, pipeline_parallel_size: int) -> str:
    """STRICT_PACK (every GPU on one node) for a single pipeline stage; PACK (one node when it fits,
    stages on several nodes otherwise) when the engine has pipeline stages."""
    return "PACK" if pipeline_parallel_size > 1 else "STRICT_PACK"


def shard_resources(cfg: EngineConfig) -> dict[str, float]:
    """Ray resources besides CPU/GPU that each shard reserves: the accelerator type and the custom ones."""
    resources = {str(name): float(amount) for name, amount in cfg.resources.items()}
    if cfg.accelerator_type:
        resources[f"{ACCELERATOR_PREFIX}{cfg.accelerator_type}"] = ACCELERATOR_AMOUNT
    return resources


@dataclass(frozen=True)
class EnginePlacement:
    """How one engine is placed: ``bundles`` and ``strategy`` of its placement group (none for a
    one-shard engine), and the resources the worker actor itself asks for."""

    bundles: tuple[dict[str, float], ...]
    strategy: str | None
    num_cpus: float
    num_gpus: float
    resources: dict[str, float]

    @property
    def uses_group(self) -> bool:
        return bool(self.bundles)

    def actor_options(self) -> dict[str, Any]:
        """The placement part of the worker's Ray actor options (the group itself is added per launch)."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.resources:
            options["resources"] = dict(self.resources)
        return options

    def group_spec(self) -> dict[str, Any]:
        """The group as plain data (``bundles``, ``strategy``): what ``RolloutWorker.ray_options`` carries."""
        return {"bundles": [dict(b) for b in self.bundles], "strategy": self.strategy}

    def describe(self) -> str:
        """One line: the group's strategy and bundles (the shards' identical bundles once), or the actor's
        resources."""
        if not self.uses_group:
            return f"no placement group; the actor reserves {self.actor_options()}"
        worker, *shards = self.bundles
        return (
            f"placement group {self.strategy}: bundle {WORKER_BUNDLE} {worker} (the worker), "
            f"bundles 1-{len(shards)} {shards[0]} (one per shard)"
        )


def engine_placement(cfg: EngineConfig) -> EnginePlacement:
    """The placement of one engine of ``cfg`` (validated already: ``num_gpus`` equals the shards of a
    multi-shard engine)."""
    extra = shard_resources(cfg)
    if cfg.world_size == 1:
        return EnginePlacement((), None, cfg.num_cpus, cfg.num_gpus, extra)
    worker = {"CPU": float(cfg.num_cpus)}
    shard = {"GPU": 1.0, **extra}
    bundles = (worker, *({**shard} for _ in range(cfg.world_size)))
    strategy = cfg.placement_strategy or default_strategy(cfg.tensor_parallel_size, cfg.pipeline_parallel_size)
    return EnginePlacement(bundles, strategy, cfg.num_cpus, 0.0, {})


# -- the Ray edge ---------------------------------------------------------------------------------------


def create_group(spec: Mapping[str, Any], name: str = "") -> Any:
    """Ask Ray for a placement group of ``spec`` (``group_spec``); returns at once (the actor scheduled
    into it waits until Ray has reserved every bundle)."""
    from ray.util.placement_group import placement_group

    return placement_group([dict(b) for b in spec["bundles"]], strategy=spec["strategy"], name=name)


def group_strategy(group: Any) -> Any:
    """The worker actor's scheduling strategy: bundle 0 of ``group``, with the tasks and actors it starts
    (vLLM's shard processes) kept in the group."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(
        placement_group=group,
        placement_group_bundle_index=WORKER_BUNDLE,
        placement_group_capture_child_tasks=True,
    )


def remove_group(group: Any) -> None:
    """Release ``group``'s reservation (a group already removed is left alone)."""
    import contextlib

    from ray.util.placement_group import remove_placement_group

    with contextlib.suppress(Exception):
        remove_placement_group(group)
