"""OpenAI-shaped chat types.

Messages, tool calls and tool schemas are plain dicts at run time (rows travel through Arrow, Ray
and JSON unchanged); these TypedDicts only document and type-check their shape.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

Role = Literal["system", "user", "assistant", "tool", "developer"]


class FunctionCall(TypedDict, total=False):
    name: str
    arguments: str | dict[str, Any]  # a JSON string on the wire; a dict is accepted on input


class ToolCall(TypedDict, total=False):
    id: str
    type: Literal["function"]
    function: FunctionCall


class FunctionSchema(TypedDict, total=False):
    name: str
    description: str
    parameters: dict[str, Any]


class Tool(TypedDict, total=False):
    """An OpenAI function schema (``ToolInfo`` in the seeds)."""

    type: Literal["function"]
    function: FunctionSchema


ToolInfo = Tool


class ContentPart(TypedDict, total=False):
    type: str  # 'text', 'image_url', 'input_audio', ...
    text: str


class Message(TypedDict, total=False):
    role: Role
    content: str | list[ContentPart] | None
    tool_calls: list[ToolCall] | str  # the Arrow-stable form is a JSON string ('' or '[]' = none)
    tool_call_id: str
    name: str
    reasoning_content: str
    thinking: str  # alias of reasoning_content
    finish_reason: str  # on API outputs only; never sent back
