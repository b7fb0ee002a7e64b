"""``Template``: a model's chat format, tokenizer and tool-call parser behind one object.

Two paths. A family the ``renderers`` package covers (Qwen3, Llama 3, DeepSeek, GLM, Kimi, gpt-oss,
...) is rendered, parsed and bridged by its hand-written renderer (``renderer_backend.py``): token
ids directly, reasoning and tool calls parsed from tokens, new messages appended to the sampled
stream without re-rendering it. Any other model goes through its tokenizer's chat template with a
tool-call parser by name (the project's ``hermes``, or any of vLLM's).

On the chat-template path the rollout needs five things: render messages (tools included) exactly as the model saw
them in training, tokenize without adding special tokens, parse and strip tool calls from generated
text, know the end-of-turn marker and the text a template writes after it (``turn_suffix``), and
measure whether a finished trajectory's tokens still equal the rendering of its messages
(``token_drift``). The end-of-turn marker and suffix are derived by rendering a short sample
conversation unless configured, so any ChatML-like template works without per-model tables.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from twinkle_agentic.data_format import InputFeature, Message, Tool, ToolCall, Trajectory
from twinkle_agentic.data_format.tool_calls import decode_tool_calls

from .parsers import ToolCallParser, get_tool_call_parser
from .renderer_backend import BridgeError, ParsedTurn, RendererBackend, auto_renderer_name

TRUNCATION_STRATEGIES = ("raise", "left", "right")
IGNORE_INDEX = -100
# A tokenizer "model_max_length" at or above this is HF's "unset" sentinel, not a real limit.
UNSET_MAX_LENGTH = 10**8
_PROBE = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]
_ARGUMENTS_PROBE = '{"a":1}'


class TemplateLengthError(ValueError):
    """An encoded conversation is longer than ``max_length`` under ``truncation_strategy='raise'``."""


def messages_for_template(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Copies shaped for a chat template: tool calls as a list, None content as '', no finish_reason."""
    out = []
    for message in messages:
        message = dict(message)
        message.pop("finish_reason", None)
        if message.get("content") is None:
            message["content"] = ""
        if "thinking" in message and "reasoning_content" not in message:
            message["reasoning_content"] = message.pop("thinking")
        if "tool_calls" in message:
            calls = decode_tool_calls(message["tool_calls"])
            if calls:
                message["tool_calls"] = calls
            else:
                message.pop("tool_calls")
        out.append(message)
    return out


class Template:
    """Chat format + tokenizer + tool-call parser for one model.

    ``model`` is a local HF model directory (or hub id, offline cache permitting); or pass a loaded
    ``tokenizer``. ``renderer`` picks the path: ``"auto"`` (default) uses the ``renderers`` family
    the model maps to and the chat template otherwise; a family name (``"qwen3"``, ``"llama-3"``,
    ``"deepseek-v3"``, ``"glm-4.5"``, ...) forces that renderer; None forces the chat template.
    ``chat_template`` (the template text, or a path to a template file) overrides the tokenizer's and
    implies the chat-template path. ``chat_template_kwargs`` go to the renderer's config (checked
    against what the family accepts, e.g. Qwen3's ``enable_thinking``) or to ``apply_chat_template``.
    ``tool_call_parser`` (chat-template path only) is ``hermes``, a parser registered with
    ``register_tool_call_parser``, or any vLLM tool parser by name (``llama3_json``, ...).
    ``max_length`` defaults to the tokenizer's ``model_max_length`` when that is set;
    ``truncation_strategy`` decides what ``encode`` does beyond it: ``raise``
    (``TemplateLengthError``), ``left`` (drop tokens from the left) or ``right`` (drop them from the
    right). ``split`` (one conversation into several features) is not offered: no rollout can use it.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        tokenizer: Any = None,
        renderer: str | None = "auto",
        chat_template: str | os.PathLike[str] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tool_call_parser: str | ToolCallParser = "hermes",
        max_length: int | None = None,
        truncation_strategy: str = "raise",
        end_of_turn: str | None = None,
        turn_suffix: str | None = None,
        trust_remote_code: bool = False,
    ):
        if (model is None) == (tokenizer is None):
            raise ValueError("Template needs exactly one of model (a path or id) or tokenizer")
        if truncation_strategy not in TRUNCATION_STRATEGIES:
            raise ValueError(
                f"truncation_strategy must be one of {TRUNCATION_STRATEGIES}, got {truncation_strategy!r}"
            )
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
            raise ValueError(f"max_length must be None or an integer >= 1, got {max_length!r}")
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, Mapping):
            raise ValueError(f"chat_template_kwargs must be a mapping, got {type(chat_template_kwargs).__name__}")
        if renderer is not None and (not isinstance(renderer, str) or not renderer):
            raise ValueError(f"renderer must be 'auto', a renderers family name or None, got {renderer!r}")
        if chat_template is not None and renderer not in (None, "auto"):
            raise ValueError(
                f"chat_template overrides the chat template, but renderer={renderer!r} renders without one; "
                "drop one of them (renderer=None for the chat-template path)"
            )
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(model), trust_remote_code=trust_remote_code)
        self.model = None if model is None else str(model)
        self.tokenizer = tokenizer
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.truncation_strategy = truncation_strategy
        if max_length is None:
            limit = getattr(tokenizer, "model_max_length", None)
            max_length = int(limit) if isinstance(limit, int) and 0 < limit < UNSET_MAX_LENGTH else None
        self.max_length = max_length
        family = renderer
        if renderer == "auto":
            family = None if chat_template is not None else auto_renderer_name(self.model, getattr(tokenizer, "name_or_path", None))
        self.renderer: RendererBackend | None = (
            None if family is None else RendererBackend(tokenizer, family, self.chat_template_kwargs)
        )
        if self.renderer is not None:
            self.parser, self.chat_template = None, None
            self.end_of_turn_id = self.renderer.stop_ids[0]
            self.end_of_turn = self.decode([self.end_of_turn_id], skip_special_tokens=False)
            self.turn_suffix = ""
            self._arguments_as_dict = False
            return
        # an override is kept here, not set on the tokenizer, which callers may share
        self.chat_template = read_chat_template(chat_template) if chat_template is not None else None
        if not (self.chat_template or getattr(tokenizer, "chat_template", None)):
            raise ValueError(
                f"the tokenizer of {model or type(tokenizer).__name__} has no chat_template and no renderer covers it; "
                "pass chat_template (text or file) or renderer='<family>'"
            )
        self.parser = get_tool_call_parser(tool_call_parser, tokenizer)
        derived_eot, derived_suffix = self._derive_turn_end()
        self.end_of_turn = derived_eot if end_of_turn is None else end_of_turn
        self.turn_suffix = derived_suffix if turn_suffix is None else turn_suffix
        self.end_of_turn_id = self._single_token_id(self.end_of_turn)
        self._arguments_as_dict = self._template_jsons_arguments()

    @property
    def renderer_name(self) -> str | None:
        """The ``renderers`` family in use; None on the chat-template path."""
        return None if self.renderer is None else self.renderer.name

    def __repr__(self) -> str:
        path = f"renderer={self.renderer_name!r}" if self.renderer is not None else f"parser={self.parser.name!r}"
        return (
            f"Template({self.model or type(self.tokenizer).__name__!r}, {path}, "
            f"max_length={self.max_length}, end_of_turn={self.end_of_turn!r}, turn_suffix={self.turn_suffix!r})"
        )

    # -- rendering and tokens ------------------------------------------------------------------------

    def render(
        self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, add_generation_prompt: bool = False
    ) -> str:
        """The chat-format text of ``messages`` (tools included when given)."""
        if self.renderer is not None:
            ids = self.renderer.renderer.render_ids(
                messages_for_template(messages), tools=list(tools) if tools else None, add_generation_prompt=add_generation_prompt
            )
            return self.decode(ids, skip_special_tokens=False)
        return self.tokenizer.apply_chat_template(
            messages_for_template(messages),
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            chat_template=self.chat_template,
            **self.chat_template_kwargs,
        )

    def encode_text(self, text: str) -> list[int]:
        """Token ids of ``text`` without added BOS/EOS (the fast tokenizer's Rust core when available)."""
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def encode(self, trajectory: Trajectory, add_generation_prompt: bool = True) -> InputFeature:
        """Tokens of the rendered trajectory; labels on assistant turns (through their end-of-turn marker).

        ``max_length`` is enforced per ``truncation_strategy``.
        """
        messages = list(trajectory.get("messages") or [])
        tools = trajectory.get("tools") or None
        if self.renderer is not None:
            ids, labels = self.renderer.encode(messages_for_template(messages), tools, add_generation_prompt)
        else:
            ids, labels = self._encode_chat_template(messages, tools, add_generation_prompt)
        if self.max_length is not None and len(ids) > self.max_length:
            if self.truncation_strategy == "raise":
                raise TemplateLengthError(
                    f"encoded trajectory has {len(ids)} tokens > max_length={self.max_length}; raise "
                    "max_length or choose truncation_strategy='left'/'right'"
                )
            keep = slice(-self.max_length, None) if self.truncation_strategy == "left" else slice(self.max_length)
            ids, labels = ids[keep], labels[keep]
        return feature(ids, labels)

    def _encode_chat_template(self, messages: list[Message], tools: Any, add_generation_prompt: bool) -> tuple[list[int], list[int]]:
        text = self.render(messages, tools, add_generation_prompt)
        spans = self._assistant_spans(messages, tools, text)
        if not spans:  # nothing trainable (a prompt): skip the offsets
            ids = self.encode_text(text)
            return ids, [IGNORE_INDEX] * len(ids)
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(encoding["input_ids"])
        labels = [
            token if any(s <= start and end <= e for s, e in spans) else IGNORE_INDEX
            for token, (start, end) in zip(ids, encoding["offset_mapping"], strict=True)
        ]
        return ids, labels

    def _assistant_spans(self, messages: list[Message], tools: Any, text: str) -> list[tuple[int, int]]:
        spans = []
        for k, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            start = len(self.render(messages[:k], tools, add_generation_prompt=True))
            end = len(self.render(messages[: k + 1], tools))
            if self.turn_suffix and text[:end].endswith(self.turn_suffix):
                end -= len(self.turn_suffix)
            spans.append((start, end))
        return spans

    # -- generated turns -----------------------------------------------------------------------------

    def stop_token_ids(self) -> list[int]:
        """Token ids that end a generated turn, as the renderer knows them (none on the chat-template
        path, where the engine's own EOS applies)."""
        return list(self.renderer.stop_ids) if self.renderer is not None else []

    def parse_turn(
        self, token_ids: Sequence[int], prompt_ids: Sequence[int] | None = None, tools: Sequence[Tool] | None = None
    ) -> ParsedTurn:
        """A generated turn as an assistant message (content, ``reasoning_content`` where the family has
        reasoning, well-formed ``tool_calls`` without ids); a malformed or cut call stays content."""
        if self.renderer is not None:
            return self.renderer.parse(list(token_ids), None if prompt_ids is None else list(prompt_ids), tools)
        text = self.decode(token_ids, skip_special_tokens=True)
        calls = self.parse_tool_call(text)
        if self._arguments_as_dict:
            calls = [_with_dict_arguments(call) for call in calls]
        message: dict[str, Any] = {"role": "assistant", "content": self.clean_tool_call(text)}
        if calls:
            message["tool_calls"] = calls
        return ParsedTurn(message, calls)

    def parse_tool_call(self, text: str) -> list[ToolCall]:
        if self.parser is None:
            raise TypeError(f"renderer {self.renderer_name!r} parses tokens: use parse_turn(token_ids)")
        return self.parser.parse(text)

    def clean_tool_call(self, text: str) -> str:
        if self.parser is None:
            raise TypeError(f"renderer {self.renderer_name!r} parses tokens: use parse_turn(token_ids)")
        return self.parser.clean(text)

    def bridge_ids(
        self,
        prompt_ids: Sequence[int],
        completion_ids: Sequence[int],
        before: Sequence[Message],
        after: Sequence[Message],
        tools: Sequence[Tool] | None = None,
    ) -> list[int]:
        """Tokens appended after a sampled completion so the stream ends at the next generation prompt
        with ``after[len(before):]`` (tool results, a user message) in between. The sampled tokens are
        never re-rendered; ``BridgeError`` when the format cannot express the messages that way."""
        if self.renderer is not None:
            new = messages_for_template(list(after)[len(before) :])
            return self.renderer.bridge(list(prompt_ids), list(completion_ids), new, tools)
        prev = self.render(before, tools, add_generation_prompt=False)
        nxt = self.render(after, tools, add_generation_prompt=True)
        if not nxt.startswith(prev):
            raise BridgeError("the rendering with tool results does not extend the rendering before them")
        delta = nxt[len(prev) :]
        if not delta:
            raise BridgeError("tool results render to nothing")
        eot, suffix = self.end_of_turn, self.turn_suffix
        text = suffix + delta if self.ends_turn(completion_ids) else eot + suffix + delta
        ids = self.encode_text(text)
        if not ids:
            raise BridgeError("the bridge text encodes to no tokens")
        return ids

    # -- end of turn ---------------------------------------------------------------------------------

    def _derive_turn_end(self) -> tuple[str, str]:
        text = self.render(_PROBE)
        tail = text[text.rindex("pong") + len("pong") :]
        markers = set(getattr(self.tokenizer, "all_special_tokens", []) or [])
        markers |= set((getattr(self.tokenizer, "get_added_vocab", dict)() or {}).keys())
        for marker in sorted(markers, key=len, reverse=True):
            if marker and tail.startswith(marker):
                return marker, tail[len(marker) :]
        stripped = tail.rstrip()
        return stripped, tail[len(stripped) :]

    def _template_jsons_arguments(self) -> bool:
        """Whether the chat template ``tojson``s tool-call arguments (then a string would render quoted,
        so parsed calls keep a dict); templates that print strings keep the wire JSON string."""
        call = {"id": "probe", "type": "function", "function": {"name": "probe", "arguments": _ARGUMENTS_PROBE}}
        try:
            text = self.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}])
        except Exception:
            return False
        return json.dumps(_ARGUMENTS_PROBE) in text

    def _single_token_id(self, text: str) -> int | None:
        ids = self.encode_text(text) if text else []
        return ids[0] if len(ids) == 1 else None

    def ends_turn(self, token_ids: Sequence[int]) -> bool:
        """Whether generated tokens end with the end-of-turn marker (a renderer's stop token)."""
        if not token_ids:
            return False
        if self.renderer is not None:
            return self.renderer.ends_turn(token_ids)
        if self.end_of_turn_id is not None:
            return token_ids[-1] == self.end_of_turn_id
        return self.decode(token_ids, skip_special_tokens=False).endswith(self.end_of_turn)

    # -- verification --------------------------------------------------------------------------------

    def token_drift(
        self, input_ids: Sequence[int], messages: Sequence[Message], tools: Sequence[Tool] | None = None
    ) -> int:
        """Tokens by which ``input_ids`` differ from re-rendering ``messages`` (0 = identical).

        The reference ends where a generation would: with the generation prompt after a tool or
        user message; after an assistant message without the turn suffix, and without the end-of-turn
        marker when the last assistant turn was cut before it. A prefix-unstable family (Qwen3) may
        drift here although its bridged stream is exact: the re-render is what differs.
        """
        ids = list(input_ids)
        if self.renderer is not None:
            return sequence_drift(ids, self.renderer.reference_ids(messages_for_template(messages), tools, ids))
        ends_with_assistant = bool(messages) and messages[-1].get("role") == "assistant"
        text = self.render(messages, tools, add_generation_prompt=not ends_with_assistant)
        if ends_with_assistant:  # a generation ends right after its tokens: no suffix follows
            if self.turn_suffix and text.endswith(self.turn_suffix):
                text = text[: -len(self.turn_suffix)]
            if not self.ends_turn(ids) and text.endswith(self.end_of_turn):
                text = text[: -len(self.end_of_turn)]
        return sequence_drift(ids, self.encode_text(text))


def read_chat_template(value: str | os.PathLike[str]) -> str:
    """The template text: ``value`` itself, or the file it names (a path, or a string without Jinja
    markup that names an existing file)."""
    if isinstance(value, os.PathLike) or ("{%" not in value and "{{" not in value):
        path = os.fspath(value)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        raise ValueError(f"chat_template {path!r} is neither Jinja template text nor an existing file")
    return value


def _with_dict_arguments(call: ToolCall) -> ToolCall:
    function = dict(call["function"])
    try:
        function["arguments"] = json.loads(function["arguments"])
    except (TypeError, ValueError):
        return call
    return {**call, "function": function}


def sequence_drift(actual: list[int], reference: list[int]) -> int:
    """Tokens not covered by the longest matching blocks of the two sequences (0 when equal)."""
    if actual == reference:
        return 0
    matcher = difflib.SequenceMatcher(a=actual, b=reference, autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    return len(actual) + len(reference) - 2 * matched


def feature(input_ids: list[int], labels: list[int]) -> InputFeature:
    """An ``InputFeature`` with ones for attention and positions ``0..n-1``."""
    n = len(input_ids)
    return {
        "input_ids": input_ids,
        "labels": labels,
        "attention_mask": [1] * n,
        "position_ids": list(range(n)),
        "length": n,
    }
