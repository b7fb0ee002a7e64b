"""APIMultiTurnRollout turn logic with a scripted in-process API (pure logic; the HTTP path is in
test_rollout_http.py): stop reasons, ids, isolation of failures, managers, concurrency, traces."""

from __future__ import annotations

import asyncio
import copy
import json
import threading

import pytest

from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.envs.base import Env, StepResult
from twinkle_agentic.envs.env_tool import EnvTool
from twinkle_agentic.protocol.base import API
from twinkle_agentic.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle_agentic.tools import Tool, ToolManager


def call(name="lookup", arguments='{"key": "k"}', id=None):
    out = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if id:
        out["id"] = id
    return out


class ScriptAPI(API):
    """Replies from ``script(messages) -> message | Exception``; records requests and concurrency."""

    def __init__(self, script):
        self.script = script
        self.requests: list[tuple[dict, dict]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    def __call__(self, trajectory, sampling_params=None, **kwargs):
        raise AssertionError("the rollout must use acall")

    async def acall(self, trajectory, sampling_params=None, **kwargs):
        self.requests.append((copy.deepcopy(trajectory), kwargs))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.002)
            reply = self.script(trajectory["messages"])
        finally:
            self.in_flight -= 1
        if isinstance(reply, Exception):
            raise reply
        return copy.deepcopy(reply)


class Counting(Tool):
    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0

    def __call__(self, tool_name, arguments):
        with self.lock:
            self.calls.append(arguments)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        threading.Event().wait(0.02)
        with self.lock:
            self.active -= 1
        return f"found {arguments.get('key')}"

    def tool_info(self):
        return {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def assistant_turns(messages):
    return sum(m["role"] == "assistant" for m in messages)


def calls_then_answer(n_calls, calls=None):
    def script(messages):
        if assistant_turns(messages) < n_calls:
            return {"role": "assistant", "content": None, "tool_calls": calls or [call()], "finish_reason": "tool_calls"}
        return {"role": "assistant", "content": "done", "finish_reason": "stop"}
    return script


def user(text="q", **extra):
    return {"messages": [{"role": "user", "content": text}], **extra}


def run(script, trajectories, manager=None, **kwargs):
    api = ScriptAPI(script)
    tool = Counting()
    rollout = APIMultiTurnRollout(api, manager if manager is not None else ToolManager([tool]), **kwargs)
    return rollout(trajectories), api, tool


def test_tool_turns_then_stop_with_ids_and_stored_finish_reason():
    (out,), api, tool = run(calls_then_answer(2, [call(), call(arguments='{"key": "j"}')]), [user()])
    assert (out["stop_reason"], out["turns"], out["truncated"]) == ("stop", 3, False) and "error" not in out
    roles = [m["role"] for m in out["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "tool", "assistant"]
    first = out["messages"][1]
    assert first["content"] == "" and first["finish_reason"] == "tool_calls"
    assert [c["id"] for c in first["tool_calls"]] == ["call_1_0", "call_1_1"]
    assert [c["id"] for c in out["messages"][4]["tool_calls"]] == ["call_2_0", "call_2_1"]
    assert out["messages"][2] == {"role": "tool", "tool_call_id": "call_1_0", "content": "found k"}
    assert out["messages"][3]["content"] == "found j"
    assert len(tool.calls) == 4 and len(api.requests) == 3
    assert api.requests[0][0]["tools"][0]["function"]["name"] == "lookup"  # the manager's schemas
    assert api.requests[0][1] == {}  # no extra_body when empty


def test_server_given_ids_are_kept():
    (out,), _, _ = run(calls_then_answer(1, [call(id="srv_1")]), [user()])
    assert out["messages"][2]["tool_call_id"] == "srv_1"


@pytest.mark.parametrize(
    "reply, stop_reason",
    [
        ({"role": "assistant", "content": "cut", "tool_calls": [call()], "finish_reason": "length"}, "length"),
        ({"role": "assistant", "content": "cut", "finish_reason": "length"}, "length"),
        ({"role": "assistant", "content": "bye", "finish_reason": "stop"}, "stop"),
        ({"role": "assistant", "content": "bye", "tool_calls": "", "finish_reason": "stop"}, "stop"),
    ],
)
def test_first_turn_stop_reasons(reply, stop_reason):
    (out,), _, tool = run(lambda messages: reply, [user()])
    assert (out["stop_reason"], out["turns"], out["truncated"]) == (stop_reason, 1, stop_reason != "stop")
    assert tool.calls == []  # a length-cut turn's calls are never run


def test_max_turns_does_not_run_the_last_calls():
    (out,), _, tool = run(calls_then_answer(99), [user()], max_turns=2)
    assert (out["stop_reason"], out["turns"], out["truncated"]) == ("max_turns", 2, True)
    assert len(tool.calls) == 1 and out["messages"][-1]["role"] == "assistant"


def test_api_failure_is_isolated_to_its_trajectory():
    def script(messages):
        if "fail" in messages[0]["content"] and assistant_turns(messages) == 1:
            return ConnectionError("server went away")
        return calls_then_answer(1)(messages)

    outs, _, _ = run(script, [user("ok"), user("fail"), user("ok too")])
    assert [o["stop_reason"] for o in outs] == ["stop", "api_error", "stop"]
    failed = outs[1]
    assert failed["turns"] == 1 and failed["truncated"] and failed["error"] == "ConnectionError: server went away"
    assert failed["messages"][-1]["role"] == "tool"


def test_failing_first_call_reports_zero_turns():
    (out,), _, _ = run(lambda m: RuntimeError("boom"), [user()])
    assert (out["stop_reason"], out["turns"], out["error"]) == ("api_error", 0, "RuntimeError: boom")


def test_a_raising_manager_ends_the_trajectory_with_tool_execution_error():
    class Broken(ToolManager):
        def __call__(self, tool_call):
            raise RuntimeError("manager down")

    (out,), _, _ = run(calls_then_answer(1), [user()], manager=Broken())
    assert out["stop_reason"] == "api_error" and out["error"] == "ToolExecution RuntimeError: manager down"


def test_hung_tool_times_out_and_the_rollout_goes_on():
    release = threading.Event()

    class Hang(Counting):
        def __call__(self, tool_name, arguments):
            release.wait(10)
            return "late"

    (out,), _, _ = run(calls_then_answer(1), [user()], manager=ToolManager([Hang()], timeout_s=0.2))
    release.set()
    assert out["stop_reason"] == "stop"
    assert out["messages"][2]["content"] == "Error: tool 'lookup' timed out after 0.2s."


def test_environment_done_ends_the_trajectory_with_stop():
    class Finishing(Env):
        def step(self, tool_name, arguments):
            return StepResult("solved", 1.0, done=True)

    manager = ToolManager(EnvTool.from_env(Finishing()))
    (out,), api, _ = run(calls_then_answer(5, [call("env_action")]), [user()], manager=manager)
    assert (out["stop_reason"], out["turns"], out["truncated"]) == ("stop", 1, False)
    assert out["messages"][-1] == {"role": "tool", "tool_call_id": "call_1_0", "content": "solved"}
    assert len(api.requests) == 1


def test_inputs_are_copied_order_kept_and_keys_pass_through():
    batch = [user(f"t{i}", id=i, user_data=[("k", "1")]) for i in range(6)]
    before = copy.deepcopy(batch)
    outs, _, _ = run(calls_then_answer(1), batch)
    assert batch == before
    assert [o["id"] for o in outs] == list(range(6)) and all(o["user_data"] == [("k", "1")] for o in outs)
    assert [o["messages"][0]["content"] for o in outs] == [f"t{i}" for i in range(6)]


def test_batch_shape_checks():
    rollout = APIMultiTurnRollout(ScriptAPI(calls_then_answer(0)), ToolManager())
    assert rollout([]) == []
    with pytest.raises(TypeError, match="single dict"):
        rollout(user())
    with pytest.raises(TypeError, match="trajectory 1 must be a dict"):
        rollout([user(), "text"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tool_manager": None}, "tool_manager"),
        ({"concurrency": 0}, "concurrency"),
        ({"max_turns": 0}, "max_turns"),
        ({"sampling_params": SamplingParams(num_samples=2)}, "num_samples"),
        ({"extra_body": "x"}, "extra_body"),
    ],
)
def test_constructor_checks(kwargs, match):
    arguments = {"api": ScriptAPI(calls_then_answer(0)), "tool_manager": ToolManager(), **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        APIMultiTurnRollout(**arguments)


def test_per_call_managers_list_and_factory():
    api = ScriptAPI(calls_then_answer(1))
    a, b = Counting(), Counting()
    rollout = APIMultiTurnRollout(api, ToolManager([Counting()]))
    rollout([user(), user()], tool_manager=[ToolManager([a]), ToolManager([b])])
    assert len(a.calls) == len(b.calls) == 1
    with pytest.raises(ValueError, match="2 entries for 3 trajectories"):
        rollout([user()] * 3, tool_manager=[ToolManager([a]), ToolManager([b])])

    built, closed = [], []

    class Owned(Counting):
        def close(self):
            closed.append(self)

    def factory(trajectory):
        tool = Owned()
        built.append(tool)
        return ToolManager([tool])

    outs = rollout([user(), user(), user()], tool_manager=factory)
    assert all(o["stop_reason"] == "stop" for o in outs)
    assert len(built) == 3 and all(len(t.calls) == 1 for t in built) and sorted(map(id, closed)) == sorted(map(id, built))

    def broken_factory(trajectory):
        raise OSError("no env")

    (out,) = rollout([user()], tool_manager=broken_factory)
    assert out["stop_reason"] == "api_error" and out["error"] == "ToolManager OSError: no env"


def test_trajectory_tools_win_and_extra_body_merges():
    api = ScriptAPI(calls_then_answer(0))
    rollout = APIMultiTurnRollout(api, ToolManager([Counting()]), extra_body={"a": 1, "b": 1})
    own = [{"type": "function", "function": {"name": "mine"}}]
    rollout([user(tools=own)], extra_body={"b": 2})
    request, kwargs = api.requests[0]
    assert request["tools"] == own and kwargs == {"extra_body": {"a": 1, "b": 2}}
    APIMultiTurnRollout(api, ToolManager())([user()])
    assert "tools" not in api.requests[-1][0]


def test_concurrency_bounds_api_calls_and_tools_run_off_the_loop():
    outs, api, tool = run(calls_then_answer(2), [user(f"t{i}") for i in range(30)], concurrency=4, tool_concurrency=4)
    assert all(o["stop_reason"] == "stop" for o in outs)
    assert api.max_in_flight == 4
    assert tool.max_active > 1  # sync tools ran in parallel on the pool, not on the event loop


@pytest.mark.parametrize("tool_concurrency, order", [
    (0, ["a", "a", "a", "b", "b", "b"]),  # tools on the loop: a keeps its slot from call to call
    (2, ["a", "b", "a", "b", "a", "b"]),  # tools on the pool: the slot serves b while a's tools run
])
def test_api_slot_is_kept_across_turns_on_the_loop_and_lent_during_pool_tools(tool_concurrency, order):
    outs, api, _ = run(calls_then_answer(2), [user("a"), user("b")], concurrency=1, tool_concurrency=tool_concurrency)
    assert all(o["stop_reason"] == "stop" for o in outs)
    assert [request["messages"][0]["content"] for request, _ in api.requests] == order
    assert api.max_in_flight == 1


def test_first_calls_go_out_before_the_rest_of_the_batch_is_set_up_and_cancel_leaves_no_task():
    class Watching(ScriptAPI):
        async def acall(self, trajectory, sampling_params=None, **kwargs):
            if not self.requests:  # the first call of the batch: which tasks exist now?
                self.tasks_at_first_call = len(asyncio.all_tasks())
            return await super().acall(trajectory, sampling_params, **kwargs)

    api = Watching(calls_then_answer(1))
    rollout = APIMultiTurnRollout(api, ToolManager([Counting()]), concurrency=3, tool_concurrency=0)

    async def cancelled_midway():
        batch = asyncio.ensure_future(rollout.arun([user(f"t{i}") for i in range(40)]))
        while len(api.requests) < 5:
            await asyncio.sleep(0.001)
        batch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await batch
        return asyncio.all_tasks() - {asyncio.current_task()}

    left = asyncio.run(cancelled_midway())
    assert api.tasks_at_first_call <= 1 + 1 + 3  # main, arun, the first `concurrency` trajectories
    assert left == set() and api.in_flight == 0


def test_tool_threads_are_kept_between_calls_and_close_stops_them():
    tool = Counting()
    rollout = APIMultiTurnRollout(ScriptAPI(calls_then_answer(1)), ToolManager([tool]), tool_concurrency=2)
    rollout([user(f"a{i}") for i in range(6)])
    pool = rollout._pool
    rollout([user(f"b{i}") for i in range(6)])
    assert rollout._pool is pool  # the second batch ran on the same threads
    threads = list(pool._threads)
    assert threads and all(t.name.startswith("api-rollout-tool") and t.is_alive() for t in threads)
    rollout.close()
    assert rollout._pool is None and not any(t.is_alive() for t in threads)
    assert all(o["stop_reason"] == "stop" for o in rollout([user("again")]))  # a later call starts new ones
    rollout.close()


def test_works_inside_a_running_event_loop():
    rollout = APIMultiTurnRollout(ScriptAPI(calls_then_answer(1)), ToolManager([Counting()]))

    async def main():
        inside = rollout([user()])  # blocking call from async code: runs on a private loop thread
        awaited = await rollout.arun([user()])
        return inside, awaited

    inside, awaited = asyncio.run(main())
    assert inside[0]["stop_reason"] == awaited[0]["stop_reason"] == "stop"


def test_traces_names_content_and_callbacks(tmp_path):
    def success(trajectory):
        if trajectory["messages"][0]["content"] == "explode":
            raise ValueError("broken callback")
        return trajectory["stop_reason"] == "stop"

    trace_dir = tmp_path / "traces"
    rollout = APIMultiTurnRollout(
        ScriptAPI(calls_then_answer(1)), ToolManager([Counting()]), trace_dir=trace_dir,
        trace_callback=lambda t: t["messages"][0]["content"] != "skip", success_callback=success,
    )
    assert trace_dir.is_dir()  # created eagerly
    batch = [
        user("a", user_data=[("id", json.dumps("hotpotqa/42")), ("ground_truth", json.dumps("Paris"))]),
        user("b", user_data={"prompt_id": "p" * 80}, input_ids=[1, 2], logprobs=[-0.1]),
        user("explode", id="x"),
        user("skip", id="s"),
        user("dup", id="x"),
    ]
    rollout(batch, global_step=42)
    names = sorted(p.name for p in trace_dir.iterdir())
    assert names == sorted(["step000042-ok-hotpotqa_42.json", f"step000042-ok-{'p' * 64}.json",
                            "step000042-fail-x.json", "step000042-ok-x.json"])
    record = json.loads((trace_dir / "step000042-ok-hotpotqa_42.json").read_text())
    assert record["ground_truth"] == "Paris" and record["success"] is True and record["turns"] == 2
    assert record["stop_reason"] == "stop" and record["truncated"] is False and record["error"] is None
    heavy = json.loads((trace_dir / f"step000042-ok-{'p' * 64}.json").read_text())
    assert "input_ids" not in heavy and "logprobs" not in heavy
    rollout([user("no step", id="n")])
    assert (trace_dir / "ok-n.json").exists()


def test_remote_class_keeps_the_class_local():
    assert hasattr(APIMultiTurnRollout, "remote") and hasattr(APIMultiTurnRollout, "options")
    local = APIMultiTurnRollout(ScriptAPI(calls_then_answer(0)), ToolManager())
    assert type(local) is APIMultiTurnRollout
