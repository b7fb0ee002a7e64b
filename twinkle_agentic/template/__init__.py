"""Chat templates, tool-call parsers and token-level encoding for rollouts and training data."""

from .parsers import (
    HermesToolCallParser,
    ToolCallParser,
    canonical_arguments,
    get_tool_call_parser,
    register_tool_call_parser,
)
from .template import (
    IGNORE_INDEX,
    Template,
    TemplateLengthError,
    feature,
    messages_for_template,
    sequence_drift,
)

__all__ = [
    "IGNORE_INDEX",
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
