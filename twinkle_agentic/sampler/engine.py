"""Engine configuration shared by the offline and the async vLLM samplers."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.errors import ConfigError

from .base import context_full_response, params_per_input, prompt_ids_of

WEIGHT_TRANSFER_BACKENDS = (None, "gloo", "nccl")


class EngineConfigError(ConfigError):
    """A vLLM engine setting is invalid; the message names it and the fix."""


@dataclass(frozen=True)
class VLLMEngineConfig:
    """vLLM engine arguments we set explicitly; anything else goes in ``engine_kwargs``.

    ``max_model_len`` None lets vLLM take the model's limit. ``seed`` fixes sampling for requests
    that carry no seed of their own. On GPU nodes give the actor ``num_gpus=tensor_parallel_size``.
    The rollout farm's ``EngineConfig`` extends this class with the worker's Ray resources, so each
    setting is declared here once.
    """

    model: str = field(metadata={"help": "model directory or hub id (default: the bundled tiny model)"})
    max_model_len: int | None = field(default=None, metadata={"help": "context length (default: the model's)"})
    dtype: str = field(default="auto", metadata={"help": "weights and activations dtype (auto, float32, bfloat16...)"})
    seed: int = field(default=0, metadata={"help": "sampling seed of requests that carry none"})
    tensor_parallel_size: int = field(default=1, metadata={"help": "GPUs each layer is sharded over (one node)"})
    pipeline_parallel_size: int = field(
        default=1, metadata={"help": "pipeline stages the layers are split into (each tensor_parallel_size GPUs)"}
    )
    gpu_memory_utilization: float = field(default=0.9, metadata={"help": "share of GPU memory vLLM may take"})
    enable_prefix_caching: bool | None = field(default=None, metadata={"help": "vLLM prefix caching (default: vLLM's)"})
    trust_remote_code: bool = field(default=False, metadata={"help": "run the model repository's own code"})
    weight_transfer: str | None = field(
        default=None,
        metadata={
            "help": "vLLM weight-transfer backend a trainer's process group can push weights through: "
            "nccl (GPU engines) or gloo (CPU engines); null: checkpoint and object-store updates only"
        },
    )
    engine_kwargs: dict[str, Any] = field(default_factory=dict, metadata={"help": "other vllm.LLM arguments"})

    def __post_init__(self) -> None:
        if not self.model or not isinstance(self.model, str):
            raise EngineConfigError(f"model must name a model directory or hub id, got {self.model!r}")
        if self.max_model_len is not None and (not isinstance(self.max_model_len, int) or self.max_model_len < 2):
            raise EngineConfigError(f"max_model_len must be null or an integer >= 2, got {self.max_model_len!r}")
        if not isinstance(self.tensor_parallel_size, int) or self.tensor_parallel_size < 1:
            raise EngineConfigError(f"tensor_parallel_size must be an integer >= 1, got {self.tensor_parallel_size!r}")
        if not isinstance(self.pipeline_parallel_size, int) or self.pipeline_parallel_size < 1:
            raise EngineConfigError(
                f"pipeline_parallel_size must be an integer >= 1, got {self.pipeline_parallel_size!r}"
            )
        if self.weight_transfer not in WEIGHT_TRANSFER_BACKENDS:
            raise EngineConfigError(
                f"weight_transfer must be null, gloo or nccl, got {self.weight_transfer!r}: nccl on GPU engines, "
                "gloo on CPU engines"
            )
        if not isinstance(self.engine_kwargs, dict):
            raise EngineConfigError(f"engine_kwargs must be a mapping, got {type(self.engine_kwargs).__name__}")

    @property
    def world_size(self) -> int:
        """Shards (GPU processes) of one engine: ``tensor_parallel_size * pipeline_parallel_size``."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def vllm_settings(self) -> dict[str, Any]:
        """This class's own fields (not those a subclass adds), as keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(VLLMEngineConfig)}

    def to_engine_kwargs(self) -> dict[str, Any]:
        skip = ("engine_kwargs", "weight_transfer")
        kwargs = {k: v for k, v in self.vllm_settings().items() if k not in skip and v is not None}
        if self.weight_transfer:
            kwargs["weight_transfer_config"] = {"backend": self.weight_transfer}
        return {**kwargs, **self.engine_kwargs}


def fit_to_context(
    inputs: list[Any], sampling_params: Any, max_model_len: int
) -> tuple[list[list[int]], list[SamplingParams], dict[int, Any]]:
    """Prompt ids and params per input; inputs that leave no room to generate are answered up front.

    vLLM rejects a whole ``generate`` batch when one prompt is too long; here such a prompt gets a
    ``length`` response with no tokens instead, and the others are sampled.
    """
    prompts = [prompt_ids_of(item) for item in inputs]
    params = params_per_input(sampling_params, len(prompts))
    answered = {i: context_full_response(ids) for i, ids in enumerate(prompts) if len(ids) >= max_model_len}
    return prompts, params, answered
