"""Pure mapping between our types and the chat-completions wire format.

``to_request(trajectory, params)`` builds the request body; ``from_choice(choice)`` turns one
response choice into an assistant ``Message``. No I/O here, so both are unit-tested on recorded
payloads; ``OpenAI.__call__`` is only transport between them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from twinkle_agentic.data_format import Message, SamplingParams, Trajectory
from twinkle_agentic.data_format.tool_calls import ToolCallsError, decode_tool_calls, tool_call_id

logger = logging.getLogger(__name__)

# Fields each role may send (SPEC 13); everything else (finish_reason, logprobs, reasoning...) is
# stripped so our bookkeeping never leaks back to the server.
SENT_FIELDS: dict[str, tuple[str, ...]] = {
    "system": ("role", "content", "name"),
    "user": ("role", "content", "name"),
    "assistant": ("role", "content", "name", "tool_calls"),
    "tool": ("role", "content", "tool_call_id"),
}
ROLE_ALIASES = {"developer": "system"}  # chat templates of open models know only 'system'
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")


class RequestError(ValueError):
    """The trajectory cannot be expressed as a chat-completions request."""


def _arguments_json(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments if arguments.strip() else "{}"
    return json.dumps(arguments, ensure_ascii=False)


def _wire_tool_calls(tool_calls: Any, index: int, turn: int) -> list[dict[str, Any]]:
    try:
        calls = decode_tool_calls(tool_calls)
    except ToolCallsError as exc:
        raise RequestError(f"message {index}: {exc}") from exc
    out = []
    for position, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not function.get("name"):
            raise RequestError(f"message {index}: tool call {position} has no function.name: {call!r}")
        out.append(
            {
                "id": call.get("id") or tool_call_id(turn, position),
                "type": "function",
                "function": {"name": function["name"], "arguments": _arguments_json(function.get("arguments"))},
            }
        )
    return out


# Optional fields copied as they are (``content`` and ``tool_calls`` are handled apart).
_PLAIN_FIELDS = {role: tuple(k for k in fields if k not in ("role", "content", "tool_calls"))
                 for role, fields in SENT_FIELDS.items()}


def sanitize_messages(messages: Any, *, send_reasoning_content: bool = False) -> list[dict[str, Any]]:
    """Wire copies of ``messages`` holding only the fields the API accepts (the input is untouched)."""
    if not isinstance(messages, (list, tuple)):
        raise RequestError(f"trajectory['messages'] must be a list, got {type(messages).__name__}")
    out: list[dict[str, Any]] = []
    assistant_turn = 0
    for index, message in enumerate(messages):
        if type(message) is not dict and not isinstance(message, Mapping):
            raise RequestError(f"message {index} must be a dict, got {type(message).__name__}")
        role = message.get("role")
        role = ROLE_ALIASES.get(role, role)
        plain = _PLAIN_FIELDS.get(role)  # type: ignore[arg-type]
        if plain is None:
            raise RequestError(f"message {index} has role {message.get('role')!r}; expected one of {sorted(SENT_FIELDS)}")
        content = message.get("content")
        wire: dict[str, Any] = {"role": role, "content": "" if content is None else content}
        for key in plain:
            value = message.get(key)
            if value is not None:
                wire[key] = value
        if role == "assistant":
            assistant_turn += 1
            calls = message.get("tool_calls")
            if calls:
                calls = _wire_tool_calls(calls, index, assistant_turn)
                if calls:
                    wire["tool_calls"] = calls
            if send_reasoning_content:
                reasoning = next((message[k] for k in REASONING_KEYS if message.get(k)), None)
                if reasoning:
                    wire["reasoning_content"] = reasoning
        out.append(wire)
    return out


def to_request(
    trajectory: Trajectory,
    params: SamplingParams | None = None,
    *,
    model: str | None = None,
    tools: list[dict[str, Any]] | None = None,
    send_reasoning_content: bool = False,
    warned: set[str] | None = None,
) -> dict[str, Any]:
    """The chat-completions body for ``trajectory`` (``model`` omitted when None).

    ``tools`` overrides ``trajectory['tools']``. ``warned`` collects the one-time warnings already
    given (token-id stops cannot be expressed in this API and are dropped).
    """
    params = params or SamplingParams()
    if not isinstance(trajectory, Mapping):
        raise RequestError(f"trajectory must be a dict, got {type(trajectory).__name__}")
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    body["messages"] = sanitize_messages(trajectory.get("messages") or [], send_reasoning_content=send_reasoning_content)
    if not body["messages"]:
        raise RequestError("trajectory has no messages")
    body["n"] = params.num_samples
    body["temperature"] = float(params.temperature)
    body["top_p"] = float(params.top_p)
    tools = tools if tools is not None else trajectory.get("tools")
    if tools:
        body["tools"] = list(tools)
    if params.max_tokens is not None:
        body["max_tokens"] = params.max_tokens
    if params.seed is not None:
        body["seed"] = params.seed
    if params.stop_strings:
        body["stop"] = params.stop_strings
    if params.stop_token_ids:
        _warn_once(warned, "stop_ids", "SamplingParams.stop token ids %s cannot be sent to a chat-completions "
                   "API and are dropped; use stop strings", params.stop_token_ids)
    if params.logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = int(params.logprobs)
    if params.repetition_penalty != 1.0:
        body["frequency_penalty"] = float(params.repetition_penalty) - 1.0
    if params.top_k != -1:
        _warn_once(warned, "top_k", "SamplingParams.top_k=%s is not part of the chat-completions API and is "
                   "not sent; servers that accept it (vLLM, SGLang) take extra_body={'top_k': k}", params.top_k)
    return body


def _warn_once(warned: set[str] | None, key: str, message: str, *args: Any) -> None:
    if warned is not None and key in warned:
        return
    if warned is not None:
        warned.add(key)
    logger.warning(message, *args)


def _as_dict(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump() if callable(dump) else value


def from_choice(choice: Any) -> Message:
    """One response choice (dict or SDK object) as ``{role:'assistant', content, reasoning_content?,
    tool_calls?, finish_reason?, logprobs?}``; arguments stay the raw JSON strings the model wrote."""
    choice = _as_dict(choice)
    if not isinstance(choice, Mapping) or not isinstance(choice.get("message"), Mapping):
        raise ValueError(f"not a chat-completion choice: {choice!r:.200}")
    raw = choice["message"]
    message: Message = {"role": "assistant", "content": raw.get("content") or ""}
    reasoning = next((raw[k] for k in REASONING_KEYS if raw.get(k)), None)
    if reasoning:
        message["reasoning_content"] = reasoning
    calls = []
    for call in raw.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        calls.append(
            {
                "id": call.get("id") or "",
                "type": "function",
                "function": {
                    "name": function.get("name") or "",
                    "arguments": arguments if isinstance(arguments, str) else _arguments_json(arguments),
                },
            }
        )
        if not calls[-1]["id"]:
            del calls[-1]["id"]  # the rollout names it call_{turn}_{index}
    if calls:
        message["tool_calls"] = calls
    if choice.get("finish_reason"):
        message["finish_reason"] = choice["finish_reason"]
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, Mapping) and logprobs.get("content") is not None:
        message["logprobs"] = [float(item["logprob"]) for item in logprobs["content"]]
    return message


def from_completion(completion: Any) -> list[Message]:
    """Every choice of a completion, in ``index`` order."""
    completion = _as_dict(completion)
    choices = completion.get("choices") if isinstance(completion, Mapping) else None
    if not choices:
        raise ValueError(f"completion has no choices: {completion!r:.300}")
    ordered = sorted(choices, key=lambda c: _as_dict(c).get("index", 0) or 0)
    return [from_choice(c) for c in ordered]
