"""The scripted chat model behind the scripted server: a reply is a pure function of the request
(plus per-conversation failure counters), steered by ``#directives`` in the first user message (the
table is in :mod:`twinkle_agentic.testing.scripted_server`). Tokens are UTF-8 bytes, so the vLLM-style
routes (tokenize, prompt logprobs, embeddings) need no tokenizer. Test and benchmark support only.
"""

from __future__ import annotations

import json
import re
from collections import Counter, deque
from typing import Any

from twinkle_agentic.protocol import wire_json

ALLOWED_MESSAGE_FIELDS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id"},
}
DIRECTIVE = re.compile(r"#(\w+)(?:=(\{.*?\}(?=\s|$)|\S+))?")
RECORDED_REQUESTS = 2000
MAX_MODEL_LEN = 4096


def render_chatml(messages: list[dict], add_generation_prompt: bool) -> str:
    """The ChatML text of ``messages``, which ``/tokenize`` turns into tokens."""
    text = "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def byte_tokens(text: str) -> list[int]:
    """The scripted tokenizer: one token per UTF-8 byte."""
    return list(text.encode("utf-8"))


def default_logprob(prefix: list[int], token: int) -> float:
    """Deterministic stand-in for a model: tokens seen earlier in the prompt are likelier."""
    return -0.5 if token in prefix else -3.0


def default_embed(text: str) -> list[float]:
    return [float(len(text)), 1.0]


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
        # raw bytes when the HTTP layer has them: parsed bodies are thousands of objects that the
        # garbage collector would walk on every full collection
        self.requests: deque[dict[str, Any] | bytes] = deque(maxlen=RECORDED_REQUESTS)
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

    def recorded(self) -> list[dict[str, Any]]:
        return [wire_json.loads(body) if isinstance(body, bytes) else body for body in self.requests]

    def respond(self, body: dict[str, Any], raw: bytes | None = None) -> tuple[dict[str, Any], float]:
        """(completion, seconds to hang first); raises ScriptError for scripted failures. ``raw``
        (the body as received) is what gets recorded when given."""
        self.requests.append(body if raw is None else raw)
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
