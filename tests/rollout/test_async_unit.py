"""AsyncMultiTurnRollout's scheduling, tool limits and failure policy with a scripted async sampler (no
engine). The tiny model's real tokenizer and template are used, so the bookkeeping is the real one.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.support.async_fakes import AsyncScriptedSampler, wait_for_the_others
from tests.support.scripted_sampler import ScriptedSampler, call_text
from tests.support.trajectory_checks import assert_trajectory_tokens
from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.rollout.async_multi_turn import AsyncMultiTurnRollout
from twinkle_agentic.rollout.failure_policy import FailurePolicy, FailurePolicyError, OutcomeBook
from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
from twinkle_agentic.rollout.tool_scheduler import ThreadRunner, ToolLimitError, ToolLimits
from twinkle_agentic.tools.base import Tool
from twinkle_agentic.tools.tool_manager import ToolManager

WEATHER = {
    city: call_text("get_weather", f'{{"city": "{city}"}}') for city in ("Paris", "Oslo", "Lima", "Rome")
}
SCRIPT = {
    **{city: [WEATHER[city], f"Here is the weather in {city}."] for city in WEATHER},
    "2 + 3": [call_text("calculator", '{"expression": "2 + 3"}'), "The answer is 5."],
    "Hello": ["Hello! I can check the weather or do math for you."],
    "Both": [f"Checking both.\n{WEATHER['Paris']}\n{WEATHER['Oslo']}", "Done."],
    "Loop": [WEATHER["Rome"]] * 8,
    "Hang": [call_text("hang", "{}"), "The tool did not answer."],
    "Boom": [call_text("boom", "{}"), "The tool failed."],
}
FINISHED_KEYS = (
    "input_ids",
    "labels",
    "logprobs",
    "messages",
    "stop_reason",
    "truncated",
    "turns",
    "token_drift",
)


def traj(text: str, **extra):
    return {"messages": [{"role": "user", "content": text}], **extra}


def async_rollout(template, manager, *, delays=None, fail=None, error=RuntimeError, sampler_kw=None, **kw):
    sampler = AsyncScriptedSampler(
        ScriptedSampler(template, SCRIPT, **(sampler_kw or {})), dict(delays or {}), dict(fail or {}), error
    )
    return AsyncMultiTurnRollout(sampler, template, tool_manager=manager, **kw), sampler


class NamedTool(Tool):
    """A tool whose behaviour is a plain function (sleeps, hangs, raises...)."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __call__(self, tool_name, arguments):
        return self.fn(arguments)

    def tool_info(self):
        return {
            "type": "function",
            "function": {"name": self.name, "description": "test", "parameters": {"type": "object"}},
        }


@pytest.fixture
def manager():
    return ToolManager(demo_tools())


# -- same bookkeeping as the turn-synchronous rollout ---------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"max_turns": 1},
        {"max_turns": 3},
        {"sampling_params": SamplingParams(max_tokens=5)},
        {"max_trajectory_tokens": 150},
        {"sampler_kw": {"end_with_eot": False}},
        {"sampler_kw": {"with_logprobs": False}},
        {"sampler_kw": {"logprob_pairs": True}},
    ],
    ids=["default", "max_turns_1", "max_turns_3", "max_tokens_5", "budget", "no_eot", "no_logprobs", "pairs"],
)
def test_outputs_equal_the_turn_synchronous_rollout(tiny_template, manager, settings):
    settings = dict(settings)
    sampler_kw = settings.pop("sampler_kw", {})
    inputs = [
        traj(t) for t in ("Weather in Paris?", "What is 2 + 3?", "Hello", "Both please", "Loop forever")
    ]
    sync = MultiTurnRollout(
        ScriptedSampler(tiny_template, SCRIPT, **sampler_kw), tiny_template, tool_manager=manager, **settings
    )
    ro, _ = async_rollout(tiny_template, manager, sampler_kw=sampler_kw, **settings)
    expected, got = sync(inputs), ro(inputs)
    assert got == expected  # every key, every token, every logprob
    assert {t["stop_reason"] for t in got} <= {"stop", "length", "max_turns"}
    for out in got:
        if out["logprobs"] is not None and out["stop_reason"] != "length":
            assert_trajectory_tokens(out, tiny_template, n_input_messages=1)


def test_trajectories_advance_without_a_turn_barrier(tiny_template):
    """A slow tool call of one trajectory holds back none of the others: the Paris lookup answers only
    once the three others have ended (their managers closed), and the recorded timestamps agree."""
    inputs = [
        traj("Weather in Paris?"),
        traj("Weather in Oslo?"),
        traj("Weather in Lima?"),
        traj("Weather in Rome?"),
    ]
    factory, weather = wait_for_the_others("Paris", inputs)
    ro, _ = async_rollout(tiny_template, factory, delays={"Lima": 0.01, "Rome": 0.02})
    results, stats = ro.run_with_stats(inputs)
    assert weather.waits == [True]
    assert [r["stop_reason"] for r in results] == ["stop"] * 4 and [r["turns"] for r in results] == [2] * 4
    assert stats.completion_order[-1] == 0  # Paris finished last
    paris_tool_end = stats.final_timing(0).tool_turns[0][1]
    for index in (1, 2, 3):
        timing = stats.final_timing(index)
        assert timing.generations[1][0] < paris_tool_end  # its next turn was submitted meanwhile
        assert timing.finished_s < paris_tool_end
    assert stats.final_timing(0).generations[1][0] >= paris_tool_end


class ConcurrencyProbe:
    """A slow tool body that records how many of its calls ran at once (``peak``)."""

    def __init__(self, seconds: float):
        self.seconds, self.lock, self.active, self.peak = seconds, threading.Lock(), 0, 0

    def __call__(self, arguments):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        time.sleep(self.seconds)
        with self.lock:
            self.active -= 1
        return "done"


def test_per_tool_concurrency_limit_and_defaults(tiny_template):
    probe = ConcurrencyProbe(0.05)
    manager = ToolManager(
        [NamedTool("get_weather", probe)]
        + [t for t in demo_tools() if t.tool_info()["function"]["name"] == "calculator"]
    )
    ro, _ = async_rollout(tiny_template, manager, tool_limits={"get_weather": {"max_concurrency": 2}})
    inputs = [traj(f"Weather in {c}?") for c in ("Paris", "Oslo", "Lima", "Rome")] * 2 + [
        traj("What is 2 + 3?")
    ]
    results, stats = ro.run_with_stats(inputs)
    assert all(r["stop_reason"] == "stop" for r in results)
    assert probe.peak == 2 and stats.tools.tools["get_weather"].max_in_flight == 2
    assert stats.tools.tools["get_weather"].calls == 8 and stats.tools.tools["calculator"].calls == 1
    assert ro.tool_limits.of("get_weather").timeout_s == 60.0  # missing keys take the default's values


def test_hung_and_failing_tools_answer_errors_and_never_stall_the_batch(tiny_template):
    release = threading.Event()

    def boom(arguments):
        raise ValueError("kaputt")

    tools = [NamedTool("hang", lambda a: release.wait(30) and "late"), NamedTool("boom", boom)]
    manager = ToolManager(list(demo_tools()) + tools)
    ro, _ = async_rollout(tiny_template, manager, tool_limits={"hang": {"timeout_s": 0.2}})
    try:
        results, stats = ro.run_with_stats([traj("Hang on"), traj("Boom now"), traj("Weather in Paris?")])
    finally:
        release.set()
    hang, boom, paris = results
    assert hang["messages"][2]["content"] == "Error: tool 'hang' timed out after 0.2s."
    assert (
        boom["messages"][2]["content"] == "Error: tool 'boom' raised ValueError: kaputt"
    )  # ToolManager's answer
    assert paris["messages"][2]["content"] == "Paris: sunny, 24 C"
    assert [r["stop_reason"] for r in results] == ["stop"] * 3 and [r["turns"] for r in results] == [2] * 3
    assert stats.tools.tools["hang"].timeouts == 1 and stats.tools.abandoned == 1
    assert stats.metrics()["tool_errors"] == 2


def test_a_manager_that_raises_answers_an_error_message(tiny_template):
    class Raising(ToolManager):
        def __call__(self, tool_call):
            raise ConnectionError("tool server gone")

    ro, _ = async_rollout(tiny_template, Raising(demo_tools()))
    [out] = ro([traj("Weather in Paris?")])
    assert (
        out["messages"][2]["content"] == "Error: tool 'get_weather' raised ConnectionError: tool server gone"
    )
    assert out["stop_reason"] == "stop"


def test_async_tools_are_cancelled_for_real_on_timeout(tiny_template):
    events = []

    class AsyncManager(ToolManager):
        async def acall(self, tool_call):
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                events.append("cancelled")
                raise

    ro, _ = async_rollout(tiny_template, AsyncManager(demo_tools()), default_tool_limit={"timeout_s": 0.1})
    results, stats = ro.run_with_stats([traj("Weather in Paris?"), traj("Hello")])
    assert results[0]["messages"][2]["content"] == "Error: tool 'get_weather' timed out after 0.1s."
    assert events == ["cancelled"] and stats.tools.abandoned == 0


def test_parallel_tool_calls_keep_call_order(tiny_template):
    def weather(arguments):
        time.sleep(0.2 if arguments["city"] == "Paris" else 0.0)
        return arguments["city"]

    ro, _ = async_rollout(
        tiny_template, ToolManager([NamedTool("get_weather", weather)]), parallel_tool_calls=True
    )
    results, stats = ro.run_with_stats([traj("Both please")])
    assert [m["content"] for m in results[0]["messages"] if m["role"] == "tool"] == ["Paris", "Oslo"]
    assert stats.tools.tools["get_weather"].max_in_flight == 2


def test_tool_threads_are_reused_a_hung_one_is_replaced_idle_ones_exit():
    def alive():
        return [t for t in threading.enumerate() if t.name == "probe-tool"]

    async def scenario():
        runner = ThreadRunner(workers=1, name="probe-tool", idle_s=0.2)
        first = [await runner.run(threading.get_ident) for _ in range(3)]
        release = threading.Event()
        with pytest.raises(TimeoutError):  # the only slot is freed at once; its thread stays busy
            await runner.run(lambda: release.wait(10), timeout_s=0.05)
        after_hang = await runner.run(threading.get_ident)
        busy = len(alive())
        release.set()
        for _ in range(100):  # idle threads exit after idle_s
            if not alive():
                break
            await asyncio.sleep(0.05)
        return first, after_hang, busy, runner.threads_started

    first, after_hang, busy, started = asyncio.run(scenario())
    assert len(set(first)) == 1 and after_hang != first[0] and busy == 2 and started == 2 and alive() == []


# -- failure policy ----------------------------------------------------------------------------------------


def test_failures_are_kept_by_default_like_the_sync_rollout(tiny_template, manager):
    ro, _ = async_rollout(tiny_template, manager, fail={"Paris": 1})
    results, stats = ro.run_with_stats([traj("Weather in Paris?"), traj("Hello")])
    assert [r["stop_reason"] for r in results] == ["error", "stop"]
    assert (
        results[0]["error"] == "RuntimeError: injected sampler failure for 'Paris'"
        and results[0]["turns"] == 0
    )
    assert stats.failures.failed == [0] and stats.attempts == [1, 1]


def test_retry_reruns_a_failed_trajectory_from_its_input(tiny_template, manager):
    ro, sampler = async_rollout(tiny_template, manager, fail={"Paris": 2}, failure_policy={"max_retries": 2})
    reference, _ = async_rollout(tiny_template, manager)
    inputs = [traj("Weather in Paris?"), traj("Hello")]
    results, stats = ro.run_with_stats(inputs)
    assert results == reference(inputs)
    assert (
        stats.attempts == [3, 1] and stats.failures.counts()["retries"] == 2 and stats.failures.recovered == 1
    )
    assert [t.attempt for t in stats.timings if t.index == 0] == [1, 2, 3]


def test_retry_opens_a_fresh_tool_manager_per_attempt(tiny_template):
    opened = []

    def factory(trajectory):
        opened.append(trajectory["messages"][0]["content"])
        if len(opened) == 1:
            raise ConnectionError("env server busy")
        return ToolManager(demo_tools())

    ro, _ = async_rollout(tiny_template, factory, failure_policy=FailurePolicy(max_retries=1))
    results, stats = ro.run_with_stats([traj("Weather in Paris?")])
    assert results[0]["stop_reason"] == "stop" and opened == ["Weather in Paris?"] * 2
    assert stats.failures.recovered == 1


def test_drop_leaves_failures_out_and_reports_them(tiny_template, manager):
    ro, _ = async_rollout(
        tiny_template, manager, fail={"Oslo": 9}, failure_policy={"max_retries": 1, "on_failure": "drop"}
    )
    results, stats = ro.run_with_stats([traj("Weather in Paris?"), traj("Weather in Oslo?"), traj("Hello")])
    assert [r["messages"][0]["content"] for r in results] == ["Weather in Paris?", "Hello"]
    [(index, dropped)] = stats.failures.dropped
    assert index == 1 and dropped["stop_reason"] == "error" and stats.attempts[1] == 2


def test_replace_returns_the_first_n_successes_in_input_order(tiny_template, manager):
    policy = FailurePolicy(on_failure="replace", oversample=2)
    ro, _ = async_rollout(
        tiny_template, manager, fail={"Oslo": 9}, delays={"Lima": 30}, failure_policy=policy
    )
    inputs = [
        traj("Weather in Paris?"),
        traj("Weather in Oslo?"),
        traj("Hello"),
        traj("What is 2 + 3?"),
        traj("Weather in Lima?"),
    ]
    results, stats = ro.run_with_stats(inputs)
    assert [r["messages"][0]["content"] for r in results] == ["Weather in Paris?", "Hello", "What is 2 + 3?"]
    assert stats.failures.failed == [1] and stats.failures.spares_used == 1
    assert stats.failures.cancelled == [4]  # the last spare could no longer be chosen


def test_replace_cancels_spares_once_they_cannot_be_chosen(tiny_template, manager):
    policy = {"on_failure": "replace", "oversample": 1}
    ro, sampler = async_rollout(tiny_template, manager, delays={"Lima": 30}, failure_policy=policy)
    results, stats = ro.run_with_stats([traj("Weather in Paris?"), traj("Hello"), traj("Weather in Lima?")])
    assert len(results) == 2 and stats.failures.cancelled == [2]
    assert sampler.cancelled == ["Lima"] and stats.final_timing(2).cancelled
    assert sorted(stats.completion_order) == [0, 1]


def test_replace_tops_up_with_the_earliest_failures_when_too_few_succeed(tiny_template, manager):
    ro, _ = async_rollout(
        tiny_template,
        manager,
        fail={"Paris": 9, "Oslo": 9},
        failure_policy={"on_failure": "replace", "oversample": 1},
    )
    results, stats = ro.run_with_stats([traj("Weather in Paris?"), traj("Weather in Oslo?"), traj("Hello")])
    assert [r["stop_reason"] for r in results] == ["error", "stop"] and stats.failures.shortfall == 1


@pytest.mark.parametrize(
    "events, policy, expected, report",
    [
        # events: (index, failed?) in completion order; expected: returned indices
        ([(1, False), (0, True), (0, False)], {"max_retries": 1}, [0, 1], {"retries": 1, "recovered": 1}),
        ([(0, True), (1, False)], {}, [0, 1], {"failed": 1}),
        ([(0, True), (1, False)], {"on_failure": "drop"}, [1], {"failed": 1, "dropped": 1}),
        (
            [(2, False), (0, True), (1, False), (3, False)],
            {"on_failure": "replace", "oversample": 2},
            [1, 2],
            {"failed": 1, "spares_used": 1},
        ),
        (
            [(0, True), (1, True), (2, False)],
            {"on_failure": "replace", "oversample": 1},
            [0, 2],
            {"failed": 2, "spares_used": 1, "shortfall": 1},
        ),
    ],
)
def test_outcome_book(events, policy, expected, report):
    book = OutcomeBook(FailurePolicy.parse(policy), 1 + max(i for i, _ in events))
    for index, failed in events:
        book.settle(index, {"id": index, "stop_reason": "error" if failed else "stop"})
    assert [t["id"] for t in book.results()] == expected
    assert {k: v for k, v in book.report.counts().items() if v} == report


def test_outcome_book_cancels_only_what_cannot_be_chosen():
    book = OutcomeBook(FailurePolicy(on_failure="replace", oversample=2), 5)  # wants 3
    book.settle(0, {"stop_reason": "stop"})
    book.settle(2, {"stop_reason": "stop"})
    assert book.to_cancel([1, 3, 4]) == []  # 1 may still succeed and push 3 out, or fail and let 3 in
    book.settle(1, {"stop_reason": "stop"})
    assert book.to_cancel([3, 4]) == [3, 4]


@pytest.mark.parametrize(
    "value, message",
    [
        ("retry", "only 'keep' or 'drop'"),
        ({"on_failure": "replace"}, "needs oversample >= 1"),
        ({"oversample": 2}, "oversample needs on_failure='replace'"),
        ({"max_retries": -1}, "max_retries must be an integer >= 0"),
        ({"retries": 1}, "unknown key"),
        ({"failure_reasons": ["stop"]}, "failure_reasons must be"),
    ],
)
def test_bad_failure_policies_are_refused(value, message):
    with pytest.raises(FailurePolicyError, match=message):
        FailurePolicy.parse(value)


def test_replace_needs_more_inputs_than_spares(tiny_template, manager):
    ro, _ = async_rollout(tiny_template, manager, failure_policy={"on_failure": "replace", "oversample": 2})
    with pytest.raises(FailurePolicyError, match="needs more than 2 trajectories"):
        ro([traj("Hello"), traj("Hello")])


@pytest.mark.parametrize(
    "limits, message",
    [
        ({"x": {"max_concurrency": 0}}, "tool_limits\\['x'\\]: max_concurrency"),
        ({"x": {"timeout_s": -1}}, "timeout_s must be"),
        ({"x": {"timeout": 1}}, "unknown key"),
        ({"x": 5}, "must be a mapping"),
    ],
)
def test_bad_tool_limits_are_refused(limits, message):
    with pytest.raises(ToolLimitError, match=message):
        ToolLimits.parse(limits)


# -- engine failures, samplers, threads ---------------------------------------------------------------------


class EngineDeadError(RuntimeError):
    """Named like vLLM's: the engine is gone."""


def test_a_dead_engine_aborts_the_call_and_cancels_the_rest(tiny_template, manager):
    ro, sampler = async_rollout(
        tiny_template, manager, fail={"Paris": 1}, error=EngineDeadError, delays={"Paris": 0.05, "Oslo": 30}
    )
    with pytest.raises(EngineDeadError):
        ro([traj("Weather in Paris?"), traj("Weather in Oslo?")])
    assert sampler.cancelled == ["Oslo"]


def test_a_sampler_without_async_generate_is_refused(tiny_template):
    with pytest.raises(TypeError, match="needs a sampler with a coroutine generate"):
        AsyncMultiTurnRollout(ScriptedSampler(tiny_template, SCRIPT), tiny_template)


def test_concurrent_calls_share_the_tool_limits(tiny_template):
    probe = ConcurrencyProbe(0.03)
    ro, _ = async_rollout(
        tiny_template,
        ToolManager([NamedTool("get_weather", probe)]),
        tool_limits={"get_weather": {"max_concurrency": 1}},
    )
    outputs = []
    threads = [
        threading.Thread(
            target=lambda: outputs.append(ro([traj("Weather in Paris?"), traj("Weather in Oslo?")]))
        )
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(outputs) == 3 and probe.peak == 1
    assert all(r["stop_reason"] == "stop" for out in outputs for r in out)
    ro.close()


def test_arun_on_the_callers_loop_and_traces(tiny_template, manager, tmp_path):
    ro, _ = async_rollout(
        tiny_template, manager, trace_dir=tmp_path, success_callback=lambda t: t["stop_reason"] == "stop"
    )
    results = asyncio.run(
        ro.arun([traj("Weather in Paris?", user_data=[("id", '"w1"')]), traj("Hello")], global_step=3)
    )
    assert [r["stop_reason"] for r in results] == ["stop", "stop"]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 2 and "step000003-ok-w1.json" in names  # the other has no id: epoch ms and index
    assert asyncio.run(ro.arun([])) == []
    with pytest.raises(TypeError, match="single dict"):
        ro(traj("Hello"))


def test_ray_actors_sampler_handle_and_remote_rollout(ray_local, tiny_template, manager):
    """The sampler as a Ray actor handle (``await handle.generate.remote(...)``), and the rollout itself
    as a ``@remote_class`` actor calling it."""
    actor = ray_local.remote(AsyncScriptedSampler).remote(ScriptedSampler(tiny_template, SCRIPT))
    inputs = [traj("Weather in Paris?"), traj("Hello")]
    try:
        ro = AsyncMultiTurnRollout(actor, tiny_template, tool_manager=manager)
        results = ro(inputs)
        assert [(r["stop_reason"], r["turns"]) for r in results] == [("stop", 2), ("stop", 1)]
        assert_trajectory_tokens(results[0], tiny_template, n_input_messages=1)
        remote = AsyncMultiTurnRollout.remote(sampler=actor, template=tiny_template, tool_manager=manager)
        assert ray_local.get(remote.__call__.remote(inputs)) == results
        stats = ray_local.get(remote.get_last_stats.remote())
        assert stats.requests == 3 and stats.tools.totals()["calls"] == 1
        ray_local.kill(remote)
    finally:
        ray_local.kill(actor)
