"""Sampling parameters and sampler outputs.

``SamplingParams`` validates eagerly so a bad value fails where it is written, with the field named,
rather than deep inside an engine on another node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from numbers import Integral, Real
from typing import Any, Literal

StopReason = Literal["stop", "length", "abort", "error"]
TokenLogprob = float | list[tuple[int, float]] | None


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))


@dataclass
class SamplingParams:
    max_tokens: int | None = None
    seed: int | None = None
    stop: str | list[str] | list[int] | None = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    num_samples: int = 1

    def __post_init__(self) -> None:
        self._check_optional_int("max_tokens", minimum=0)
        if self.seed is not None and not _is_int(self.seed):
            raise self._error("seed", "must be an integer or None")
        self._check_stop()
        self._check_real("temperature", lambda v: v >= 0, ">= 0")
        if not _is_int(self.top_k) or not (self.top_k == -1 or self.top_k >= 1):
            raise self._error("top_k", "must be -1 (disabled) or an integer >= 1")
        self._check_real("top_p", lambda v: 0 < v <= 1, "in (0, 1]")
        self._check_real("repetition_penalty", lambda v: v > 0, "> 0")
        self._check_optional_int("logprobs", minimum=0)
        self._check_optional_int("prompt_logprobs", minimum=0)
        if not _is_int(self.num_samples) or self.num_samples < 1:
            raise self._error("num_samples", "must be an integer >= 1")

    def _error(self, name: str, rule: str) -> ValueError:
        return ValueError(f"SamplingParams.{name} {rule}, got {getattr(self, name)!r}")

    def _check_optional_int(self, name: str, minimum: int) -> None:
        value = getattr(self, name)
        if value is not None and (not _is_int(value) or value < minimum):
            raise self._error(name, f"must be None or an integer >= {minimum}")

    def _check_real(self, name: str, ok: Any, rule: str) -> None:
        value = getattr(self, name)
        if not _is_real(value) or not ok(float(value)):
            raise self._error(name, f"must be a finite number {rule}")

    def _check_stop(self) -> None:
        stop = self.stop
        if stop is None or isinstance(stop, str):
            return
        if isinstance(stop, (list, tuple)) and (
            all(isinstance(s, str) for s in stop) or all(_is_int(s) and s >= 0 for s in stop)
        ):
            self.stop = list(stop)
            return
        raise self._error("stop", "must be a str, a list of str or a list of token ids (not mixed)")

    @property
    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        if isinstance(self.stop, str):
            return [self.stop]
        return [s for s in self.stop if isinstance(s, str)]

    @property
    def stop_token_ids(self) -> list[int]:
        if isinstance(self.stop, list):
            return [int(s) for s in self.stop if _is_int(s)]
        return []

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SamplingParams:
        """Build from a config dict: ``max_new_tokens`` means ``max_tokens``; unknown keys are ignored."""
        data = dict(data or {})
        if "max_new_tokens" in data and "max_tokens" not in data:
            data["max_tokens"] = data.pop("max_new_tokens")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def replace(self, **changes: Any) -> SamplingParams:
        return type(self)(**{**self.to_dict(), **changes})

    def to_vllm(self, **overrides: Any) -> Any:
        """Return a ``vllm.SamplingParams`` (vLLM is imported only here).

        ``overrides`` are extra ``vllm.SamplingParams`` arguments with no field here (e.g.
        ``ignore_eos``); they win over the mapped fields.
        """
        from vllm import SamplingParams as VllmSamplingParams

        if self.max_tokens == 0:
            raise ValueError("vLLM needs SamplingParams.max_tokens >= 1 (for prompt logprobs only, use max_tokens=1)")
        kwargs: dict[str, Any] = {
            # None is passed through: vLLM then generates up to max_model_len (its own default is 16)
            "max_tokens": self.max_tokens,
            "n": self.num_samples,
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "top_k": self.top_k if self.top_k >= 1 else 0,
            "repetition_penalty": float(self.repetition_penalty),
        }
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if self.stop_strings:
            kwargs["stop"] = self.stop_strings
        if self.stop_token_ids:
            kwargs["stop_token_ids"] = self.stop_token_ids
        if self.logprobs is not None:
            kwargs["logprobs"] = self.logprobs
        if self.prompt_logprobs is not None:
            kwargs["prompt_logprobs"] = self.prompt_logprobs
        return VllmSamplingParams(**{**kwargs, **overrides})


@dataclass
class SampledSequence:
    """One generated continuation. ``logprobs[k]`` belongs to ``tokens[k]``."""

    tokens: list[int]
    logprobs: list[TokenLogprob] | None = None
    stop_reason: StopReason = "stop"
    decoded: str | None = None


@dataclass
class SampleResponse:
    """Everything the sampler returns for one prompt."""

    sequences: list[SampledSequence] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: list[Any] | None = None
