"""The client side of the OpenEnv WebSocket wire format (SPEC 16.1): two transports speaking it.

The format itself (frame types, error codes, the reward rule) is declared once, for server and
client, in :mod:`.openenv_types`. ``parse_observation_frame`` reads a server ``observation`` frame of
openenv-core 0.3 or openenv 0.10 into one shape (metadata normalised, text rendered, a reward that
is not a finite number read as None, as the server sends it), so the adapter behaves the same
against either server. ``WireClient`` is the project's own blocking client (``websockets``
sync API: no event loop, no openenv import); ``OpenEnvClientTransport`` drives an openenv
``EnvClient`` subclass through its ``.sync()`` wrapper and turns its errors back into codes.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .openenv_types import RETRYABLE_CODES, SOCKET_CLOSING_CODES, ClientErrorCode, FrameType, wire_reward

TEXT_KEYS = ("result", "output", "content", "text", "message", "echoed_message")
RUNTIME_ERROR_PATTERN = re.compile(r"Server error: (?P<message>.*) \(code: (?P<code>[A-Z_]+)\)\s*$", re.S)


class WireError(Exception):
    """A failed exchange: ``code`` (wire or transport code) and ``message`` as fields."""

    def __init__(self, code: str, message: str, data: Mapping[str, Any] | None = None):
        super().__init__(f"{message} (code: {code})")
        self.code = str(code)  # a plain string in info['error_code'], whichever enum named it
        self.message = message
        self.data = dict(data or {})

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE_CODES


@dataclass
class ParsedObservation:
    text: str
    reward: float | None  # None: the server gave no finite reward (see ``wire_reward``)
    done: bool
    metadata: dict[str, Any]
    raw: dict[str, Any]


def _content_text(items: list[Any]) -> str:
    parts = []
    for item in items:
        if isinstance(item, Mapping):
            if item.get("text") is not None:
                parts.append(str(item["text"]))
        elif isinstance(item, str):
            parts.append(item)
    return "\n".join(parts)


def render_text(value: Any) -> str:
    """Observation text: a str as is; a dict by its first present text key (recursively; MCP
    content lists joined, ``data`` unwrapped); an ``error`` without result as ``Error: ...``; else
    compact JSON."""
    if isinstance(value, str):
        return value
    if (isinstance(value, list) and all(isinstance(v, (str, Mapping)) for v in value)
            and any(isinstance(v, str) or "text" in v for v in value)):
        return _content_text(value)  # MCP content parts: the text ones, joined
    if isinstance(value, Mapping):
        for key in TEXT_KEYS:
            if value.get(key) is not None:
                return render_text(value[key])
        if value.get("data") is not None:
            return render_text(value["data"])
        error = value.get("error")
        if error:
            message = error.get("message", error) if isinstance(error, Mapping) else error
            return f"Error: {message if isinstance(message, str) else json.dumps(message, ensure_ascii=False)}"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def parse_observation_frame(data: Mapping[str, Any]) -> ParsedObservation:
    """``data`` of an ``observation`` frame -> text, reward, done, metadata (both wire versions)."""
    if not isinstance(data, Mapping):
        raise WireError(ClientErrorCode.PROTOCOL_ERROR, f"observation frame data is {type(data).__name__}, expected an object")
    observation = data.get("observation")
    observation = dict(observation) if isinstance(observation, Mapping) else observation
    nested = observation.pop("metadata", None) if isinstance(observation, dict) else None
    metadata = data.get("metadata") or nested or {}
    return ParsedObservation(
        text=render_text(observation if observation is not None else ""),
        reward=wire_reward(data.get("reward")),
        done=bool(data.get("done", False)),
        metadata=dict(metadata) if isinstance(metadata, Mapping) else {"value": metadata},
        raw=dict(data),
    )


def ws_url(base_url: str) -> str:
    """``http`` -> ``ws``, ``https`` -> ``wss``; ``/ws`` appended when missing."""
    url = base_url.strip().rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(http):
            url = ws + url[len(http):]
    if not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    if not url.split("?")[0].endswith("/ws"):
        path, _, query = url.partition("?")
        url = path + "/ws" + (f"?{query}" if query else "")
    return url


class WireClient:
    """One WebSocket session, blocking: ``request(frame) -> data`` of the server's reply frame."""

    def __init__(self, base_url: str, *, connect_timeout_s: float = 10.0, message_timeout_s: float = 60.0,
                 max_message_size_mb: float = 100.0, headers: Mapping[str, str] | None = None):
        self.url = ws_url(base_url)
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = message_timeout_s
        self.max_size = int(max_message_size_mb * 1024 * 1024)
        self.headers = dict(headers or {})
        self._ws: Any = None
        self._replies = 0  # replies read on the current socket

    @property
    def connected(self) -> bool:
        return self._ws is not None

    def connect(self) -> None:
        from websockets.exceptions import InvalidHandshake, InvalidURI
        from websockets.sync.client import connect

        self._replies = 0
        try:
            # entered as a context manager (websockets >= 17 deprecates bare connect(); older
            # versions return the same object); closing the connection is its __exit__
            self._ws = connect(self.url, open_timeout=self.connect_timeout_s, max_size=self.max_size,
                               additional_headers=self.headers or None, compression=None).__enter__()
        except InvalidURI as exc:
            raise WireError(ClientErrorCode.PROTOCOL_ERROR, f"invalid OpenEnv URL {self.url!r}: {exc}") from exc
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise WireError(ClientErrorCode.CONNECTION_FAILED, f"cannot connect to {self.url}: {type(exc).__name__}: {exc}") from exc

    def request(self, frame: Mapping[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        if self._ws is None:
            raise WireError(ClientErrorCode.CONNECTION_LOST, "not connected")
        fresh = self._replies == 0
        try:
            # the server may have answered and closed before our first frame (CAPACITY_REACHED is
            # sent on accept): a frame already received is still readable after a failed send
            with contextlib.suppress(ConnectionClosed):
                self._ws.send(json.dumps(frame, ensure_ascii=False))
            raw = self._ws.recv(timeout=self.message_timeout_s)
        except TimeoutError as exc:
            self.drop()  # a late reply would be read as the answer to the next frame
            raise WireError(ClientErrorCode.TIMEOUT, f"no reply from {self.url} within {self.message_timeout_s:g}s") from exc
        except (ConnectionClosed, OSError) as exc:
            self.drop()
            # closed before any reply on a new session: the server refused it, nothing was lost
            code = ClientErrorCode.CONNECTION_FAILED if fresh else ClientErrorCode.CONNECTION_LOST
            raise WireError(code, f"connection to {self.url} closed: {exc}") from exc
        self._replies += 1
        try:
            reply = json.loads(raw)
        except ValueError as exc:
            raise WireError(ClientErrorCode.PROTOCOL_ERROR, f"reply is not JSON: {raw[:200]!r}") from exc
        return check_reply(reply, self)

    def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is None:
            return
        with contextlib.suppress(Exception):  # the peer may already be gone; closing is best effort
            ws.send(json.dumps({"type": FrameType.CLOSE}))
        with contextlib.suppress(Exception):
            ws.close()

    def drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()


def check_reply(reply: Any, transport: Any) -> dict[str, Any]:
    """The ``data`` of a non-error frame; error frames raise ``WireError`` (dropping closed sockets)."""
    if not isinstance(reply, Mapping) or "type" not in reply:
        raise WireError(ClientErrorCode.PROTOCOL_ERROR, f"reply is not a frame: {str(reply)[:200]}")
    data = reply.get("data") or {}
    if reply["type"] == FrameType.ERROR:
        code = str(data.get("code") or "UNKNOWN")
        if code in SOCKET_CLOSING_CODES:
            transport.drop()
        message = str(data.get("message") or "server error")
        if data.get("errors"):
            message += ": " + json.dumps(data["errors"], ensure_ascii=False, default=str)[:1000]
        raise WireError(code, message, data)
    return dict(data)


class OpenEnvClientTransport:
    """An openenv ``EnvClient`` subclass (typed or generic) behind the ``WireClient`` interface."""

    def __init__(self, env_cls: type, base_url: str, client_kwargs: Mapping[str, Any]):
        self.env_cls = env_cls
        self.base_url = base_url
        self.client_kwargs = dict(client_kwargs)
        self._client: Any = None

    @property
    def connected(self) -> bool:
        return self._client is not None

    def connect(self) -> None:
        client = self.env_cls(base_url=self.base_url, **self.client_kwargs).sync()
        try:
            client.connect()
        except Exception as exc:
            with_close(client)
            raise WireError(ClientErrorCode.CONNECTION_FAILED, f"{type(exc).__name__}: {exc}") from exc
        self._client = client

    def request(self, frame: Mapping[str, Any]) -> dict[str, Any]:
        if self._client is None:
            raise WireError(ClientErrorCode.CONNECTION_LOST, "not connected")
        try:
            if frame["type"] == FrameType.RESET:
                result = self._client.reset(**frame.get("data", {}))
            elif frame["type"] == FrameType.STEP:
                result = self._client.step(frame["data"])
            else:
                raise WireError(ClientErrorCode.PROTOCOL_ERROR, f"frame type {frame['type']!r} is not supported through env_cls")
        except WireError:
            raise
        except Exception as exc:
            raise self._error(exc) from exc
        observation = result.observation
        if hasattr(observation, "model_dump"):
            observation = observation.model_dump()
        return {"observation": observation, "reward": result.reward, "done": result.done}

    def _error(self, exc: Exception) -> WireError:
        match = RUNTIME_ERROR_PATTERN.match(str(exc)) if isinstance(exc, RuntimeError) else None
        if match:
            error = WireError(match["code"], match["message"])
            if error.code in SOCKET_CLOSING_CODES:
                self.drop()
            return error
        self.drop()
        if isinstance(exc, TimeoutError):
            return WireError(ClientErrorCode.TIMEOUT, f"no reply within the client's message timeout ({exc})")
        if isinstance(exc, ConnectionError):
            return WireError(ClientErrorCode.CONNECTION_FAILED, str(exc))
        return WireError(ClientErrorCode.CONNECTION_LOST, f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with_close(client)

    drop = close


def with_close(client: Any) -> None:
    with contextlib.suppress(Exception):  # closing a half-open client must never mask the real outcome
        client.close()
