"""``OpenAI(async_transport='direct')``: a lean asyncio POST to ``/chat/completions`` on bare
HTTP/1.1 keep-alive connections (``http1``), bypassing the SDK's request and response model layers.

Measured on this project's 2-core CI shape (``docs/bench/api_rollout.md``), the async SDK spends
about 2 ms of CPU per request and an aiohttp POST about 0.3 ms, against a few tens of microseconds
here; at hundreds of requests in flight the client's CPU, not the server, bounds a rollout farm.
Errors map onto the same ``ProtocolError`` classes as the SDK path; retries stay with
``OpenAI.acall``'s ``RetryPolicy``. No proxy support (use the SDK transports behind a proxy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from twinkle_agentic.retry import parse_retry_after

from . import wire_json
from .errors import (
    MalformedResponseError,
    ProtocolConnectionError,
    ProtocolError,
    ProtocolTimeoutError,
    error_for_status,
)
from .http1 import ConnectionPool, HTTPParseError, Origin

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT_S = 600.0
SDK_ONLY_KEYS = frozenset({"extra_body", "extra_headers", "extra_query", "timeout"})
USER_AGENT = "twinkle-agentic-direct/1"


def _timeout_s(value: Any) -> float | None:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if isinstance(value, (int, float)):
        return float(value)
    read = getattr(value, "read", None)  # an httpx Timeout
    return float(read) if read is not None else DEFAULT_TIMEOUT_S


def _error_message(payload: Any, text: str) -> str:
    if isinstance(payload, Mapping):
        inner = payload.get("error") if isinstance(payload.get("error"), Mapping) else payload
        for key in ("message", "detail"):
            if inner.get(key):
                return str(inner[key])
    return text[:2000] or "no error message"


def _head(method: str, target: str, headers: Mapping[str, Any]) -> bytes:
    """Request line and headers up to (not including) ``Content-Length``; None values drop a header."""
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers.items() if value is not None]
    return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")


class DirectChatTransport:
    """The chat-completions endpoint of one ``OpenAI`` client, for one event loop."""

    def __init__(self, api_key: str, base_url: str | None, client_kwargs: Mapping[str, Any]):
        self.url = (base_url or DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"
        origin = Origin(self.url)
        self.target = origin.path
        self.headers: dict[str, Any] = {"Host": origin.host_header, "Authorization": f"Bearer {api_key}",
                                        "Content-Type": "application/json", "Accept": "application/json",
                                        "User-Agent": USER_AGENT}
        self.headers.update(client_kwargs.get("default_headers") or {})
        self.timeout_s = _timeout_s(client_kwargs.get("timeout"))
        self._head = _head("POST", self.target, self.headers)
        self._pool = ConnectionPool(origin)

    def _request_head(self, body: Mapping[str, Any]) -> bytes:
        extra_headers, extra_query = body.get("extra_headers"), body.get("extra_query")
        if not extra_headers and not extra_query:
            return self._head
        target = f"{self.target}?{urlencode(extra_query, doseq=True)}" if extra_query else self.target
        return _head("POST", target, {**self.headers, **(extra_headers or {})})

    async def create(self, body: Mapping[str, Any], attempt: int) -> dict[str, Any]:
        """POST ``body`` (SDK-only keys applied: ``extra_body`` merged, ``extra_headers``,
        ``extra_query``, ``timeout``); the completion as a dict, or a ``ProtocolError``."""
        if SDK_ONLY_KEYS.isdisjoint(body):
            payload, head, timeout_s = body, self._head, self.timeout_s
        else:
            payload = {k: v for k, v in body.items() if k not in SDK_ONLY_KEYS}
            payload.update(body.get("extra_body") or {})
            head = self._request_head(body)
            timeout_s = _timeout_s(body["timeout"]) if body.get("timeout") else self.timeout_s
        data = wire_json.dumps(payload)
        try:
            response = await self._pool.request(head + b"%d\r\n\r\n" % len(data), data, timeout_s)
        except TimeoutError as exc:
            raise ProtocolTimeoutError(f"no answer within {timeout_s:g}s", attempts=attempt, url=self.url) from exc
        except (OSError, HTTPParseError) as exc:  # refused, reset, closed early, TLS failure, garbage
            raise ProtocolConnectionError(f"{type(exc).__name__}: {exc}", attempts=attempt, url=self.url) from exc
        status = response.status
        try:
            data = wire_json.loads(response.body) if response.body else None
        except ValueError:
            data = None
        if status >= 400:
            text = response.body.decode("utf-8", "replace")
            raise error_for_status(status)(_error_message(data, text), status, attempts=attempt, url=self.url,
                                           retry_after_s=parse_retry_after(response.headers))
        if not isinstance(data, dict):
            raise MalformedResponseError(f"HTTP {status} body is not a JSON object: {response.body[:300]!r}",
                                         status, attempts=attempt, url=self.url)
        return data

    async def close(self) -> None:
        self._pool.close()


__all__ = ["DirectChatTransport", "ProtocolError"]
