"""``AsyncVLLMSampler``: vLLM's async engine (``AsyncLLM``) for per-request scheduling.

``await generate(prompt_ids, params, request_id)`` submits one request and returns its
``SampleResponse`` as soon as that request finishes, independently of any other: an asynchronous
rollout drives each trajectory on its own, with no turn barrier. ``sample(...)`` keeps the batched
contract on top of it, so the same object also serves ``MultiTurnRollout``.

The engine lives on a private event loop in a daemon thread: ``AsyncLLM`` binds its output handler
to the loop it first runs on, and callers come from anywhere (a sync rollout, another asyncio loop, a
Ray async actor's loop). ``generate`` hops onto that loop and back; cancelling the caller's await
cancels the request, which ``AsyncLLM`` then aborts in the engine.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any

from twinkle_agentic.data_format import InputFeature, SampleResponse, SamplingParams
from twinkle_agentic.remote import remote_class

from .base import DeviceMesh, ParamsArg, check_responses, context_full_response, to_sample_response
from .engine import VLLMEngineConfig, fit_to_context
from .weights import (
    FINISH_UPDATE,
    START_UPDATE,
    ServedWeights,
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
        from vllm.sampling_params import RequestOutputKind

        if len(prompt_ids) >= self.max_model_len:
            return context_full_response(prompt_ids)
        vllm_params = params.to_vllm(**self.sampling_overrides, output_kind=RequestOutputKind.FINAL_ONLY)
        final = None
        async for output in self.engine.generate({"prompt_token_ids": prompt_ids}, vllm_params, request_id):
            final = output
        if final is None:  # pragma: no cover - vLLM always yields the final output
            raise RuntimeError(f"vLLM returned no output for request {request_id}")
        return to_sample_response(final)

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

    def _load(self, update: WeightUpdate) -> None:
        """Generation is paused around the load (``AsyncLLM.pause_generation(mode="wait")``): requests
        already running finish on the old weights, requests that arrive meanwhile wait and then run
        on the new ones."""
        self._run(self._load_on_loop(update))

    async def _load_on_loop(self, update: WeightUpdate) -> None:
        await self.engine.pause_generation(mode="wait", clear_cache=True)
        try:
            await self.engine.collective_rpc(START_UPDATE)
            try:
                for method, args in update.loads:
                    await self.engine.collective_rpc(method, args=args)
            finally:
                await self.engine.collective_rpc(FINISH_UPDATE)
            if not await self.engine.reset_prefix_cache():
                raise RuntimeError("vLLM refused to reset the prefix cache after a weight update")
        finally:
            await self.engine.resume_generation()

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
