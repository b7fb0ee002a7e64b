"""A scripted OpenAI-compatible chat server, for testing agents, tools and environments without a
model, over real HTTP (``python -m twinkle_agentic.protocol.scripted_server --port 8000``).

The reply is a pure function of the request (plus per-conversation failure counters), steered by
``#directives`` in the first user message:

==================  ====================================================================
``#calls=N``        answer with N tool-calling turns, then a final text (default 1 when tools are
                    offered, else 0)
``#tool=NAME``      which offered tool to call (default: the first)
``#args=JSON``      the call's arguments (default: built from the tool's parameter schema)
``#noid``           tool calls without ids          ``#badjson``  arguments that are not JSON
``#reasoning``      add ``reasoning_content``        ``#length``   ``finish_reason='length'``
``#fail=CODE:K``    the first K requests of this conversation answer HTTP CODE
``#hang=S``         sleep S seconds before answering
==================  ====================================================================

The final answer quotes the last tool result, so tests can see tool output reach the model. With
``strict`` (default) a message carrying fields the chat API does not accept is refused with 400,
as strict servers do; ``GET /debug/requests`` returns the recorded request bodies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any

from .local_server import LocalServer

ALLOWED_MESSAGE_FIELDS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id"},
}
DIRECTIVE = re.compile(r"#(\w+)(?:=(\{.*?\}(?=\s|$)|\S+))?")
RECORDED_REQUESTS = 2000


def parse_directives(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) or "" for m in DIRECTIVE.finditer(text or "")}


def _schema_arguments(tool: dict[str, Any], turn: int) -> dict[str, Any]:
    properties = ((tool.get("function") or {}).get("parameters") or {}).get("properties") or {}
    args: dict[str, Any] = {}
    for name, schema in properties.items():
        kind = (schema or {}).get("type")
        if kind in ("integer", "number"):
            args[name] = turn
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = [turn]
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = f"{name} {turn}"
    return args


class ScriptError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class ScriptedChat:
    """The policy and bookkeeping, independent of the HTTP layer."""

    def __init__(self, model: str = "scripted", strict: bool = True):
        self.model = model
        self.strict = strict
        self.requests: deque[dict[str, Any]] = deque(maxlen=RECORDED_REQUESTS)
        self.failures: Counter[str] = Counter()
        self.served = 0

    def validate(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ScriptError(400, "messages must be a non-empty list")
        for index, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ALLOWED_MESSAGE_FIELDS:
                raise ScriptError(400, f"messages[{index}].role {role!r} is not supported")
            extra = set(message) - ALLOWED_MESSAGE_FIELDS[role]
            if self.strict and extra:
                raise ScriptError(400, f"messages[{index}] has unsupported fields {sorted(extra)}")
            if role == "assistant":
                for call in message.get("tool_calls") or []:
                    arguments = (call.get("function") or {}).get("arguments")
                    if not isinstance(arguments, str) or not call.get("id"):
                        raise ScriptError(400, f"messages[{index}].tool_calls need ids and JSON-string arguments")
        return messages

    def respond(self, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """(completion, seconds to hang first); raises ScriptError for scripted failures."""
        self.requests.append(body)
        messages = self.validate(body)
        first_user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        first_user = first_user if isinstance(first_user, str) else json.dumps(first_user)
        directives = parse_directives(first_user)
        if "fail" in directives:
            code, _, count = directives["fail"].partition(":")
            if self.failures[first_user] < int(count or 1):
                self.failures[first_user] += 1
                headers = {"retry-after-ms": "5"} if int(code) in (429, 500, 502, 503) else {}
                raise ScriptError(int(code), f"scripted failure {self.failures[first_user]}", headers)
        choices = [self._choice(i, messages, body, directives) for i in range(int(body.get("n") or 1))]
        self.served += 1
        completion = {
            "id": f"chatcmpl-{self.served}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model") or self.model,
            "choices": choices,
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        return completion, float(directives.get("hang") or 0)

    def _choice(self, index: int, messages: list[dict[str, Any]], body: dict[str, Any], directives: dict[str, str]) -> dict[str, Any]:
        turn = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        tools = body.get("tools") or []
        calls_wanted = int(directives.get("calls") or (1 if tools else 0))
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish = "stop"
        if "reasoning" in directives:
            message["reasoning_content"] = f"thinking about turn {turn}"
        if "length" in directives:
            message["content"] = "this answer was cut"
            finish = "length"
        elif tools and turn <= calls_wanted:
            tool = next((t for t in tools if (t.get("function") or {}).get("name") == directives.get("tool")), tools[0])
            name = (tool.get("function") or {}).get("name")
            if "args" in directives:
                arguments = directives["args"]
            elif "badjson" in directives:
                arguments = "{not json"
            else:
                arguments = json.dumps(_schema_arguments(tool, turn))
            call = {"type": "function", "function": {"name": name, "arguments": arguments}}
            if "noid" not in directives:
                call["id"] = f"call_srv_{turn}_{index}"
            message["tool_calls"] = [call]
            finish = "tool_calls"
        else:
            last_tool = next((m.get("content") for m in reversed(messages) if m.get("role") == "tool"), None)
            message["content"] = f"final answer after {turn - 1} tool turns; last tool said: {last_tool}"
        choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": finish}
        if body.get("logprobs"):
            tokens = (message["content"] or "").split() or [""]
            choice["logprobs"] = {"content": [{"token": t, "logprob": -0.1 * (k + 1), "bytes": None, "top_logprobs": []}
                                              for k, t in enumerate(tokens)]}
        return choice


class ScriptedChatApp:
    """Plain ASGI (no framework) so the server costs as little CPU as possible in benchmarks."""

    def __init__(self, latency_s: float = 0.0, strict: bool = True, model: str = "scripted"):
        self.latency_s = latency_s
        self.chat = ScriptedChat(model=model, strict=strict)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                kind = event["type"].rsplit(".", 1)[-1]
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            event = await receive()
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                break
        path, method = scope["path"], scope["method"]
        if path in ("/health", "/v1/health"):
            await _reply(send, 200, {"status": "ok"})
        elif path == "/v1/models":
            await _reply(send, 200, {"object": "list", "data": [{"id": self.chat.model, "object": "model"}]})
        elif path == "/debug/requests":
            if method == "DELETE":
                self.chat.requests.clear()
            await _reply(send, 200, {"requests": list(self.chat.requests), "served": self.chat.served})
        elif path == "/v1/chat/completions" and method == "POST":
            await self._complete(b"".join(chunks), send)
        else:
            await _reply(send, 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}})

    async def _complete(self, raw: bytes, send: Any) -> None:
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ScriptError(400, "request body must be a JSON object")
            completion, hang_s = self.chat.respond(body)
        except ScriptError as exc:
            await _reply(send, exc.status, {"error": {"message": exc.message, "type": "scripted", "code": exc.status}},
                         exc.headers)
            return
        except ValueError as exc:
            await _reply(send, 400, {"error": {"message": f"invalid JSON: {exc}", "type": "invalid_request"}})
            return
        if self.latency_s or hang_s:
            await asyncio.sleep(self.latency_s + hang_s)
        await _reply(send, 200, completion)


async def _reply(send: Any, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(payload).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay added to every completion")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--lenient", action="store_true", help="accept unknown message fields")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import uvicorn

    app = ScriptedChatApp(latency_s=args.latency_ms / 1000.0, strict=not args.lenient, model=args.model)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False, backlog=4096,
                timeout_keep_alive=30)
    return 0


def start_scripted_server(port: int, latency_ms: float = 0.0, *, lenient: bool = False, **kwargs: Any) -> LocalServer:
    """Start the scripted server as a child process and wait until it answers."""
    argv = [sys.executable, "-m", "twinkle_agentic.protocol.scripted_server", "--port", str(port),
            "--latency-ms", str(latency_ms)] + (["--lenient"] if lenient else [])
    return LocalServer(argv, port, **kwargs).start()


if __name__ == "__main__":
    sys.exit(main())
