"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 with vLLM's response shapes.

Tokens are UTF-8 bytes (``/tokenize`` renders chats as ChatML first). Tests script the chat replies,
the prompt logprobs and the embeddings with plain functions; every request body is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def render_chatml(messages: list[dict], add_generation_prompt: bool) -> str:
    text = "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def byte_tokens(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def default_logprob(prefix: list[int], token: int) -> float:
    """Deterministic stand-in: tokens seen earlier in the prompt are likelier."""
    return -0.5 if token in prefix else -3.0


class ScriptedOpenAI:
    def __init__(self) -> None:
        self.chat: Callable[[dict], list[str]] = lambda body: ["ok"] * body.get("n", 1)
        self.logprob: Callable[[list[int], int], float] = default_logprob
        self.embed: Callable[[str], list[float]] = lambda text: [float(len(text)), 1.0]
        self.fail_paths: set[str] = set()
        self.requests: list[tuple[str, dict]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ScriptedOpenAI:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                scripted.requests.append((self.path, body))
                if self.path in scripted.fail_paths:
                    return self._send(500, {"error": {"message": "scripted failure", "code": 500}})
                handler = scripted.routes().get(self.path)
                if handler is None:
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                try:
                    return self._send(200, handler(body))
                except Exception as exc:  # scripted 400, like vLLM's validation errors
                    return self._send(400, {"error": {"message": str(exc), "code": 400}})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    # -- routes -----------------------------------------------------------------------------------

    def routes(self) -> dict[str, Callable[[dict], dict]]:
        return {
            "/tokenize": self._tokenize,
            "/detokenize": lambda b: {"prompt": bytes(b["tokens"]).decode("utf-8", "replace")},
            "/v1/completions": self._completions,
            "/v1/chat/completions": self._chat,
            "/v1/embeddings": self._embeddings,
        }

    def _tokenize(self, body: dict) -> dict:
        if "messages" in body:
            text = render_chatml(body["messages"], body.get("add_generation_prompt", True))
        else:
            text = body["prompt"]
        tokens = byte_tokens(text)
        return {"count": len(tokens), "max_model_len": 4096, "tokens": tokens}

    def _completions(self, body: dict) -> dict:
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        choices = []
        for index, ids in enumerate(prompts):
            if len(ids) > 4096:
                raise ValueError(f"prompt of {len(ids)} tokens exceeds max_model_len 4096")
            entries: list[Any] = [None]
            for k in range(1, len(ids)):
                lp = self.logprob(ids[:k], ids[k])
                entries.append({str(ids[k]): {"logprob": lp, "rank": 1, "decoded_token": chr(ids[k])}})
            choices.append(
                {
                    "index": index,
                    "text": "x",
                    "logprobs": None,
                    "finish_reason": "length",
                    "prompt_logprobs": entries,
                    "prompt_token_ids": ids,
                }
            )
        return {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": body["model"],
            "choices": choices,
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _chat(self, body: dict) -> dict:
        texts = self.chat(body)
        choices = [
            {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
            for i, t in enumerate(texts)
        ]
        return {
            "id": "chat-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": choices,
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    def _embeddings(self, body: dict) -> dict:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"index": i, "object": "embedding", "embedding": self.embed(t)} for i, t in enumerate(inputs)]
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
