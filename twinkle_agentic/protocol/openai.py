"""``OpenAI``: any ``/v1/chat/completions`` endpoint (OpenAI, vLLM, SGLang, Ollama...) as an ``API``.

The SDK does the HTTP; this class adds request sanitising (``openai_payload``), one retry layer
(``RetryPolicy``: the SDK's own retries are switched off so attempts are not multiplied) and
structured errors (``errors``). ``__call__`` blocks; ``acall`` is the asyncio form used by
``APIMultiTurnRollout`` (one ``AsyncOpenAI`` client per event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from twinkle_agentic.data_format import Message, SamplingParams, Trajectory
from twinkle_agentic.retry import RetryPolicy, parse_retry_after

from .base import API
from .errors import (
    MalformedResponseError,
    ProtocolConnectionError,
    ProtocolError,
    ProtocolTimeoutError,
    error_for_status,
)
from .openai_payload import from_completion, to_request

NO_KEY_PLACEHOLDER = "EMPTY"  # what local OpenAI-compatible servers accept when auth is off
ASYNC_TRANSPORTS = ("auto", "aiohttp", "httpx", "direct")


def _aiohttp_available() -> bool:
    try:
        import aiohttp  # noqa: F401
        from openai._vendor.httpx_aiohttp import Httpx2AiohttpClient  # noqa: F401
    except ImportError:
        return False
    return True


class _LoopClient:
    """The async client of one event loop (SDK or direct transport), and how many sessions use it."""

    __slots__ = ("client", "sessions")

    def __init__(self, client: Any):
        self.client = client
        self.sessions = 0


class OpenAI(API):
    """Chat-completions client.

    ``api_key`` defaults to ``OPENAI_API_KEY``; with a ``base_url`` and no key it is ``'EMPTY'``.
    ``client_kwargs`` go to ``openai.OpenAI``/``AsyncOpenAI`` (``timeout``, ``default_headers``,
    ``http_client``...); a ``max_retries`` there sets ``retry.attempts = max_retries + 1``.
    ``send_reasoning_content`` keeps ``reasoning_content`` in replayed assistant messages.
    ``async_transport`` picks the HTTP stack of ``acall``: ``aiohttp`` (the SDK's
    ``DefaultAioHttpClient``; about half the CPU per request of httpx under high concurrency),
    ``httpx``, ``auto`` (aiohttp when installed), or ``direct`` (``direct_transport``: aiohttp
    without the SDK's model layers, ~6x less client CPU per request, for rollout farms; honours
    ``timeout`` and ``default_headers`` of ``client_kwargs``). ``client_kwargs['http_client']``
    applies to the blocking client only. Picklable (clients are rebuilt lazily), so it travels into Ray actors.
    """

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        client_kwargs: Mapping[str, Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        send_reasoning_content: bool = False,
        async_transport: str = "auto",
    ):
        if async_transport not in ASYNC_TRANSPORTS:
            raise ValueError(f"async_transport must be one of {ASYNC_TRANSPORTS}, got {async_transport!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"OpenAI(model=...) must be a non-empty model name, got {model!r}")
        self.model = model
        self.base_url = base_url
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or (NO_KEY_PLACEHOLDER if base_url else None)
        if self.api_key is None:
            raise ValueError("OpenAI needs an API key: pass api_key=, set OPENAI_API_KEY, or give a base_url "
                             "of a server without auth (the key is then 'EMPTY')")
        self.client_kwargs = dict(client_kwargs or {})
        max_retries = self.client_kwargs.pop("max_retries", None)
        if retry is None:
            retry = RetryPolicy() if max_retries is None else RetryPolicy(attempts=int(max_retries) + 1)
        self.retry = retry
        self.send_reasoning_content = send_reasoning_content
        self.async_transport = async_transport
        self._warned: set[str] = set()
        self._init_clients()

    def _init_clients(self) -> None:
        self._client: Any = None
        self._async_clients: weakref.WeakKeyDictionary[Any, _LoopClient] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_client", "_async_clients", "_lock"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_clients()

    def __repr__(self) -> str:
        return f"OpenAI(model={self.model!r}, base_url={self.base_url!r})"

    # -- clients ---------------------------------------------------------------------------------------

    def _sdk_kwargs(self) -> dict[str, Any]:
        return {"api_key": self.api_key, "base_url": self.base_url, **self.client_kwargs, "max_retries": 0}

    @property
    def client(self) -> Any:
        """The blocking ``openai.OpenAI`` client (built on first use)."""
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(**self._sdk_kwargs())
            return self._client

    def _new_async_client(self) -> Any:
        transport = self.async_transport
        if transport == "direct":
            from .direct_transport import DirectChatTransport

            return DirectChatTransport(self.api_key, self.base_url, self.client_kwargs)
        import openai

        kwargs = {k: v for k, v in self._sdk_kwargs().items() if k != "http_client"}
        if transport == "auto":
            transport = "aiohttp" if _aiohttp_available() else "httpx"
        if transport == "aiohttp":
            kwargs["http_client"] = openai.DefaultAioHttpClient(timeout=kwargs.get("timeout", openai.DEFAULT_TIMEOUT))
        return openai.AsyncOpenAI(**kwargs)

    def async_client(self) -> Any:
        """The ``openai.AsyncOpenAI`` client of the running event loop (its connections belong to it).

        Prefer ``async with api.session():`` around a batch of ``acall``s: the client is then
        closed on the loop that owns it when the last session ends.
        """
        loop = asyncio.get_running_loop()
        entry = self._async_clients.get(loop)  # a lock-free look first: this runs once per request
        if entry is not None:
            return entry.client
        with self._lock:
            entry = self._async_clients.get(loop)
            if entry is None:
                entry = self._async_clients[loop] = _LoopClient(self._new_async_client())
            return entry.client

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[OpenAI]:
        """Scope the running loop's client: it is closed when the last open session exits."""
        loop = asyncio.get_running_loop()
        self.async_client()
        with self._lock:
            entry = self._async_clients[loop]
            entry.sessions += 1
        try:
            yield self
        finally:
            with self._lock:
                entry.sessions -= 1
                closing = entry.sessions == 0 and self._async_clients.get(loop) is entry
                if closing:
                    del self._async_clients[loop]
            if closing:
                await entry.client.close()

    # -- requests --------------------------------------------------------------------------------------

    def build_request(self, trajectory: Trajectory, sampling_params: SamplingParams | None, **kwargs: Any) -> dict[str, Any]:
        """The request body; ``kwargs`` (``extra_body``, ``tool_choice``, ``tools``...) are merged last."""
        tools = kwargs.pop("tools", None)
        body = to_request(trajectory, sampling_params, model=self.model, tools=tools,
                          send_reasoning_content=self.send_reasoning_content, warned=self._warned)
        for key, value in kwargs.items():
            if value is not None:
                body[key] = value
        return body

    def __call__(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None = None, **kwargs: Any
    ) -> Message | list[Message]:
        body = self.build_request(trajectory, sampling_params, **kwargs)
        for attempt in range(1, self.retry.attempts + 1):
            try:
                completion = self.client.chat.completions.create(**body)
            except Exception as exc:
                error = self._classify(exc, attempt)
                if not self._should_retry(error, attempt):
                    raise error from exc
                time.sleep(self.retry.delay_s(attempt - 1, error.retry_after_s))
                continue
            return self._messages(completion, body)
        raise AssertionError("unreachable")

    async def acall(
        self, trajectory: Trajectory, sampling_params: SamplingParams | None = None, **kwargs: Any
    ) -> Message | list[Message]:
        return await self._acall(self.async_client(), trajectory, sampling_params, **kwargs)

    def bound_acall(self) -> Callable[..., Awaitable[Message | list[Message]]]:
        """``acall`` tied to the running event loop's client, for many calls on one loop (a rollout
        batch, inside ``session()``): each call skips looking up the running loop (a ``getpid``
        system call in CPython 3.11) and its client."""
        return functools.partial(self._acall, self.async_client())

    async def _acall(
        self, client: Any, trajectory: Trajectory, sampling_params: SamplingParams | None = None, **kwargs: Any
    ) -> Message | list[Message]:
        body = self.build_request(trajectory, sampling_params, **kwargs)
        for attempt in range(1, self.retry.attempts + 1):
            try:
                if self.async_transport == "direct":
                    completion = await client.create(body, attempt)
                else:
                    completion = await client.chat.completions.create(**body)
            except Exception as exc:
                error = self._classify(exc, attempt)
                if not self._should_retry(error, attempt):
                    raise error from exc
                await asyncio.sleep(self.retry.delay_s(attempt - 1, error.retry_after_s))
                continue
            return self._messages(completion, body)
        raise AssertionError("unreachable")

    # -- outcomes --------------------------------------------------------------------------------------

    def _should_retry(self, error: ProtocolError, attempt: int) -> bool:
        return error.retryable and attempt < self.retry.attempts

    def _messages(self, completion: Any, body: dict[str, Any]) -> Message | list[Message]:
        try:
            messages = from_completion(completion)
        except (ValueError, TypeError, KeyError) as exc:
            raise MalformedResponseError(str(exc), url=self.base_url) from exc
        if body.get("n", 1) > 1:
            return messages
        return messages[0]

    def _classify(self, exc: Exception, attempt: int) -> ProtocolError:
        """Map SDK/transport exceptions onto the ``ProtocolError`` hierarchy."""
        if isinstance(exc, ProtocolError):
            return exc
        import openai

        url = self.base_url
        if isinstance(exc, openai.APITimeoutError):
            return ProtocolTimeoutError(str(exc) or "request timed out", attempts=attempt, url=url)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f"{exc} ({type(cause).__name__}: {cause})" if cause else str(exc)
            return ProtocolConnectionError(detail, attempts=attempt, url=url)
        if isinstance(exc, openai.APIStatusError):
            code = exc.status_code
            retry_after_s = parse_retry_after(getattr(exc.response, "headers", None))
            return error_for_status(code)(_server_message(exc), code, attempts=attempt, url=url,
                                          retry_after_s=retry_after_s)
        if isinstance(exc, openai.APIResponseValidationError):
            return MalformedResponseError(str(exc), getattr(exc, "status_code", None), attempts=attempt, url=url)
        raise exc


def _server_message(exc: Any) -> str:
    """The server's own words: OpenAI's ``{error:{message}}``, FastAPI's ``{detail}``, else text."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error") if isinstance(body.get("error"), Mapping) else body
        for key in ("message", "detail"):
            if inner.get(key):
                return str(inner[key])
    response = getattr(exc, "response", None)
    text = getattr(response, "text", None)
    return (text or str(exc))[:2000]
