"""``Template``: a model's chat template, tokenizer and tool-call parser behind one object.

The rollout needs five things from it: render messages (tools included) exactly as the model saw
them in training, tokenize without adding special tokens, parse and strip tool calls from generated
text, know the end-of-turn marker and the text a template writes after it (``turn_suffix``), and
measure whether a finished trajectory's tokens still equal the rendering of its messages
(``token_drift``). The end-of-turn marker and suffix are derived by rendering a short sample
conversation unless configured, so any ChatML-like template works without per-model tables.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from typing import Any

from twinkle_agentic.data_format import InputFeature, Message, Tool, ToolCall, Trajectory
from twinkle_agentic.data_format.tool_calls import decode_tool_calls

from .parsers import ToolCallParser, get_tool_call_parser

TRUNCATION_STRATEGIES = ("raise", "left", "right")
IGNORE_INDEX = -100
# A tokenizer "model_max_length" at or above this is HF's "unset" sentinel, not a real limit.
UNSET_MAX_LENGTH = 10**8
_PROBE = [{"role": "user", "content": "ping"}, {"role": "assistant", "content": "pong"}]


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
    """Chat template + tokenizer + tool-call parser for one model.

    ``model`` is a local HF model directory (or hub id, offline cache permitting) whose tokenizer
    carries a chat template; or pass a loaded ``tokenizer``. ``chat_template`` overrides the
    tokenizer's. ``max_length`` defaults to the tokenizer's ``model_max_length`` when that is set;
    ``truncation_strategy`` decides what ``encode`` does beyond it: ``raise``
    (``TemplateLengthError``), ``left`` (drop tokens from the left) or ``right`` (drop them from the
    right). ``split`` (one conversation into several features) is not offered: no rollout can use it.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        tokenizer: Any = None,
        chat_template: str | None = None,
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
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(model), trust_remote_code=trust_remote_code)
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"the tokenizer of {model or type(tokenizer).__name__} has no chat_template; pass one")
        self.model = None if model is None else str(model)
        self.tokenizer = tokenizer
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self.parser = get_tool_call_parser(tool_call_parser)
        self.truncation_strategy = truncation_strategy
        if max_length is None:
            limit = getattr(tokenizer, "model_max_length", None)
            max_length = int(limit) if isinstance(limit, int) and 0 < limit < UNSET_MAX_LENGTH else None
        self.max_length = max_length
        derived_eot, derived_suffix = self._derive_turn_end()
        self.end_of_turn = derived_eot if end_of_turn is None else end_of_turn
        self.turn_suffix = derived_suffix if turn_suffix is None else turn_suffix
        self.end_of_turn_id = self._single_token_id(self.end_of_turn)

    def __repr__(self) -> str:
        return (
            f"Template({self.model or type(self.tokenizer).__name__!r}, parser={self.parser.name!r}, "
            f"max_length={self.max_length}, end_of_turn={self.end_of_turn!r}, turn_suffix={self.turn_suffix!r})"
        )

    # -- rendering and tokens ------------------------------------------------------------------------

    def render(
        self, messages: Sequence[Message], tools: Sequence[Tool] | None = None, add_generation_prompt: bool = False
    ) -> str:
        """The chat-template text of ``messages`` (tools included when given)."""
        return self.tokenizer.apply_chat_template(
            messages_for_template(messages),
            tools=list(tools) if tools else None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
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
        text = self.render(messages, tools, add_generation_prompt)
        spans = self._assistant_spans(messages, tools, text)
        if spans:
            encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            ids = list(encoding["input_ids"])
            labels = [
                token if any(s <= start and end <= e for s, e in spans) else IGNORE_INDEX
                for token, (start, end) in zip(ids, encoding["offset_mapping"], strict=True)
            ]
        else:  # nothing trainable (a prompt): skip the offsets
            ids = self.encode_text(text)
            labels = [IGNORE_INDEX] * len(ids)
        if self.max_length is not None and len(ids) > self.max_length:
            if self.truncation_strategy == "raise":
                raise TemplateLengthError(
                    f"encoded trajectory has {len(ids)} tokens > max_length={self.max_length}; raise "
                    "max_length or choose truncation_strategy='left'/'right'"
                )
            keep = slice(-self.max_length, None) if self.truncation_strategy == "left" else slice(self.max_length)
            ids, labels = ids[keep], labels[keep]
        return feature(ids, labels)

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

    # -- tool calls ----------------------------------------------------------------------------------

    def parse_tool_call(self, text: str) -> list[ToolCall]:
        return self.parser.parse(text)

    def clean_tool_call(self, text: str) -> str:
        return self.parser.clean(text)

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

    def _single_token_id(self, text: str) -> int | None:
        ids = self.encode_text(text) if text else []
        return ids[0] if len(ids) == 1 else None

    def ends_turn(self, token_ids: Sequence[int]) -> bool:
        """Whether generated tokens end with the end-of-turn marker."""
        if not token_ids:
            return False
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
        marker when the last assistant turn was cut before it.
        """
        ends_with_assistant = bool(messages) and messages[-1].get("role") == "assistant"
        text = self.render(messages, tools, add_generation_prompt=not ends_with_assistant)
        ids = list(input_ids)
        if ends_with_assistant:  # a generation ends right after its tokens: no suffix follows
            if self.turn_suffix and text.endswith(self.turn_suffix):
                text = text[: -len(self.turn_suffix)]
            if not self.ends_turn(ids) and text.endswith(self.end_of_turn):
                text = text[: -len(self.end_of_turn)]
        return sequence_drift(ids, self.encode_text(text))


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
