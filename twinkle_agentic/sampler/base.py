"""The sampler contract and the vLLM-output conversion every sampler shares.

Contract (SPEC 17.2): ``sample(List[InputFeature], SamplingParams) -> List[SampleResponse]``, one
response per input in order, each with at least one sequence and ``len(logprobs) == len(tokens)``
whenever logprobs are present, and ``policy_versions`` (when present) runs that cover the tokens
exactly. ``sampling_params`` may also be a list aligned with the inputs (the rollout uses that to cap
each trajectory's tokens at its remaining budget).

Conversion from vLLM objects is duck-typed (``token_ids``, ``logprobs``, ``finish_reason``...) so it
is unit-tested without an engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from twinkle_agentic.data_format import (
    InputFeature,
    SampledSequence,
    SampleResponse,
    SamplingParams,
    check_policy_version_runs,
)

FINISH_REASONS = {"stop": "stop", "length": "length", "abort": "abort", "error": "error"}
UNKNOWN_FINISH_REASON = "length"  # e.g. vLLM's "repetition": the sequence was cut, not finished

ParamsArg = SamplingParams | Sequence[SamplingParams] | None


class Sampler(Protocol):
    def sample(self, inputs: list[InputFeature], sampling_params: ParamsArg = None) -> list[SampleResponse]: ...


@dataclass(frozen=True)
class DeviceMesh:
    """What a rollout needs to know about a data-parallel sampler: how many shards a batch is split into."""

    data_world_size: int = 1


def map_finish_reason(reason: Any) -> str:
    """vLLM finish reason -> ``stop``/``length``/``abort``/``error``; anything else (or None) -> ``length``."""
    return FINISH_REASONS.get(str(reason).lower() if reason is not None else "", UNKNOWN_FINISH_REASON)


def prompt_ids_of(item: InputFeature | Sequence[int]) -> list[int]:
    """The prompt tokens of an ``InputFeature`` (or of a plain token list)."""
    ids = item.get("input_ids") if isinstance(item, Mapping) else item
    if ids is None or isinstance(ids, (str, bytes)):
        raise TypeError(f"a sampler input needs 'input_ids' (a list of token ids), got {type(item).__name__}")
    ids = [int(t) for t in ids]
    if not ids:
        raise ValueError("a sampler input has no input_ids; vLLM cannot sample from an empty prompt")
    return ids


def params_per_input(sampling_params: ParamsArg, count: int) -> list[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * count
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * count
    params = list(sampling_params)
    if len(params) != count:
        raise ValueError(f"{len(params)} sampling params for {count} inputs; pass one, or one per input")
    for p in params:
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params entries must be SamplingParams, got {type(p).__name__}")
    return params


def _chosen_logprob(position: Mapping[int, Any] | None, token: int) -> float | None:
    if not position:
        return None
    entry = position.get(token)
    if entry is None:  # vLLM always includes the chosen token; be safe with other engines
        return None
    return float(getattr(entry, "logprob", entry))


def token_logprobs(token_ids: Sequence[int], logprobs: Sequence[Any] | None) -> list[float] | None:
    """One float per generated token (the chosen token's logprob), or None if any is missing."""
    if logprobs is None:
        return None
    out = []
    for token, position in zip(token_ids, logprobs, strict=False):
        value = _chosen_logprob(position, token)
        if value is None:
            return None
        out.append(value)
    return out if len(out) == len(token_ids) else None


def prompt_token_logprobs(prompt_ids: Sequence[int], prompt_logprobs: Sequence[Any] | None) -> list[float | None] | None:
    """Per prompt token, the logprob the model gave it (None for the first token, which has no context)."""
    if prompt_logprobs is None:
        return None
    return [_chosen_logprob(position, token) for token, position in zip(prompt_ids, prompt_logprobs, strict=False)]


def to_sample_response(output: Any, policy_version: int | None = None) -> SampleResponse:
    """A vLLM ``RequestOutput`` as a ``SampleResponse`` (logprobs as floats of the chosen tokens);
    ``policy_version``, when given, is the version of the weights that generated every token."""
    prompt_ids = list(getattr(output, "prompt_token_ids", None) or [])
    sequences = []
    for completion in output.outputs:
        tokens = list(completion.token_ids)
        sequences.append(
            SampledSequence(
                tokens=tokens,
                logprobs=token_logprobs(tokens, completion.logprobs),
                stop_reason=map_finish_reason(completion.finish_reason),
                decoded=completion.text,
                policy_versions=None if policy_version is None else [(policy_version, len(tokens))],
            )
        )
    return SampleResponse(
        sequences=sequences,
        prompt_token_ids=prompt_ids,
        prompt_logprobs=prompt_token_logprobs(prompt_ids, getattr(output, "prompt_logprobs", None)),
    )


def context_full_response(prompt_ids: list[int]) -> SampleResponse:
    """The answer for a prompt that leaves no room to generate: no tokens, stopped by ``length``."""
    return SampleResponse(
        sequences=[SampledSequence(tokens=[], logprobs=[], stop_reason="length", decoded="")],
        prompt_token_ids=prompt_ids,
    )


def check_responses(responses: Any, count: int) -> list[SampleResponse]:
    """Enforce the contract on any sampler's output; a violation is a ``RuntimeError`` naming it."""
    if not isinstance(responses, (list, tuple)) or len(responses) != count:
        got = len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
        raise RuntimeError(f"sampler returned {got} responses for {count} inputs; expected one per input")
    for index, response in enumerate(responses):
        sequences = getattr(response, "sequences", None)
        if not sequences:
            raise RuntimeError(f"sampler response {index} has no sequences")
        for seq in sequences:
            if seq.logprobs is not None and len(seq.logprobs) != len(seq.tokens):
                raise RuntimeError(
                    f"sampler response {index}: {len(seq.logprobs)} logprobs for {len(seq.tokens)} tokens"
                )
            try:
                check_policy_version_runs(getattr(seq, "policy_versions", None), len(seq.tokens))
            except ValueError as exc:
                raise RuntimeError(f"sampler response {index}: {exc}") from exc
    return list(responses)


def pad_for_data_parallel(items: list[Any], world_size: int) -> list[Any]:
    """Repeat the last item until the batch divides evenly across ``world_size`` data-parallel shards."""
    if world_size <= 1 or not items or len(items) % world_size == 0:
        return items
    return items + [items[-1]] * (world_size - len(items) % world_size)
