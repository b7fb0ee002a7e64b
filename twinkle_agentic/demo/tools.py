"""Demo tools: a weather lookup over a fixed table and an arithmetic calculator.

Both are pure, deterministic and thread-safe, so one instance can serve every trajectory. The
table and the tool descriptions are what the tiny model was trained on: changing them changes what
the model sees in its tools prompt.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from twinkle_agentic.data_format import ToolInfo
from twinkle_agentic.tools.base import Tool

# city -> (condition, temperature in degrees Celsius)
WEATHER_TABLE: dict[str, tuple[str, int]] = {
    "Paris": ("sunny", 24),
    "London": ("rainy", 15),
    "Tokyo": ("cloudy", 19),
    "Berlin": ("windy", 12),
    "Madrid": ("sunny", 31),
    "Rome": ("sunny", 28),
    "Lisbon": ("foggy", 17),
    "Dublin": ("rainy", 11),
    "Oslo": ("snowy", 2),
    "Vienna": ("cloudy", 16),
    "Prague": ("windy", 9),
    "Warsaw": ("snowy", 1),
    "Athens": ("sunny", 33),
    "Cairo": ("sunny", 36),
    "Delhi": ("stormy", 30),
    "Beijing": ("foggy", 21),
    "Seoul": ("cloudy", 14),
    "Sydney": ("windy", 22),
    "Toronto": ("snowy", 4),
    "Chicago": ("windy", 8),
    "Boston": ("rainy", 13),
    "Denver": ("sunny", 18),
    "Lima": ("foggy", 20),
    "Nairobi": ("stormy", 25),
}

WEATHER_TOOL: ToolInfo = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name."}},
            "required": ["city"],
        },
    },
}

CALCULATOR_TOOL: ToolInfo = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate arithmetic.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "For example 12 * 7."}},
            "required": ["expression"],
        },
    },
}

_BINARY_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY_OPS = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION_CHARS = 200
MAX_ABS_VALUE = 10**12


def lookup_weather(city: str) -> str:
    """``'Paris: sunny, 24 C'``; an unknown city gives an ``Error: ...`` string (case-insensitive match)."""
    name = str(city).strip()
    for known, (condition, celsius) in WEATHER_TABLE.items():
        if known.lower() == name.lower():
            return f"{known}: {condition}, {celsius} C"
    return f"Error: no weather data for {name!r}."


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        value = _BINARY_OPS[type(node.op)](left, right)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        value = _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    else:
        raise ValueError(f"unsupported element {type(node).__name__}")
    if abs(value) > MAX_ABS_VALUE:
        raise ValueError("result too large")
    return value


def format_number(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def calculate(expression: str) -> str:
    """Evaluate ``+ - * / // %`` over numbers (no names, no calls, no powers); errors as ``Error: ...``."""
    text = str(expression).strip()
    if not text:
        return "Error: empty expression."
    if len(text) > MAX_EXPRESSION_CHARS:
        return f"Error: expression longer than {MAX_EXPRESSION_CHARS} characters."
    try:
        return format_number(_evaluate(ast.parse(text, mode="eval")))
    except ZeroDivisionError:
        return "Error: division by zero."
    except (SyntaxError, ValueError, TypeError) as exc:
        return f"Error: cannot evaluate {text!r}: {exc}"


class WeatherTool(Tool):
    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        if "city" not in arguments:
            return "Error: missing argument 'city'."
        return lookup_weather(arguments["city"])

    def tool_info(self) -> ToolInfo:
        return WEATHER_TOOL


class CalculatorTool(Tool):
    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        if "expression" not in arguments:
            return "Error: missing argument 'expression'."
        return calculate(arguments["expression"])

    def tool_info(self) -> ToolInfo:
        return CALCULATOR_TOOL


def demo_tools() -> list[Tool]:
    """The tools the tiny model knows, in the order of its tools prompt."""
    return [WeatherTool(), CalculatorTool()]
