"""``AsyncVLLMSampler``: vLLM's async engine (``AsyncLLM``) for per-request scheduling.

``await generate(prompt_ids, params, request_id)`` submits one request and returns its
``SampleResponse`` as soon as that request finishes, independently of any other: an asynchronous
rollout drives each trajectory on its own, with no turn barrier. ``sample(...)`` keeps the batched
contract on top of it, so the same object also serves ``MultiTurnRollout``.

The engine lives on a private event loop in a daemon thread: ``AsyncLLM`` binds its output handler
to the loop it first runs on, and callers come from anywhere (a sync rollout, another asyncio loop, a
Ray async actor's loop). ``generate`` hops onto that loop and back; cancelling the caller's await
cancels the request, which ``AsyncLLM`` then aborts in the engine.

A weight update pauses the engine (``AsyncLLM.pause_generation``): with ``on_update="finish"`` the
requests in flight complete on the old weights; with ``"abort_and_resume"`` they are aborted, and each
``generate`` resubmits its prompt plus the tokens generated so far once the new weights are in, so the
caller gets one sequence whose ``policy_versions`` runs say where the weights changed. Requests that
arrive during an update wait for it and run on the new weights.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any

from twinkle_agentic.data_format import InputFeature, SampledSequence, SampleResponse, SamplingParams
from twinkle_agentic.remote import remote_class

from .base import DeviceMesh, ParamsArg, check_responses, context_full_response, to_sample_response
from .engine import VLLMEngineConfig, fit_to_context
from .weights import (
    ABORT_AND_RESUME,
    FINISH_UPDATE,
    START_UPDATE,
    ServedWeights,
    Stopwatch,
    UpdateTimings,
    WeightUpdate,
    with_loader_extension,
)

ENGINE_START_TIMEOUT_S = 600.0


@remote_class(max_concurrency=1000)
class AsyncVLLMSampler(ServedWeights):
    """Samples with ``vllm.v1.engine.async_llm.AsyncLLM`` built from ``VLLMEngineConfig(model, **config)``.

    ``sampling_overrides`` as for ``VLLMSampler``.
    """

    device_mesh: DeviceMesh | None = None

    def __init__(self, model: str, *, sampling_overrides: dict[str, Any] | None = None, **config: Any):
        self.config = VLLMEngineConfig(model=str(model), **config)
        self.sampling_overrides = dict(sampling_overrides or {})
        self._ids = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]
        self._serving = asyncio.Event()  # cleared while an update runs: new requests wait for it
        self._serving.set()
        self._aborts = 0  # updates that aborted the requests in flight
        self._admitting = 0  # requests past the gate that the engine does not have yet
        self._admitted = asyncio.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="async-vllm-loop", daemon=True)
        self._thread.start()
        try:
            self.engine = self._run(self._start_engine(), timeout_s=ENGINE_START_TIMEOUT_S)
        except BaseException:
            self._stop_loop()
            raise
        self.max_model_len = int(self.engine.model_config.max_model_len)
        self._update_lock = threading.Lock()

    async def _start_engine(self) -> Any:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**with_loader_extension(self.config.to_engine_kwargs())))

    def _run(self, coro: Coroutine[Any, Any, Any], timeout_s: float | None = None) -> Any:
        if not self._loop.is_running():
            coro.close()
            raise RuntimeError("AsyncVLLMSampler is shut down")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _generate_on_loop(self, prompt_ids: list[int], params: SamplingParams, request_id: str) -> SampleResponse:
        """One request; when an update aborts it, the prompt plus the tokens so far is resubmitted under
        the new weights until the request finishes for a reason of its own."""
        parts: list[SampleResponse] = []
        while True:
            await self._serving.wait()
            version, aborts = self._policy_version, self._aborts
            done = sum(len(p.sequences[0].tokens) for p in parts)
            part = await self._request(
                prompt_ids + [t for p in parts for t in p.sequences[0].tokens],
                continuation_params(params, done) if parts else params,
                f"{request_id}-resumed{len(parts)}" if parts else request_id,
                version,
            )
            parts.append(part)
            seq = part.sequences[0]
            if seq.stop_reason != "abort" or self._aborts == aborts:
                break  # finished, or aborted by someone other than an update
            generated = done + len(seq.tokens)
            if len(prompt_ids) + generated >= self.max_model_len or generated == params.max_tokens:
                seq.stop_reason = "length"
                break
        return join_parts(parts)

    async def _request(self, prompt_ids: list[int], params: SamplingParams, request_id: str, version: int) -> SampleResponse:
        """Submit one request and wait for its final output. The request is counted as admitting until
        the engine has it, so an update pauses only once every request it let through is in the engine
        (each then runs wholly on the ``version`` it was stamped with, or is aborted and resumed)."""
        from vllm.sampling_params import RequestOutputKind

        if len(prompt_ids) >= self.max_model_len:
            return context_full_response(prompt_ids)
        vllm_params = params.to_vllm(**self.sampling_overrides, output_kind=RequestOutputKind.FINAL_ONLY)
        self._admitting += 1
        try:
            queue = await self.engine.add_request(request_id, {"prompt_token_ids": prompt_ids}, vllm_params)
        finally:
            self._admitting -= 1
            if not self._admitting:
                self._admitted.set()
        try:
            final = queue.get_nowait() or await queue.get()
            while not final.finished:
                final = queue.get_nowait() or await queue.get()
        except (asyncio.CancelledError, GeneratorExit):
            await self.engine.abort(request_id, internal=True)
            raise
        return to_sample_response(final, version)

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams | None = None, request_id: str | None = None
    ) -> SampleResponse:
        """Sample one prompt; awaitable from any event loop (and as a Ray async actor method)."""
        request_id = request_id or f"{self._prefix}-{next(self._ids)}"
        coro = self._generate_on_loop([int(t) for t in prompt_ids], params or SamplingParams(), request_id)
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        response = await asyncio.wrap_future(future)
        return check_responses([response], 1)[0]

    async def sample_async(self, inputs: list[InputFeature], sampling_params: ParamsArg = None) -> list[SampleResponse]:
        prompts, params, answered = fit_to_context(inputs, sampling_params, self.max_model_len)
        pending = [
            self.generate(ids, p) for i, (ids, p) in enumerate(zip(prompts, params, strict=True)) if i not in answered
        ]
        done = iter(await asyncio.gather(*pending))
        responses = [answered[i] if i in answered else next(done) for i in range(len(prompts))]
        return check_responses(responses, len(prompts))

    def sample(self, inputs: list[InputFeature], sampling_params: ParamsArg = None) -> list[SampleResponse]:
        """The batched contract: all requests in flight at once, results in input order."""
        return self._run(self.sample_async(inputs, sampling_params))

    def _load(self, update: WeightUpdate, version: int, on_update: str) -> UpdateTimings:
        return self._run(self._load_on_loop(update, version, on_update))

    async def _load_on_loop(self, update: WeightUpdate, version: int, on_update: str) -> UpdateTimings:
        """Pause (``wait`` lets the requests in flight finish, ``abort`` stops them for resubmission),
        load, reset the prefix cache, resume; requests arriving meanwhile wait on ``_serving``."""
        watch = Stopwatch()
        self._serving.clear()
        try:
            while self._admitting:
                self._admitted.clear()
                await self._admitted.wait()
            if on_update == ABORT_AND_RESUME:
                self._aborts += 1
            await self.engine.pause_generation(mode="abort" if on_update == ABORT_AND_RESUME else "wait", clear_cache=True)
            drain_s = watch.lap()
            try:
                await self.engine.collective_rpc(START_UPDATE)
                try:
                    for method, args in update.loads:
                        await self.engine.collective_rpc(method, args=args)
                finally:
                    await self.engine.collective_rpc(FINISH_UPDATE)
                load_s = watch.lap()
                if not await self.engine.reset_prefix_cache():
                    raise RuntimeError("vLLM refused to reset the prefix cache after a weight update")
                self._policy_version = version
                reset_s = watch.lap()
            finally:
                await self.engine.resume_generation()
        finally:
            self._serving.set()
        paused = load_s + reset_s + (drain_s if on_update == ABORT_AND_RESUME else 0.0)
        return UpdateTimings(drain_s, load_s, reset_s, paused, update.rpc_calls)

    def _engine_rpc(self, method: str, kwargs: dict[str, Any]) -> Any:
        return self._run(self.engine.collective_rpc(method, kwargs=kwargs))

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    def shutdown(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
            self.engine = None
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


def continuation_params(params: SamplingParams, generated: int) -> SamplingParams:
    """The sampling of a request resumed after ``generated`` tokens: the rest of its token budget
    (``min_tokens`` too), no prompt logprobs (the first part has them)."""
    extra = dict(params.extra)
    if isinstance(extra.get("min_tokens"), int):
        extra["min_tokens"] = max(0, extra["min_tokens"] - generated)
    max_tokens = None if params.max_tokens is None else params.max_tokens - generated
    return params.replace(max_tokens=max_tokens, prompt_logprobs=None, extra=extra)


def join_parts(parts: list[SampleResponse]) -> SampleResponse:
    """One response from a request and its resumptions: tokens, logprobs and text in order, one
    ``policy_versions`` run per part, the last part's stop reason, the first part's prompt."""
    if len(parts) == 1:
        return parts[0]
    seqs = [p.sequences[0] for p in parts]
    logprobs = None if any(s.logprobs is None for s in seqs) else [lp for s in seqs for lp in s.logprobs]
    runs = [run for s in seqs for run in (s.policy_versions or []) if run[1] > 0]
    joined = SampledSequence(
        tokens=[t for s in seqs for t in s.tokens],
        logprobs=logprobs,
        stop_reason=seqs[-1].stop_reason,
        decoded="".join(s.decoded or "" for s in seqs),
        policy_versions=runs,
    )
    return SampleResponse(sequences=[joined], prompt_token_ids=parts[0].prompt_token_ids, prompt_logprobs=parts[0].prompt_logprobs)
