"""Tools the model can call, and the ``ToolManager`` that dispatches its calls."""

from .base import InvalidToolError, Tool
from .tool_manager import ToolManager, parse_arguments

__all__ = ["InvalidToolError", "Tool", "ToolManager", "parse_arguments"]
