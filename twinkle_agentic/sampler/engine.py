"""Engine configuration shared by the offline and the async vLLM samplers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from twinkle_agentic.data_format import SamplingParams

from .base import context_full_response, params_per_input, prompt_ids_of


@dataclass
class VLLMEngineConfig:
    """vLLM engine arguments we set explicitly; anything else goes in ``engine_kwargs``.

    ``max_model_len`` None lets vLLM take the model's limit. ``seed`` fixes sampling for requests
    that carry no seed of their own. On GPU nodes give the actor ``num_gpus=tensor_parallel_size``.
    """

    model: str
    max_model_len: int | None = None
    dtype: str = "auto"
    seed: int = 0
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool | None = None
    trust_remote_code: bool = False
    engine_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("VLLMEngineConfig.model must name a model directory or id")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be None or >= 2, got {self.max_model_len!r}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size!r}")

    def to_engine_kwargs(self) -> dict[str, Any]:
        kwargs = {k: v for k, v in asdict(self).items() if k != "engine_kwargs" and v is not None}
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
