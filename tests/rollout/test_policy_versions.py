"""Policy versions through the token ledger and the rollouts: spans aligned with ``input_ids``, one per
turn or per update inside a turn, None where a sampler does not know, and every ending carries both keys.

Scripted samplers stamp the versions (no engine); the tiny model's tokenizer and template are real, so
the spans are checked against real bridges.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.async_fakes import AsyncScriptedSampler
from tests.support.scripted_sampler import ScriptedSampler, call_text
from tests.support.trajectory_checks import assert_trajectory_tokens
from twinkle_agentic.data_format import SampledSequence
from twinkle_agentic.demo.tools import demo_tools
from twinkle_agentic.protocol.base import API
from twinkle_agentic.rollout.api_multi_turn import APIMultiTurnRollout
from twinkle_agentic.rollout.async_multi_turn import AsyncMultiTurnRollout
from twinkle_agentic.rollout.bookkeeping import IGNORE_INDEX, TokenLedger, Turn, check_aligned
from twinkle_agentic.rollout.multi_turn import MultiTurnRollout
from twinkle_agentic.tools.tool_manager import ToolManager

WEATHER = call_text("get_weather", '{"city": "Paris"}')
SCRIPT = {
    "Paris": [WEATHER, "It is sunny and 24 C in Paris."],
    "Hello": ["Hello! I can check the weather or do math for you."],
}


def traj(text: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


def spans_of(feature: dict[str, Any]) -> list[tuple[int, int, int]]:
    return [(s["version"], s["start"], s["end"]) for s in feature["policy_versions"]]


# -- Turn / TokenLedger ------------------------------------------------------------------------------


def test_single_version_turns_give_one_span_per_turn_skipping_bridges():
    ledger = TokenLedger([1, 2, 3])
    ledger.append(Turn.of([4, 5], [-0.1, -0.2], [8, 9], policy_versions=[(0, 2)]))
    ledger.append(Turn.of([6, 7, 10], [-0.1] * 3, policy_versions=[(0, 3)]))
    feature = ledger.feature()
    # same version in two turns: two spans (one per turn), the bridge 8, 9 in none
    assert spans_of(feature) == [(0, 3, 5), (0, 7, 10)]
    assert feature["policy_version"] == 0
    check_aligned(feature, generated_tokens=5)


def test_an_update_inside_a_turn_splits_it_and_runs_of_one_version_merge():
    ledger = TokenLedger([1])
    ledger.append(Turn.of([2, 3, 4, 5, 6], None, [7], policy_versions=[(3, 2), (3, 1), (4, 0), (4, 2)]))
    ledger.append(Turn.of([8, 9], None, policy_versions=[(4, 1), (5, 1)]))
    feature = ledger.feature()
    assert spans_of(feature) == [(3, 1, 4), (4, 4, 6), (4, 7, 8), (5, 8, 9)]
    assert feature["policy_version"] == 5
    check_aligned(feature, generated_tokens=7)
    for span in feature["policy_versions"]:  # spans index input_ids
        assert all(feature["labels"][p] != IGNORE_INDEX for p in range(span["start"], span["end"]))


def test_an_unknown_turn_makes_the_spans_unknown():
    ledger = TokenLedger([1])
    ledger.append(Turn.of([2], None, [3], policy_versions=[(0, 1)]))
    ledger.append(Turn.of([4], None, [5]))  # this sampler did not say
    assert ledger.policy_versions() is None and ledger.policy_version() is None
    ledger.append(Turn.of([6], None, policy_versions=[(1, 1)]))
    # the last token's version is still known; the spans are not
    assert ledger.policy_versions() is None and ledger.policy_version() == 1
    check_aligned(ledger.feature())


def test_no_generated_token_has_no_version():
    assert (TokenLedger([1, 2]).policy_versions(), TokenLedger([1, 2]).policy_version()) == ([], None)
    ledger = TokenLedger([1])
    ledger.append(Turn.of([4], None, [5], policy_versions=[(2, 1)]))
    ledger.append(Turn.of([], [], policy_versions=[]))  # an empty generation after a bridge
    assert ledger.policy_version() == 2 and spans_of(ledger.feature()) == [(2, 1, 2)]


@pytest.mark.parametrize(
    "runs, message",
    [
        ([(0, 1)], "cover 1 tokens, but the sequence has 2"),
        ([(-1, 2)], "version must be an integer >= 0"),
        ([(True, 2)], "version must be an integer >= 0"),
        ([(0, 3), (1, -1)], "token count must be an integer >= 0"),
        ([(0,)], "not a \\(version, token_count\\) pair"),
        ("v0", "must be a list"),
    ],
)
def test_turn_refuses_runs_that_do_not_cover_its_tokens(runs, message):
    with pytest.raises(ValueError, match=message):
        Turn.of([1, 2], None, policy_versions=runs)


# -- check_aligned --------------------------------------------------------------------------------------


def aligned_feature() -> dict[str, Any]:
    ledger = TokenLedger([1, 2])
    ledger.append(Turn.of([3, 4], None, [5], policy_versions=[(0, 1), (1, 1)]))
    ledger.append(Turn.of([6], None, policy_versions=[(1, 1)]))
    return ledger.feature()  # spans (0, 2, 3), (1, 3, 4), (1, 5, 6); position 4 is the bridge


@pytest.mark.parametrize(
    "spans, last, message",
    [
        ([(0, 2, 3), (1, 3, 5), (1, 5, 6)], 1, "cover 4 positions but 3 tokens are trainable; they differ at positions \\[4\\]"),
        ([(0, 2, 3), (1, 5, 6)], 1, "cover 2 positions.*positions \\[3\\]"),
        ([(0, 2, 4), (1, 3, 4), (1, 5, 6)], 1, "overlaps or precedes"),
        ([(1, 5, 6), (0, 2, 4)], 1, "overlaps or precedes"),
        ([(0, 2, 2), (1, 3, 4), (1, 5, 6)], 1, "not \\{version, start < end\\}"),
        ([("0", 2, 3), (1, 3, 4), (1, 5, 6)], 1, "not \\{version, start < end\\}"),
        ([(0, 2, 3), (1, 3, 4), (1, 5, 10**12)], 1, "ends past input_ids \\(length 6\\)"),
        ([(0, 2, 3), (1, 3, 4), (1, 5, 6)], 0, "policy_version=0 but the last generated token's span has version 1"),
        ([], None, "cover 0 positions but 3 tokens are trainable"),
    ],
)
def test_check_aligned_catches_a_bad_span(spans, last, message):
    feature = aligned_feature()
    check_aligned(feature)
    feature["policy_versions"] = [{"version": v, "start": s, "end": e} for v, s, e in spans]
    feature["policy_version"] = last
    with pytest.raises(RuntimeError, match=message):
        check_aligned(feature)


def test_check_aligned_refuses_spans_that_are_no_list():
    with pytest.raises(RuntimeError, match="must be a list of spans or None, got dict"):
        check_aligned({**aligned_feature(), "policy_versions": {"version": 0, "start": 2, "end": 3}})


# -- the rollouts ---------------------------------------------------------------------------------------


def runs_for(spec: Any, count: int) -> list[tuple[int, int]] | None:
    """``spec`` per turn: None (unknown), a version, or ``(old, k, new)``: an update landed after k tokens."""
    if spec is None or isinstance(spec, int):
        return None if spec is None else [(spec, count)]
    old, k, new = spec
    return [(old, min(k, count)), (new, count - min(k, count))]


class VersionedSampler:
    """A ``ScriptedSampler`` whose n-th turn of every trajectory is stamped with ``specs[n]``."""

    def __init__(self, template: Any, specs: list[Any], **kw: Any):
        self.scripted = ScriptedSampler(template, SCRIPT, **kw)
        self.specs = specs

    def stamp(self, prompt_ids: list[int], seq: SampledSequence) -> SampledSequence:
        turn = self.scripted.template.decode(prompt_ids, skip_special_tokens=False).count("<|im_start|>assistant") - 1
        seq.policy_versions = runs_for(self.specs[turn], len(seq.tokens))
        return seq

    def sample(self, inputs: list[dict[str, Any]], sampling_params: Any = None) -> list[Any]:
        responses = self.scripted.sample(inputs, sampling_params)
        for item, response in zip(inputs, responses, strict=True):
            self.stamp(item["input_ids"], response.sequences[0])
        return responses


class AsyncVersionedSampler:
    def __init__(self, versioned: VersionedSampler):
        self.versioned = versioned
        self.inner = AsyncScriptedSampler(versioned.scripted)

    async def generate(self, prompt_ids: list[int], params: Any) -> Any:
        response = await self.inner.generate(prompt_ids, params)
        self.versioned.stamp(list(prompt_ids), response.sequences[0])
        return response


@pytest.fixture
def manager():
    return ToolManager(demo_tools())


def run_sync(template, manager, specs, inputs, **kw):
    sampler_kw = {k: kw.pop(k) for k in ("stop_reason",) if k in kw}
    return MultiTurnRollout(VersionedSampler(template, specs, **sampler_kw), template, tool_manager=manager, **kw)(inputs)


def run_async(template, manager, specs, inputs, **kw):
    sampler = AsyncVersionedSampler(VersionedSampler(template, specs))
    return AsyncMultiTurnRollout(sampler, template, tool_manager=manager, **kw)(inputs)


@pytest.mark.parametrize("run", [run_sync, run_async], ids=["sync", "async"])
def test_rollouts_record_one_span_per_turn_and_two_where_an_update_landed(tiny_template, manager, run):
    out = run(tiny_template, manager, [0, (0, 4, 1)], [traj("Weather in Paris?"), traj("Hello")])
    weather, hello = out
    assert_trajectory_tokens(weather, tiny_template, n_input_messages=1)
    trainable = [p for p, label in enumerate(weather["labels"]) if label != IGNORE_INDEX]
    first_turn = [p for p in trainable if p < weather["policy_versions"][1]["start"]]
    assert [s["version"] for s in weather["policy_versions"]] == [0, 0, 1]
    assert weather["policy_versions"][0] == {"version": 0, "start": first_turn[0], "end": first_turn[-1] + 1}
    assert weather["policy_versions"][1]["end"] - weather["policy_versions"][1]["start"] == 4
    assert weather["policy_versions"][2]["end"] == trainable[-1] + 1 and weather["policy_version"] == 1
    assert hello["policy_version"] == 0 and len(hello["policy_versions"]) == 1


@pytest.mark.parametrize("run", [run_sync, run_async], ids=["sync", "async"])
def test_a_sampler_without_versions_gives_none(tiny_template, manager, run):
    [out] = run(tiny_template, manager, [None, None], [traj("Weather in Paris?")])
    assert out["stop_reason"] == "stop" and (out["policy_version"], out["policy_versions"]) == (None, None)
    [mixed] = run(tiny_template, manager, [2, None], [traj("Weather in Paris?")])
    assert (mixed["policy_version"], mixed["policy_versions"]) == (None, None)


def test_every_ending_carries_both_keys(tiny_template, manager):
    [length] = run_sync(tiny_template, manager, [7, 7], [traj("Weather in Paris?")], sampling_params={"max_tokens": 5})
    assert length["stop_reason"] == "length"
    assert (length["policy_version"], spans_of(length)) == (7, [(7, len(length["input_ids"]) - 5, len(length["input_ids"]))])
    [error] = run_sync(tiny_template, manager, [3, 3], [traj("Weather in Paris?")], stop_reason="abort")
    assert error["stop_reason"] == "error" and error["policy_version"] == 3 and len(error["policy_versions"]) == 1
    [never] = run_sync(tiny_template, manager, [0], [traj("Weather in Paris?")], max_trajectory_tokens=8)
    assert (never["stop_reason"], never["policy_version"], never["policy_versions"]) == ("length", None, [])

    def failing_factory(trajectory):
        raise OSError("no tools today")

    [failed] = run_sync(tiny_template, failing_factory, [0], [traj("Weather in Paris?")])
    assert (failed["stop_reason"], failed["policy_version"], failed["policy_versions"]) == ("error", None, [])
    for out in (length, error, never, failed):
        check_aligned(out)


def test_the_rollout_refuses_a_sampler_whose_runs_miscount(tiny_template, manager):
    class Miscounting(VersionedSampler):
        def stamp(self, prompt_ids, seq):
            seq.policy_versions = [(0, len(seq.tokens) + 1)]
            return seq

    rollout = MultiTurnRollout(Miscounting(tiny_template, [0]), tiny_template, tool_manager=manager)
    with pytest.raises(RuntimeError, match="sampler response 0: policy_versions cover"):
        rollout([traj("Hello")])


def test_the_api_rollout_says_versions_are_unknown():
    class Answering(API):
        def __call__(self, trajectory, sampling_params=None, **kwargs):
            raise AssertionError("the rollout must use acall")

        async def acall(self, trajectory, sampling_params=None, **kwargs):
            await asyncio.sleep(0)
            return {"role": "assistant", "content": "hi", "finish_reason": "stop"}

    def broken(trajectory):
        raise OSError("no tools today")

    rollout = APIMultiTurnRollout(Answering(), [ToolManager(), broken])
    ok, failed = rollout([traj("a", policy_version=4, policy_versions=[]), traj("b")])
    assert (ok["stop_reason"], failed["stop_reason"]) == ("stop", "api_error")
    for out in (ok, failed):
        assert (out["policy_version"], out["policy_versions"]) == (None, None)
