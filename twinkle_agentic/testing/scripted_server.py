"""A scripted OpenAI-compatible server, for testing agents, tools, environments and scorers without
a model, over real HTTP: test and benchmark support, not used at run time.

Run it as a child process (:func:`start_scripted_server`, or ``python -m
twinkle_agentic.testing.scripted_server --port 8000``), or in a thread of this process
(:class:`ScriptedServer`), where Python callables can script its answers.

A chat reply is a pure function of the request (plus per-conversation failure counters), steered by
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
as strict servers do; ``GET /debug/requests`` returns the recorded request bodies, ``GET
/debug/timing`` how long delayed answers were held since the last look.

vLLM's own routes answer too, with tokens that are UTF-8 bytes: ``/tokenize`` (a chat is rendered
as ChatML first), ``/detokenize``, ``/v1/completions`` with ``prompt_logprobs`` and
``/v1/embeddings``. The hooks ``chat`` (texts for a chat request, instead of the directives),
``logprob`` and ``embed`` script them, and a path in ``fail_paths`` answers 500.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from twinkle_agentic.protocol import event_loops, wire_json
from twinkle_agentic.protocol.http1 import HTTPParseError, Message, MessageReader, response_head

from .local_server import LocalServer
from .scripted_chat import (
    MAX_MODEL_LEN,
    RECORDED_REQUESTS,
    ScriptedChat,
    ScriptError,
    byte_tokens,
    default_embed,
    default_logprob,
    render_chatml,
)

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           408: "Request Timeout", 422: "Unprocessable Entity", 429: "Too Many Requests",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}
JSON_HEADERS = {"Content-Type": "application/json"}


class ScriptedChatServer:
    """The routes over bare asyncio HTTP/1.1 (``http1``): the server shares the benchmark
    machine's cores with the client under test, so it should cost as little CPU per request as
    possible. ``latency_s`` delays every completion (a timer, not a task per request)."""

    def __init__(self, latency_s: float = 0.0, strict: bool = True, model: str = "scripted"):
        self.latency_s = latency_s
        self.script = ScriptedChat(model=model, strict=strict)
        self.held_s: deque[float] = deque(maxlen=100_000)  # arrival to answer, of delayed answers
        # hooks: chat texts for a request (None: the #directives answer), prompt logprobs, embeddings
        self.chat: Callable[[dict[str, Any]], list[str]] | None = None
        self.logprob: Callable[[list[int], int], float] = default_logprob
        self.embed: Callable[[str], list[float]] = default_embed
        self.fail_paths: set[str] = set()
        self.posted: deque[tuple[str, bytes]] = deque(maxlen=RECORDED_REQUESTS)  # (path, raw body)
        self.vllm_routes: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "/tokenize": self._tokenize,
            "/detokenize": lambda body: {"prompt": bytes(body["tokens"]).decode("utf-8", "replace")},
            "/v1/completions": self._completions,
            "/v1/embeddings": self._embeddings,
        }

    @property
    def requests(self) -> list[tuple[str, Any]]:
        """(path, parsed body) of every POST recorded, oldest first."""
        return [(path, wire_json.loads(raw) if raw else {}) for path, raw in self.posted]

    def paths(self) -> list[str]:
        return [path for path, _ in self.posted]

    def timing(self) -> dict[str, Any]:
        """How long delayed answers were held (ms): the injected latency as served, and how many
        came before it was up (``early``); the record is cleared."""
        held = sorted(self.held_s)
        self.held_s.clear()
        if not held:
            return {"answers": 0}

        def ms(q: float) -> float:
            return round(1000 * held[min(len(held) - 1, int(q * len(held)))], 3)

        return {"answers": len(held), "min_ms": ms(0), "p50_ms": ms(0.5), "p90_ms": ms(0.9), "p99_ms": ms(0.99),
                "max_ms": ms(1), "early": sum(1 for h in held if h < self.latency_s)}

    def handle(self, request: Message) -> tuple[int, Any, dict[str, str], float]:
        """(status, JSON payload, extra headers, seconds to wait before answering)."""
        method, path = request.start[0], request.start[1].split("?", 1)[0]
        if method == "POST":
            self.posted.append((path, request.body))
            if path in self.fail_paths:
                return 500, {"error": {"message": "scripted failure", "code": 500}}, {}, 0.0
        if path in ("/health", "/v1/health"):
            return 200, {"status": "ok"}, {}, 0.0
        if path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": self.script.model, "object": "model"}]}, {}, 0.0
        if path == "/debug/timing":
            return 200, self.timing(), {}, 0.0
        if path == "/debug/requests":
            if method == "DELETE":
                self.script.requests.clear()
            return 200, {"requests": self.script.recorded(), "served": self.script.served}, {}, 0.0
        if path == "/v1/chat/completions" and method == "POST":
            return self._complete(request.body)
        route = self.vllm_routes.get(path) if method == "POST" else None
        if route is not None:
            return self._hooked(route, request.body)
        return 404, {"error": {"message": f"no route {method} {path}", "type": "not_found"}}, {}, 0.0

    def _complete(self, raw: bytes) -> tuple[int, Any, dict[str, str], float]:
        try:
            body = wire_json.loads(raw)
            if not isinstance(body, dict):
                raise ScriptError(400, "request body must be a JSON object")
            if self.chat is not None:
                self.script.validate(body)
                return self._hooked(self._chat_texts, raw)
            completion, hang_s = self.script.respond(body, raw)
        except ScriptError as exc:
            return exc.status, {"error": {"message": exc.message, "type": "scripted", "code": exc.status}}, exc.headers, 0.0
        except ValueError as exc:
            return 400, {"error": {"message": f"invalid JSON: {exc}", "type": "invalid_request"}}, {}, 0.0
        return 200, completion, {}, self.latency_s + hang_s

    def _hooked(self, route: Callable[[dict[str, Any]], dict[str, Any]], raw: bytes) -> tuple[int, Any, dict[str, str], float]:
        """A route answered through the hooks; whatever it raises is a 400, as vLLM's validation errors are."""
        try:
            return 200, route(wire_json.loads(raw or b"{}")), {}, self.latency_s
        except Exception as exc:
            return 400, {"error": {"message": str(exc), "type": "scripted", "code": 400}}, {}, 0.0

    def _chat_texts(self, body: dict[str, Any]) -> dict[str, Any]:
        choices = [{"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                   for i, text in enumerate(self.chat(body))]
        self.script.served += 1
        return {"id": f"chatcmpl-{self.script.served}", "object": "chat.completion", "created": 0,
                "model": body.get("model") or self.script.model, "choices": choices,
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        if "messages" in body:
            text = render_chatml(body["messages"], body.get("add_generation_prompt", True))
        else:
            text = body["prompt"]
        tokens = byte_tokens(text)
        return {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens}

    def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        """Prompt logprobs of token-id prompts from the ``logprob`` hook, in vLLM's shape."""
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        choices = []
        for index, ids in enumerate(prompts):
            if len(ids) > MAX_MODEL_LEN:
                raise ValueError(f"prompt of {len(ids)} tokens exceeds max_model_len {MAX_MODEL_LEN}")
            entries: list[Any] = [None]
            for k in range(1, len(ids)):
                logprob = self.logprob(ids[:k], ids[k])
                entries.append({str(ids[k]): {"logprob": logprob, "rank": 1, "decoded_token": chr(ids[k])}})
            choices.append({"index": index, "text": "x", "logprobs": None, "finish_reason": "length",
                            "prompt_logprobs": entries, "prompt_token_ids": ids})
        return {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                "choices": choices, "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"index": i, "object": "embedding", "embedding": self.embed(text)} for i, text in enumerate(inputs)]
        return {"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 1, "total_tokens": 1}}

    async def serve(self, host: str, port: int, on_listening: Callable[[int], None] | None = None) -> None:
        """Serve until cancelled; ``on_listening`` gets the bound port (``port`` 0 picks one)."""
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _ServerConnection(self), host, port, backlog=4096)
        if on_listening is not None:
            on_listening(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()


class ScriptedServer(ScriptedChatServer):
    """The scripted server on ``127.0.0.1`` in a thread of this process (its own asyncio loop), so
    a test can set the hooks (``chat``, ``logprob``, ``embed``, ``fail_paths``) between requests
    and read ``requests`` after them. ``start()`` returns once it listens; ``stop()`` ends it."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ScriptedServer:
        listening = threading.Event()

        def listen(port: int) -> None:
            self.port = port
            listening.set()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            self._task = loop.create_task(self.serve("127.0.0.1", 0, listen))
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._task)
            loop.close()

        self._thread = threading.Thread(target=run, name="scripted-server", daemon=True)
        self._thread.start()
        if not listening.wait(30):
            raise RuntimeError("the scripted server did not start listening within 30 s")
        return self

    def stop(self) -> None:
        loop, task, thread = self._loop, self._task, self._thread
        self._thread = None
        if thread is None or loop is None or task is None:
            return
        loop.call_soon_threadsafe(task.cancel)
        thread.join(10)

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class _ServerConnection(asyncio.Protocol):
    """One client connection: requests are answered in order, one at a time."""

    def __init__(self, app: ScriptedChatServer):
        self.app = app
        self.reader = MessageReader(response=False)
        self.transport: Any = None
        self.busy = False
        self.continued = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        self._serve()

    def _serve(self) -> None:
        while not self.busy and self.transport is not None:
            try:
                request = self.reader.next()
            except HTTPParseError as exc:
                self.busy = True
                self._answer(400, {"error": {"message": f"bad HTTP request: {exc}", "type": "invalid_request"}}, {}, False)
                return
            if request is None:
                headers = self.reader.partial_headers
                if headers and not self.continued and headers.get("expect", "").lower() == "100-continue":
                    self.continued = True
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return
            self.continued = False
            self.busy = True
            status, payload, headers, delay_s = self.app.handle(request)
            if delay_s > 0:
                asyncio.get_running_loop().call_later(delay_s, self._answer_late, time.perf_counter(), status, payload,
                                                      headers, request.keep_alive)
            else:
                self._answer(status, payload, headers, request.keep_alive)

    def _answer_late(self, arrived: float, status: int, payload: Any, headers: dict[str, str], keep_alive: bool) -> None:
        self.app.held_s.append(time.perf_counter() - arrived)
        self._answer(status, payload, headers, keep_alive)

    def _answer(self, status: int, payload: Any, headers: dict[str, str], keep_alive: bool) -> None:
        if self.transport is None:
            return
        body = wire_json.dumps(payload)
        head = response_head(status, REASONS.get(status, "Unknown"), {**JSON_HEADERS, **headers}, len(body), keep_alive)
        self.transport.write(head + body)
        self.busy = False
        if not keep_alive:
            self.transport.close()
            self.transport = None
        elif self.reader.pending:
            self._serve()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay added to every completion")
    parser.add_argument("--model", default="scripted")
    parser.add_argument("--lenient", action="store_true", help="accept unknown message fields")
    parser.add_argument("--event-loop", choices=event_loops.EVENT_LOOPS,
                        help="default: 'precise' with --latency-ms (answers on time: never early, not in "
                             "millisecond bursts; up to ~1,000 connections), else 'auto' (uvloop)")
    return parser


def default_event_loop(latency_ms: float) -> str:
    """uvloop is cheapest per request, but its timers work in whole milliseconds (see
    ``event_loops.precise_loop``): with injected latency, 30-55 % of answers came up to 0.9 ms early
    and the rest in bursts, measured at 256 connections (docs/bench/api_rollout.md)."""
    return "precise" if latency_ms > 0 else "auto"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    app = ScriptedChatServer(latency_s=args.latency_ms / 1000.0, strict=not args.lenient, model=args.model)
    gc.freeze()  # what exists now (imported modules) lives as long as the process: keep it out of collections
    with contextlib.suppress(KeyboardInterrupt):
        event_loops.run(app.serve(args.host, args.port), args.event_loop or default_event_loop(args.latency_ms))
    return 0


def start_scripted_server(port: int, latency_ms: float = 0.0, *, lenient: bool = False, event_loop: str | None = None,
                          **kwargs: Any) -> LocalServer:
    """Start the scripted server as a child process and wait until it answers."""
    argv = [sys.executable, "-m", "twinkle_agentic.testing.scripted_server", "--port", str(port),
            "--latency-ms", str(latency_ms)] + (["--lenient"] if lenient else [])
    if event_loop is not None:
        argv += ["--event-loop", event_loops.check_event_loop(event_loop)]
    return LocalServer(argv, port, **kwargs).start()


if __name__ == "__main__":
    sys.exit(main())
