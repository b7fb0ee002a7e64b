"""Chat formats (model-family renderers or chat templates), tool-call parsers and token-level encoding."""

from .parsers import (
    HermesToolCallParser,
    ToolCallParser,
    canonical_arguments,
    get_tool_call_parser,
    register_tool_call_parser,
    registered_parser_names,
)
from .renderer_backend import BridgeError, ParsedTurn, RendererBackend, auto_renderer_name, renderer_names
from .template import (
    IGNORE_INDEX,
    Template,
    TemplateLengthError,
    feature,
    messages_for_template,
    read_chat_template,
    sequence_drift,
)

__all__ = [
    "IGNORE_INDEX",
    "BridgeError",
    "ParsedTurn",
    "RendererBackend",
    "auto_renderer_name",
    "read_chat_template",
    "registered_parser_names",
    "renderer_names",
    "HermesToolCallParser",
    "Template",
    "TemplateLengthError",
    "ToolCallParser",
    "canonical_arguments",
    "feature",
    "get_tool_call_parser",
    "messages_for_template",
    "register_tool_call_parser",
    "sequence_drift",
]
