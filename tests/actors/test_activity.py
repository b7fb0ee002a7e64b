"""Worker time accounting: interval algebra, the recorder on a controlled clock, and the definition of
"engine idle waiting for tools" on timelines whose answer is known."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twinkle_agentic.actors.activity import (
    Activity,
    ActivityRecorder,
    account,
    intersect,
    length,
    merge,
    subtract,
)


def test_merge_joins_overlapping_and_touching_intervals_and_drops_empty_ones():
    assert merge([(5, 6), (0, 2), (1, 3), (3, 4), (7, 7)]) == [(0, 4), (5, 6)]


def test_intersect_and_subtract():
    a = [(0, 10)]
    b = [(2, 3), (5, 7), (9, 12)]
    assert intersect(a, b) == [(2, 3), (5, 7), (9, 10)]
    assert subtract(a, b) == [(0, 2), (3, 5), (7, 9)]
    assert subtract(b, a) == [(10, 12)]


intervals = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 50)).map(lambda t: (min(t), max(t))), max_size=12
)


@given(intervals, intervals)
def test_union_measures_add_up(a, b):
    # |A| = |A ∩ B| + |A − B|, and both parts lie inside A
    assert length(a) == pytest.approx(length(intersect(a, b)) + length(subtract(a, b)))
    assert length(intersect(a, b)) <= length(a) + 1e-9


def test_account_on_a_sync_turn_timeline():
    """active 0-10; the engine generates 0-4 and 6-8; tools run 4-6 (two overlapping calls) and 8-9."""
    report = account(active=[(0, 10)], engine=[(0, 4), (6, 8)], tool=[(4, 5.5), (4.5, 6), (8, 9)])
    assert report.active_s == 10
    assert report.engine_busy_s == 6
    assert report.tool_wait_s == 3  # 4-6 and 8-9: a tool outstanding, nothing generating
    assert report.other_s == 1  # 9-10: bookkeeping


def test_tool_calls_overlapping_generation_are_not_idle_time():
    """An asynchronous mode generates for one trajectory while another waits for its tool."""
    report = account(active=[(0, 10)], engine=[(0, 10)], tool=[(2, 8)])
    assert report.tool_wait_s == 0 and report.engine_busy_s == 10


def test_time_outside_batches_is_not_counted():
    report = account(active=[(0, 2), (5, 6)], engine=[(0, 6)], tool=[(1, 5.5)])
    assert report.active_s == 3 and report.engine_busy_s == 3 and report.tool_wait_s == 0


class Clock:
    def __init__(self):
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self):
        return self.now


def test_recorder_spans_tool_latency_and_settle_periods():
    clock = Clock()
    recorder = ActivityRecorder(clock=clock)
    with recorder.span("active"):
        with recorder.span("engine"):
            clock.now = 2.0
        clock.now = 2.5

        def slow_tool():
            clock.now = 4.0
            return "Paris: sunny, 24 C"

        assert recorder.tool_call("get_weather", slow_tool) == "Paris: sunny, 24 C"
        assert recorder.tool_call("calculator", lambda: "Error: division by zero.").startswith("Error")
        clock.now = 5.0
    report = recorder.settle()
    assert (report.active_s, report.engine_busy_s, report.tool_wait_s) == (5.0, 2.0, 1.5)
    assert [(c.tool, c.latency_s, c.ok) for c in report.tool_calls] == [("get_weather", 1.5, True), ("calculator", 0.0, False)]
    assert recorder.settle() == Activity()  # nothing new since


def test_settle_splits_open_intervals_between_reports_without_double_counting():
    clock = Clock()
    recorder = ActivityRecorder(clock=clock)
    with recorder.span("active"), recorder.span("engine"):
        clock.now = 3.0
        first = recorder.settle()  # mid-generation, e.g. another batch finished meanwhile
        clock.now = 5.0
    second = recorder.settle()
    assert (first.active_s, first.engine_busy_s) == (3.0, 3.0)
    assert (second.active_s, second.engine_busy_s) == (2.0, 2.0)
    assert (first + second).active_s == 5.0


def test_a_tool_that_raises_is_recorded_as_failed_and_the_error_propagates():
    recorder = ActivityRecorder()

    def broken():
        raise ConnectionError("gone")

    with pytest.raises(ConnectionError):
        recorder.tool_call("guess_number.reset", broken)
    (call,) = recorder.settle().tool_calls
    assert call.tool == "guess_number.reset" and not call.ok


def test_unknown_span_kind_is_refused():
    with pytest.raises(ValueError, match="unknown activity kind"), ActivityRecorder().span("tools"):
        pass
