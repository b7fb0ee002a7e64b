"""Sampling parameters and sampler outputs.

``SamplingParams`` validates eagerly so a bad value fails where it is written, with the field named,
rather than deep inside an engine on another node. It is frozen: a rollout's settings travel to the
workers as one value. Any other ``vllm.SamplingParams`` field (``min_p``, ``presence_penalty``...)
goes in ``extra`` and passes through to vLLM unchanged; ``check_vllm_fields`` refuses a name vLLM
does not know before an engine sees it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from numbers import Integral, Real
from typing import Any, Literal

from twinkle_agentic.errors import ConfigError

StopReason = Literal["stop", "length", "abort", "error"]
TokenLogprob = float | list[tuple[int, float]] | None


def _is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(float(value))


# vllm.SamplingParams arguments that fields here stand for: ``n`` is num_samples, ``stop_token_ids`` is
# the token ids in ``stop``; max_new_tokens is read as max_tokens.
VLLM_NAMES = {"n": "num_samples", "stop_token_ids": "stop"}
ALIASES = {"max_new_tokens": "max_tokens"}


class SamplingConfigError(ConfigError):
    """A sampling setting is invalid or unknown to vLLM; the message names the key and the fix."""


@dataclass(frozen=True)
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
    # vllm.SamplingParams fields with no field here; the key is spelt at the section's level in YAML
    # (``sampling: {min_p: 0.1}``) and as a flag (``--sampling.min_p 0.1``)
    extra: Mapping[str, Any] = field(default_factory=dict, metadata={"passthrough": True})

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
        self._check_extra()

    def _error(self, name: str, rule: str) -> ValueError:
        return SamplingConfigError(f"SamplingParams.{name} {rule}, got {getattr(self, name)!r}")

    def _check_extra(self) -> None:
        if not isinstance(self.extra, Mapping):
            raise self._error("extra", "must be a mapping of vllm.SamplingParams fields")
        for name in self.extra:
            if not isinstance(name, str) or not name or name.startswith("_"):
                raise SamplingConfigError(f"sampling key {name!r} is not a vllm.SamplingParams field; remove it")
            if name in VLLM_NAMES or name in ALIASES or name in _FIELD_NAMES:
                raise SamplingConfigError(
                    f"sampling key {name!r} is set through {VLLM_NAMES.get(name) or ALIASES.get(name) or name!r}; "
                    "write it there"
                )
        object.__setattr__(self, "extra", dict(self.extra))

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
            object.__setattr__(self, "stop", list(stop))
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
        """Build from a config mapping: ``max_new_tokens`` means ``max_tokens`` (which wins when both are
        given); a key that is no field here goes to ``extra`` (a vllm.SamplingParams field, passed through)."""
        data = dict(data or {})
        if not isinstance(data.get("extra", {}), Mapping):
            raise SamplingConfigError(f"sampling.extra must be a mapping, got {type(data['extra']).__name__}")
        extra = dict(data.pop("extra", None) or {})
        for alias, name in ALIASES.items():
            if alias in data:
                value = data.pop(alias)
                data.setdefault(name, value)
        extra.update({k: data.pop(k) for k in list(data) if k not in _FIELD_NAMES})
        return cls(**data, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_config(self) -> dict[str, Any]:
        """Every field, with the extra keys flattened in: the mapping ``from_dict`` reads back."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**out, **self.extra}

    def settings(self) -> dict[str, Any]:
        """The fields that differ from the defaults, extra keys flattened in: the config's view."""
        default = SamplingParams()
        out = {k: v for k, v in self.to_config().items() if k in _FIELD_NAMES and v != getattr(default, k)}
        return {**out, **self.extra}

    def check_vllm_fields(self) -> None:
        """Refuse ``extra`` keys that ``vllm.SamplingParams`` does not take, and values it refuses.

        vLLM is imported only when there are extra keys; where it is not installed they are checked
        on the engine's node instead, when the first request is built."""
        if not self.extra:
            return
        try:
            from vllm import SamplingParams as VllmSamplingParams
        except ImportError:
            return
        known = set(getattr(VllmSamplingParams, "__struct_fields__", ()))
        unknown = sorted(k for k in self.extra if known and k not in known)
        if unknown:
            public = sorted(k for k in known if not k.startswith("_") and k not in VLLM_NAMES and k not in _FIELD_NAMES)
            raise SamplingConfigError(
                f"sampling key(s) {unknown} are neither SamplingParams fields ({sorted(_FIELD_NAMES - {'extra'})}) "
                f"nor vllm.SamplingParams fields ({public}); fix the spelling or remove them"
            )
        try:
            self.to_vllm()
        except (TypeError, ValueError) as exc:
            raise SamplingConfigError(f"sampling {self.extra}: vLLM refuses them: {exc}") from exc

    def replace(self, **changes: Any) -> SamplingParams:
        return type(self)(**{**self.to_dict(), **changes})

    def to_vllm(self, **overrides: Any) -> Any:
        """Return a ``vllm.SamplingParams`` (vLLM is imported only here).

        ``extra``, then ``overrides`` (arguments a sampler adds, e.g. ``ignore_eos``), go on top of the
        mapped fields.
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
        return VllmSamplingParams(**{**kwargs, **self.extra, **overrides})


_FIELD_NAMES = frozenset(f.name for f in fields(SamplingParams))


PolicyVersionRuns = list[tuple[int, int]]


def check_policy_version_runs(runs: Any, token_count: int) -> PolicyVersionRuns | None:
    """``runs`` as a list of ``(version, token_count)`` tuples, or a ``ValueError`` naming the fault.

    A run is a policy version and how many consecutive tokens it generated; the counts must sum to
    ``token_count`` so every token has exactly one version. None (the sampler does not know) passes.
    """
    if runs is None:
        return None
    if isinstance(runs, (str, bytes)) or not isinstance(runs, (list, tuple)):
        raise ValueError(f"policy_versions must be a list of (version, token_count) pairs, got {type(runs).__name__}")
    out: PolicyVersionRuns = []
    for run in runs:
        if not isinstance(run, (list, tuple)) or len(run) != 2:
            raise ValueError(f"policy_versions entry {run!r} is not a (version, token_count) pair")
        version, count = run
        if not _is_int(version) or version < 0:
            raise ValueError(f"policy_versions entry {run!r}: the version must be an integer >= 0")
        if not _is_int(count) or count < 0:
            raise ValueError(f"policy_versions entry {run!r}: the token count must be an integer >= 0")
        out.append((int(version), int(count)))
    total = sum(count for _, count in out)
    if total != token_count:
        raise ValueError(f"policy_versions cover {total} tokens, but the sequence has {token_count}")
    return out


@dataclass
class SampledSequence:
    """One generated continuation. ``logprobs[k]`` belongs to ``tokens[k]``.

    ``policy_versions`` says which weights generated which tokens: runs of ``(version, token_count)``
    over ``tokens`` in order (``[(0, 12), (1, 30)]`` when an update landed after 12 tokens), counts
    summing to ``len(tokens)``; None when the sampler does not know (e.g. an OpenAI-compatible API).
    """

    tokens: list[int]
    logprobs: list[TokenLogprob] | None = None
    stop_reason: StopReason = "stop"
    decoded: str | None = None
    policy_versions: PolicyVersionRuns | None = None


@dataclass
class SampleResponse:
    """Everything the sampler returns for one prompt."""

    sequences: list[SampledSequence] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    prompt_logprobs: list[Any] | None = None
