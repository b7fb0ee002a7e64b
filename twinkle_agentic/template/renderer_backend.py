"""A model family's hand-written renderer (the ``renderers`` package) as a ``Template`` backend.

A renderer turns messages into token ids directly (no Jinja, no re-tokenized text), parses a
completion's tokens into content, reasoning and tool calls, and extends a sampled token stream with
new tool/user messages (``bridge_to_next_turn``) without re-rendering what the model sampled. That
is what multi-turn bookkeeping needs for families whose chat templates are not append-only (Qwen3
drops earlier ``<think>`` blocks from the history it renders).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

IGNORE_INDEX = -100
_PROBE_ARGUMENTS = '{"a":1}'


class BridgeError(RuntimeError):
    """The template cannot express new messages as a continuation of the sampled token stream."""


@dataclass
class ParsedTurn:
    """One generated assistant turn as a message: content, reasoning, well-formed tool calls.

    ``malformed`` counts tool-call attempts that did not parse (their text is in ``content``).
    """

    message: dict[str, Any]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    malformed: int = 0


def renderer_names() -> list[str]:
    """Renderer families the installed ``renderers`` package offers (besides ``auto``)."""
    from renderers.base import RENDERER_REGISTRY, _populate_registry

    _populate_registry()
    return sorted(name for name in RENDERER_REGISTRY if name != "default")


def auto_renderer_name(*names: str | None) -> str | None:
    """The family ``renderers`` maps one of ``names`` to (a hub id, or a local path ending in one or in
    its repository name); None when no renderer covers the model."""
    from renderers.base import MODEL_RENDERER_MAP

    for name in names:
        if not name:
            continue
        name = str(name).rstrip("/")
        if name in MODEL_RENDERER_MAP:
            return MODEL_RENDERER_MAP[name]
        for model_id, family in MODEL_RENDERER_MAP.items():
            if name.endswith(os.sep + model_id) or os.path.basename(name) == model_id.split("/")[-1]:
                return family
    return None


def wire_arguments(raw: str, arguments: Any) -> str | None:
    """The JSON text inside ``raw`` (a tool-call block as generated) that decodes to ``arguments``;
    None when the block carries them in another form (e.g. XML key/value pairs)."""
    decoder = json.JSONDecoder()
    start = raw.find("{")
    while start != -1:
        try:
            value, end = decoder.raw_decode(raw, start)
        except ValueError:
            value, end = None, start
        if value == arguments and isinstance(value, dict):
            return raw[start:end]
        start = raw.find("{", start + 1)
    return None


class RendererBackend:
    """Render, parse, bridge and verify through one ``renderers`` renderer.

    ``name`` is a family (``qwen3``, ``llama-3``, ``deepseek-v3``, ``glm-4.5``, ...);
    ``chat_template_kwargs`` are the family's template options (e.g. ``enable_thinking``), checked
    by ``renderers`` against what the family accepts.
    """

    def __init__(self, tokenizer: Any, name: str, chat_template_kwargs: dict[str, Any] | None = None):
        from renderers import create_renderer
        from renderers.configs import config_from_name

        known = renderer_names()
        if name not in known:
            raise ValueError(f"unknown renderer {name!r}; the renderers package offers {known} (or 'auto')")
        try:
            self.renderer = create_renderer(tokenizer, config_from_name(name), chat_template_kwargs=chat_template_kwargs)
        except AssertionError as exc:  # the family's special tokens are missing from this tokenizer
            raise ValueError(f"renderer {name!r} does not fit this tokenizer: {exc}") from exc
        self.name = name
        self.tokenizer = tokenizer
        self.stop_ids = [int(t) for t in self.renderer.get_stop_token_ids()]
        self.is_prefix_stable = bool(self.renderer.is_prefix_stable)
        self.arguments_as_text = self._prints_argument_text()

    def _prints_argument_text(self) -> bool:
        """Whether the family prints string arguments verbatim (then messages keep the wire JSON text,
        which re-renders byte for byte); else arguments are stored as a dict for it to serialize."""
        call = {"id": "probe", "type": "function", "function": {"name": "probe", "arguments": _PROBE_ARGUMENTS}}
        messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        try:
            ids = self.renderer.render_ids(messages)
        except Exception:
            return False
        return _PROBE_ARGUMENTS in self.tokenizer.decode(ids, skip_special_tokens=False)

    # -- tokens --------------------------------------------------------------------------------------

    def prompt_ids(self, messages: list[dict[str, Any]], tools: Sequence[Any] | None) -> list[int]:
        return list(self.renderer.render_ids(messages, tools=_tools(tools), add_generation_prompt=True))

    def encode(
        self, messages: list[dict[str, Any]], tools: Sequence[Any] | None, add_generation_prompt: bool
    ) -> tuple[list[int], list[int]]:
        """Ids and labels: the tokens the model samples in assistant turns are trainable, nothing else."""
        rendered = self.renderer.render(messages, tools=_tools(tools), add_generation_prompt=add_generation_prompt)
        ids = list(rendered.token_ids)
        roles = rendered.message_roles or [m.get("role") for m in messages]
        sampled = rendered.sampled_mask or [True] * len(ids)
        labels = [
            token if ok and 0 <= index < len(roles) and roles[index] == "assistant" else IGNORE_INDEX
            for token, ok, index in zip(ids, sampled, rendered.message_indices, strict=True)
        ]
        return ids, labels

    def ends_turn(self, token_ids: Sequence[int]) -> bool:
        return bool(token_ids) and int(token_ids[-1]) in self.stop_ids

    # -- a generated turn ----------------------------------------------------------------------------

    def parse(self, token_ids: list[int], prompt_ids: list[int] | None, tools: Sequence[Any] | None) -> ParsedTurn:
        parsed = self.renderer.parse_response(list(token_ids), tools=_tools(tools), prompt_ids=prompt_ids)
        calls, broken = [], []
        for call in parsed.tool_calls:
            if getattr(call.status, "value", call.status) == "ok" and call.name:
                calls.append(
                    {
                        **({"id": call.id} if call.id else {}),
                        "type": "function",
                        "function": {"name": call.name, "arguments": self._arguments(call)},
                    }
                )
            else:  # the block as generated, markers included where the parser located its tokens
                span = call.token_span
                broken.append(self.tokenizer.decode(token_ids[span[0] : span[1]], skip_special_tokens=False) if span else call.raw)
        content = parsed.content or ""
        if broken:  # kept as text: what the model said is never dropped, and nothing is executed
            content = "\n".join([content, *broken]) if content else "\n".join(broken)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if parsed.reasoning_content:
            message["reasoning_content"] = parsed.reasoning_content
        if calls:
            message["tool_calls"] = calls
        return ParsedTurn(message, calls, len(broken))

    def _arguments(self, call: Any) -> Any:
        arguments = call.arguments if call.arguments is not None else {}
        if isinstance(arguments, str) or not self.arguments_as_text:
            return arguments
        return wire_arguments(call.raw or "", arguments) or json.dumps(arguments, ensure_ascii=False)

    def bridge(
        self,
        prompt_ids: list[int],
        completion_ids: list[int],
        new_messages: list[dict[str, Any]],
        tools: Sequence[Any] | None,
    ) -> list[int]:
        """The tokens that follow ``prompt_ids + completion_ids`` up to the next generation prompt."""
        bridged = self.renderer.bridge_to_next_turn(list(prompt_ids), list(completion_ids), new_messages, tools=_tools(tools))
        if bridged is None:
            raise BridgeError(
                f"renderer {self.name!r} cannot extend the sampled stream with {[m.get('role') for m in new_messages]} "
                "messages (its thinking-retention policy re-renders here); set chat_template_kwargs or "
                "thinking_retention so it bridges, or use a prefix-stable family"
            )
        ids, previous = list(bridged.token_ids), [*prompt_ids, *completion_ids]
        if ids[: len(previous)] != previous:
            raise BridgeError(f"renderer {self.name!r} bridged a stream that does not start with the sampled tokens")
        extra = ids[len(previous) :]
        if not extra:
            raise BridgeError("the new messages render to no tokens")
        return extra

    # -- verification --------------------------------------------------------------------------------

    def reference_ids(self, messages: list[dict[str, Any]], tools: Sequence[Any] | None, input_ids: Sequence[int]) -> list[int]:
        """A full re-render of ``messages`` ending where a generation would: after the generation prompt,
        or right after the last assistant turn's sampled tokens (its close dropped when it was cut)."""
        ends_with_assistant = bool(messages) and messages[-1].get("role") == "assistant"
        rendered = self.renderer.render(messages, tools=_tools(tools), add_generation_prompt=not ends_with_assistant)
        ids = list(rendered.token_ids)
        if not ends_with_assistant or not rendered.sampled_mask:
            return ids
        last = len(messages) - 1
        sampled = [k for k, (ok, index) in enumerate(zip(rendered.sampled_mask, rendered.message_indices, strict=True)) if ok and index == last]
        if sampled:
            ids = ids[: sampled[-1] + 1]
        if not self.ends_turn(input_ids) and self.ends_turn(ids):
            ids = ids[:-1]
        elif self.ends_turn(input_ids) and not self.ends_turn(ids):  # a close the next message renders (GLM's <|user|>)
            ids = [*ids, int(input_ids[-1])]
        return ids


def _tools(tools: Sequence[Any] | None) -> list[Any] | None:
    return list(tools) if tools else None
