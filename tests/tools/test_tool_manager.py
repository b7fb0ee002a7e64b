"""ToolManager: registry, the exact Error strings of SPEC 14, timeouts, close."""

from __future__ import annotations

import threading
import time

import pytest

from twinkle_agentic.tools import InvalidToolError, Tool, ToolManager


class Echo(Tool):
    def __init__(self, name: str = "echo"):
        self.name = name
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, tool_name, arguments):
        self.calls.append((tool_name, arguments))
        return {"echo": arguments}

    def tool_info(self):
        return {"type": "function", "function": {"name": self.name, "description": "echo", "parameters": {}}}


class Raising(Echo):
    def __call__(self, tool_name, arguments):
        raise KeyError("boom")


class Hanging(Echo):
    def __init__(self, name="hang", timeout_s=None):
        super().__init__(name)
        self.release = threading.Event()
        if timeout_s is not None:
            self.timeout_s = timeout_s

    def __call__(self, tool_name, arguments):
        self.release.wait(10)
        return "late"


class Closable(Echo):
    def __init__(self, name="c"):
        super().__init__(name)
        self.closed = 0

    def close(self):
        self.closed += 1


def call(name, arguments=None, **extra):
    return {"id": "call_1_0", "type": "function", "function": {"name": name, "arguments": arguments}, **extra}


def test_build_from_list_dict_none_and_reject_others():
    a, b = Echo("a"), Echo("b")
    assert ToolManager([a, b]).names() == ["a", "b"]
    assert ToolManager({"x": a}).names() == ["x"]
    assert ToolManager().names() == []
    with pytest.raises(TypeError, match="list or dict"):
        ToolManager("a")
    with pytest.raises(ValueError, match="no function name"):
        ToolManager([Echo("")])


class Nameless(Echo):
    def tool_info(self):
        return {"type": "function", "function": {"description": "no name", "parameters": {}}}


@pytest.mark.parametrize(
    "register",
    [
        lambda m: m.register(object()),
        lambda m: m.register(Nameless()),
        lambda m: m.register(Echo("a"), name=""),
        lambda m: ToolManager([Nameless()]),
    ],
    ids=["not-a-tool", "no-name-in-tool-info", "empty-name", "nameless-in-list"],
)
def test_a_tool_that_cannot_be_registered_raises_a_value_error(register):
    """Code written against the documented API catches ValueError; TypeError still works too."""
    manager = ToolManager()
    with pytest.raises(ValueError) as caught:
        register(manager)
    assert isinstance(caught.value, (InvalidToolError, TypeError)) and manager.names() == []


def test_register_unregister_copy_and_infos_follow_registered_names():
    manager = ToolManager()
    assert manager.register(Echo("a")) == "a"
    manager.register(Echo("b"), name="bee")
    assert manager.names() == ["a", "bee"]
    assert [i["function"]["name"] for i in manager.tool_infos()] == ["a", "bee"]
    clone = manager.copy()
    removed = clone.unregister("a")
    assert isinstance(removed, Echo) and clone.unregister("a") is None
    assert manager.names() == ["a", "bee"] and clone.names() == ["bee"]
    assert clone.get("bee") is manager.get("bee")  # shallow: same tool objects


ERROR_CASES = [
    ("not a dict", "Error: tool_call must be an object, got str."),
    (["x"], "Error: tool_call must be an object, got list."),
    ({"id": "1"}, 'Error: tool_call missing "function" object.'),
    ({"function": "echo"}, 'Error: tool_call missing "function" object.'),
    ({"function": {"arguments": "{}"}}, 'Error: tool_call missing "function.name".'),
    ({"function": {"name": ""}}, 'Error: tool_call missing "function.name".'),
    (call("nope"), "Error: unknown tool 'nope'. Available: a, echo."),
    (call("echo", "{bad"), "Error: invalid JSON in arguments: Expecting property name enclosed in double quotes: "
     "line 1 column 2 (char 1)"),
    (call("echo", "[1, 2]"), 'Error: "arguments" must decode to a JSON object, got list.'),
    (call("echo", '"text"'), 'Error: "arguments" must decode to a JSON object, got str.'),
    (call("echo", 7), 'Error: "arguments" must be a JSON string or object, got int.'),
    (call("echo", ["x"]), 'Error: "arguments" must be a JSON string or object, got list.'),
]


@pytest.mark.parametrize("tool_call, expected", ERROR_CASES)
def test_dispatch_errors_are_exact_strings(tool_call, expected):
    manager = ToolManager([Echo("echo"), Echo("a")])
    assert manager(tool_call) == expected
    assert manager.get("echo").calls == []  # a rejected call never reaches the tool


def test_unknown_tool_with_no_tools_says_none():
    assert ToolManager()(call("x")) == "Error: unknown tool 'x'. Available: (none)."


@pytest.mark.parametrize("arguments", [None, "", "   "])
def test_missing_or_blank_arguments_become_empty_object(arguments):
    tool = Echo()
    assert ToolManager([tool])(call("echo", arguments)) == "{'echo': {}}"
    assert tool.calls == [("echo", {})]


def test_dict_and_json_arguments_reach_the_tool_and_result_is_str():
    tool = Echo()
    manager = ToolManager([tool])
    assert manager(call("echo", {"q": 1})) == "{'echo': {'q': 1}}"
    assert manager(call("echo", '{"q": "\\u00e9"}')) == "{'echo': {'q': 'é'}}"
    assert tool.calls == [("echo", {"q": 1}), ("echo", {"q": "é"})]


def test_a_raising_tool_becomes_an_error_string():
    assert ToolManager([Raising("r")])(call("r", "{}")) == "Error: tool 'r' raised KeyError: 'boom'"


def test_hung_tool_times_out_with_manager_timeout():
    tool = Hanging()
    manager = ToolManager([tool], timeout_s=0.2)
    started = time.monotonic()
    assert manager(call("hang")) == "Error: tool 'hang' timed out after 0.2s."
    assert time.monotonic() - started < 2
    tool.release.set()


def test_per_tool_timeout_beats_manager_timeout_and_fast_tools_are_unaffected():
    slow = Hanging(timeout_s=0.1)
    manager = ToolManager([slow, Echo()], timeout_s=30)
    assert manager(call("hang")) == "Error: tool 'hang' timed out after 0.1s."
    assert manager(call("echo", "{}")) == "{'echo': {}}"
    slow.release.set()
    with pytest.raises(ValueError, match="timeout_s"):
        ToolManager(timeout_s=0)


def test_timeout_path_still_reports_tool_exceptions():
    assert ToolManager([Raising("r")], timeout_s=5)(call("r")) == "Error: tool 'r' raised KeyError: 'boom'"


def test_close_closes_each_owner_once():
    tool = Closable()
    manager = ToolManager({"c1": tool, "c2": tool, "e": Echo()})
    manager.close()
    assert tool.closed == 1
