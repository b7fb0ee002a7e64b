"""Seeded tool latency (``twinkle_agentic.demo.latency``): the spec, the distributions' quantiles, a
delay fixed by the seed and the call, a real sleep before the tool's answer, and the delays recomputed
from a trajectory's messages. In process; the example's test runs it on Serve."""

from __future__ import annotations

import math
import statistics
import time

import pytest

from twinkle_agentic.demo.latency import (
    LatencyError,
    LatentTool,
    ToolLatency,
    latent_demo_tools,
    trajectory_delays,
)
from twinkle_agentic.demo.tools import CalculatorTool
from twinkle_agentic.errors import ConfigError


def test_specs_parse_and_print_back():
    model = ToolLatency.parse("lognormal:median=0.3,sigma=1.0")
    assert (model.kind, dict(model.params), model.max_s) == ("lognormal", {"median": 0.3, "sigma": 1.0}, 30.0)
    assert ToolLatency.parse(str(model)) == model
    assert ToolLatency.parse("pareto: scale=0.1, alpha=1.5, max=5").max_s == 5.0
    assert ToolLatency.parse("fixed:seconds=0").quantile(0.9) == 0.0
    for none in (None, "", "none", "0"):
        assert ToolLatency.parse(none).kind is None and ToolLatency.parse(none).delay(0, "x", {}) == 0.0


@pytest.mark.parametrize(
    "spec, match",
    [
        ("gamma:k=1", "unknown latency kind 'gamma'"),
        ("lognormal:median=0.3", r"needs \['sigma'\]"),
        ("lognormal:median=0.3,sigma=one", "sigma='one' is not a number"),
        ("pareto:scale=0.1,alpha=1.5,beta=2", "'beta=2' is not one of"),
        ("lognormal:median=-1,sigma=1", "median must be a finite number > 0"),
        ("pareto:scale=0.1,alpha=0", "alpha must be a finite number > 0"),
        ("fixed:seconds", "is not one of"),
    ],
)
def test_bad_specs_name_the_problem(spec, match):
    with pytest.raises(LatencyError, match=match) as caught:
        ToolLatency.parse(spec)
    assert isinstance(caught.value, ConfigError)


def test_quantiles_follow_the_distributions_and_the_cap():
    lognormal = ToolLatency.parse("lognormal:median=0.3,sigma=1.0")
    assert lognormal.quantile(0.5) == pytest.approx(0.3)
    assert lognormal.quantile(0.99) / lognormal.quantile(0.5) == pytest.approx(math.exp(2.3263), rel=1e-3)
    pareto = ToolLatency.parse("pareto:scale=0.1,alpha=2")
    assert pareto.quantile(0.75) == pytest.approx(0.2)  # P(X > 0.2) = (0.1 / 0.2) ** 2
    assert ToolLatency.parse("pareto:scale=0.1,alpha=0.5,max=3").quantile(1 - 1e-12) == 3.0


def test_a_call_waits_by_its_seed_and_content_only():
    model = ToolLatency.parse("lognormal:median=0.3,sigma=1.0")
    calls = [("calculator", {"expression": f"{i} * 7"}) for i in range(2000)]
    first = [model.delay(0, name, args) for name, args in calls]
    again = {str(args): model.delay(0, name, dict(reversed(list(args.items())))) for name, args in reversed(calls)}
    assert first == [again[str(args)] for _, args in calls]  # order and key order do not matter
    other_seed = [model.delay(1, name, args) for name, args in calls]
    assert sum(a != b for a, b in zip(first, other_seed, strict=True)) > 1990
    assert statistics.median(first) == pytest.approx(0.3, rel=0.1)
    assert statistics.quantiles(first, n=100)[98] / statistics.median(first) > 7  # a heavy tail


def test_the_latent_tool_sleeps_then_answers_as_the_tool():
    tool = LatentTool(CalculatorTool(), ToolLatency.parse("fixed:seconds=0.2"), seed=3)
    start = time.perf_counter()
    assert tool("calculator", {"expression": "6 * 7"}) == "42"
    assert time.perf_counter() - start >= 0.2
    assert tool.tool_info() == CalculatorTool().tool_info()


def test_latent_demo_tools_build_as_a_tool_server_spec():
    from twinkle_agentic.deployments.tool_server import build_tools

    spec = {"import_path": "twinkle_agentic.demo.latency:latent_demo_tools",
            "kwargs": {"latency": "fixed:seconds=0.01", "seed": 0}}  # fmt: skip
    tools = build_tools([spec])
    assert [t.tool_info()["function"]["name"] for t in tools] == ["get_weather", "calculator"]
    assert all(isinstance(t, LatentTool) for t in tools)
    with pytest.raises(LatencyError):
        latent_demo_tools("lognormal:median=1")


def test_delays_recomputed_from_a_trajectorys_messages():
    model = ToolLatency.parse("lognormal:median=0.3,sigma=1.0")
    messages = [
        {"role": "user", "content": "What is 6 times 7?"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "calculator", "arguments": '{"expression": "6 * 7"}'}}]},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "tool_calls": [{"function": {"name": "calculator", "arguments": "{not json"}}]},
        {"role": "assistant", "content": "42"},
    ]
    assert trajectory_delays(messages, model, seed=5) == [model.delay(5, "calculator", {"expression": "6 * 7"}), 0.0]
