"""CodeExecutionEnv over the sandbox, as an Env and through EnvTool/ToolManager."""

from __future__ import annotations

import json

from twinkle_agentic.envs.code_env import CodeExecutionEnv, last_submitted_code
from twinkle_agentic.envs.env_tool import EnvTool
from twinkle_agentic.envs.sandbox import SandboxLimits
from twinkle_agentic.tools import ToolManager


def run_call(code, stdin=None):
    args = {"code": code} if stdin is None else {"code": code, "stdin": stdin}
    return {"id": "c", "type": "function", "function": {"name": "execute_code", "arguments": json.dumps(args)}}


def test_episode_through_tool_manager():
    env = CodeExecutionEnv(SandboxLimits(memory_mb=256), timeout_s=2)
    assert env.reset().observation == "Sandbox ready."
    tools = EnvTool.from_env(env)
    manager = ToolManager(tools)
    assert manager.names() == ["execute_code"]
    assert manager(run_call("open('n', 'w').write('41')")) == "exit_code: 0"
    assert manager(run_call("print(int(open('n').read()) + int(input()))", stdin="1")) == "exit_code: 0\nstdout:\n42"
    assert tools[0].episode_reward == 2.0
    hung = manager(run_call("while True: pass"))
    assert hung.startswith("exit_code: none (timed out)\nkilled: wall-clock limit of 2s reached")
    failed = manager(run_call("1/0"))
    assert failed.startswith("exit_code: 1\nstderr:") and "ZeroDivisionError" in failed
    assert tools[0].last_result.reward == 0.0 and tools[0].episode_reward == 2.0
    env.reset()  # a new episode starts from an empty directory
    assert "FileNotFoundError" in manager(run_call("open('n')"))
    assert manager({"function": {"name": "execute_code", "arguments": "{}"}}).startswith('Error: "execute_code" needs')
    env.close()


def test_evaluate_runs_last_code_with_tests():
    env = CodeExecutionEnv(timeout_s=5)
    call = {"function": {"name": "execute_code", "arguments": json.dumps({"code": "def add(a, b):\n    return a + b"})}}
    good = {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}], "tests": "assert add(2, 3) == 5"}
    fenced = {"messages": [{"role": "assistant", "content": "```python\ndef add(a, b):\n    return a - b\n```"}],
              "user_data": [("tests", json.dumps("assert add(2, 3) == 5"))]}
    nothing = {"messages": [{"role": "assistant", "content": "no code"}], "tests": "assert True"}
    assert env.evaluate([good, fenced, nothing]) == [1.0, 0.0, 0.0]
    assert last_submitted_code({"messages": [{"role": "assistant", "tool_calls": json.dumps([call])}]}).startswith("def add")
