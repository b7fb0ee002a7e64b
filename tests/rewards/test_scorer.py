"""``RewardScorer`` on plain functions: sync and async, weights, env components, and every way a
reward function can fail (raise, overrun its deadline, return a non-number), recorded per trajectory."""

from __future__ import annotations

import time

import pytest

from tests.support import reward_functions
from twinkle_agentic.rewards import RewardScorer, RewardSpec, score_trajectories

F = "tests.support.reward_functions:"


@pytest.fixture(autouse=True)
def release_hung_threads():
    reward_functions.RELEASE.clear()
    yield
    reward_functions.RELEASE.set()


@pytest.fixture
def scorer_of():
    made = []

    def make(*specs, **kwargs):
        made.append(RewardScorer(list(specs), **kwargs))
        return made[-1]

    yield make
    for scorer in made:
        scorer.close()


def traj(i: int = 0, answer: str = "abcd", **extra) -> dict:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]
    return {"trajectory_id": f"t{i}", "messages": messages, "stop_reason": "stop", **extra}


def test_weighted_sum_of_sync_and_async_functions(scorer_of):
    scorer = scorer_of(
        RewardSpec(F + "length_of_answer", weight=0.25), {"function": F + "async_half", "weight": -2.0, "name": "half"}
    )
    [t] = scorer.score([traj(answer="abcdefgh")])
    assert t["reward_components"] == {"length_of_answer": 8.0, "half": 0.5}
    assert t["reward"] == pytest.approx(0.25 * 8 - 2.0 * 0.5)
    assert t["reward_error"] is None and isinstance(t["reward"], float)


def test_env_episode_rewards_are_components_of_weight_one(scorer_of):
    scorer = scorer_of(RewardSpec(F + "async_half", weight=2.0))
    [t] = scorer.score([traj(env_rewards={"guess_number": 1.0, "maze": 0.25})])
    assert t["reward_components"] == {"async_half": 0.5, "env:guess_number": 1.0, "env:maze": 0.25}
    assert t["reward"] == pytest.approx(2.0 * 0.5 + 1.0 + 0.25)


def test_env_rewards_alone_are_scored_and_trajectories_with_nothing_to_score_are_left_alone(scorer_of):
    scorer = scorer_of()
    with_env, plain = scorer.score([traj(0, env_rewards={"guess_number": 0.0}), traj(1)])
    assert with_env["reward"] == 0.0 and with_env["reward_components"] == {"env:guess_number": 0.0}
    assert with_env["reward_error"] is None
    assert not {"reward", "reward_components", "reward_error"} & set(plain)


def test_a_raising_function_gives_a_reward_error_on_its_trajectory_only(scorer_of):
    scorer = scorer_of(F + "raises_on_odd", F + "async_half")
    results = scorer.score([traj(i, n=i) for i in range(4)])
    assert [t["reward"] for t in results] == [1.5, None, 1.5, None]
    assert results[1]["reward_error"] == "raises_on_odd: ValueError: odd"
    assert results[1]["reward_components"] == {"async_half": 0.5}  # what did succeed stays visible
    assert results[0]["reward_error"] is None


def test_hanging_functions_overrun_their_deadline_without_holding_up_the_batch(scorer_of):
    scorer = scorer_of(
        RewardSpec(F + "hang", timeout_s=0.2),
        RewardSpec(F + "hang_async", timeout_s=0.2),
        F + "async_half",
    )
    start = time.perf_counter()
    results = scorer.score([traj(i) for i in range(6)])
    assert time.perf_counter() - start < 3  # every call ran at once: one deadline, not six
    for t in results:
        assert t["reward"] is None and t["reward_components"] == {"async_half": 0.5}
        errors = t["reward_error"].split("; ")
        assert errors[0].startswith("hang: timed out after 0.2 s") and errors[1] == "hang_async: timed out after 0.2 s"


def test_hung_sync_calls_keep_their_threads_and_later_calls_time_out_instead_of_piling_up(scorer_of):
    scorer = scorer_of(RewardSpec(F + "hang", timeout_s=0.2), max_threads=2)
    scorer.score([traj(0), traj(1)])  # both threads now hang past the deadline
    [t] = scorer.score([traj(2)])
    assert t["reward_error"] == "hang: timed out after 0.2 s (2 sync reward calls that overran their deadline are still running)"
    reward_functions.RELEASE.set()  # the hung calls return: their threads are free again
    deadline = time.monotonic() + 5
    while scorer._slots.overrunning and time.monotonic() < deadline:
        time.sleep(0.01)
    assert scorer._slots.overrunning == 0
    [t] = scorer.score([traj(3)])
    assert t["reward"] == 1.0 and t["reward_error"] is None


@pytest.mark.parametrize(
    ("function", "error"),
    [
        ("not_a_number", "not_a_number: returned 'yes' (str), not a number"),
        ("nan", "nan: returned nan, not a finite number"),
        ("forgot_await", "forgot_await: returned an awaitable (coroutine); declare the function 'async def'"),
    ],
)
def test_values_that_are_not_finite_numbers_are_errors_not_zeros(scorer_of, function, error):
    [t] = scorer_of(F + function).score([traj()])
    assert t["reward"] is None and t["reward_error"] == error and t["reward_components"] == {}


def test_non_finite_env_rewards_are_errors(scorer_of):
    [t] = scorer_of().score([traj(env_rewards={"maze": float("inf")})])
    assert t["reward"] is None and t["reward_error"] == "env:maze: returned inf, not a finite number"


def test_trajectories_whose_rollout_failed_are_not_scored(scorer_of):
    reward_functions.CALLS.clear()
    scorer = scorer_of(F + "counted")
    failed, api_failed, ok = scorer.score(
        [traj(0, stop_reason="error", error="RuntimeError: boom"), traj(1, stop_reason="api_error"), traj(2)]
    )
    assert failed == {**failed, "reward": None, "reward_components": {}}
    assert failed["reward_error"] == "not scored: the rollout ended with stop_reason 'error'"
    assert api_failed["reward_error"] == "not scored: the rollout ended with stop_reason 'api_error'"
    assert ok["reward"] == 1.0
    assert reward_functions.CALLS == ["t2"]


def test_functions_get_the_whole_trajectory_with_the_prompt_rows_fields(scorer_of):
    [t] = scorer_of("twinkle_agentic.rewards.builtin:contains_ground_truth").score(
        [traj(answer="It is Sunny, 24 C in Paris.", ground_truth=["sunny", "24 C"], tools=[])]
    )
    assert t["reward"] == 1.0 and t["reward_components"] == {"contains_ground_truth": 1.0}


def test_score_trajectories_scores_once_and_the_scorer_serves_threads_at_once(scorer_of):
    from concurrent.futures import ThreadPoolExecutor

    assert score_trajectories([traj()], [F + "async_half"])[0]["reward"] == 0.5
    scorer = scorer_of(F + "async_half", F + "length_of_answer")
    with ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(lambda i: scorer.score([traj(i, answer="x" * i)]), range(8)))
    assert [b[0]["reward"] for b in batches] == [0.5 + i for i in range(8)]


def test_python_functions_are_taken_as_they_are(scorer_of):
    def exact(trajectory: dict) -> bool:
        return trajectory["messages"][-1]["content"] == trajectory["ground_truth"]

    async def short(trajectory: dict) -> float:
        return -0.1 * len(trajectory["messages"][-1]["content"])

    scorer = scorer_of(exact, RewardSpec(short, weight=2.0, timeout_s=1))
    right, wrong = scorer.score([traj(0, answer="42", ground_truth="42"), traj(1, answer="41!", ground_truth="42")])
    assert right["reward_components"] == {"exact": 1.0, "short": pytest.approx(-0.2)} and right["reward"] == pytest.approx(0.6)
    assert wrong["reward"] == pytest.approx(-0.6)


def test_kwargs_are_passed_to_every_call(scorer_of):
    [t] = scorer_of({"function": F + "scaled", "kwargs": {"factor": 0.5}}).score([traj(n=3)])
    assert t["reward"] == 1.5


def test_batch_mode_calls_once_with_the_graded_trajectories_in_order(scorer_of):
    scorer = scorer_of(RewardSpec(F + "batch_ranks", batch=True), F + "async_half")
    out = scorer.score([traj(0, n=5), traj(1, n=1, stop_reason="error"), traj(2, n=3), traj(3, n=9)])
    assert [t["reward_components"].get("batch_ranks") for t in out] == [1.0, None, 0.0, 2.0]  # the failed rollout is left out
    assert out[0]["reward"] == 1.5 and out[1]["reward"] is None


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (RewardSpec(F + "batch_one_short", batch=True), "batch_one_short: returned 1 values for a batch of 2; return one number per trajectory, in order"),
        (RewardSpec(F + "batch_raises", batch=True), "batch_raises: ConnectionError: grader unreachable"),
        (RewardSpec(F + "hang", batch=True, timeout_s=0.2), "hang: timed out after 0.2 s"),
    ],
)
def test_a_failing_batch_call_is_an_error_on_each_of_its_trajectories(scorer_of, spec, error):
    out = scorer_of(spec).score([traj(0), traj(1)])
    assert [(t["reward"], t["reward_error"]) for t in out] == [(None, error)] * 2


def test_an_env_class_scores_batches_with_its_evaluate(scorer_of):
    from twinkle_agentic.demo.env import GuessNumberEnv

    won = traj(0, answer="I won")
    won["messages"].insert(1, {"role": "tool", "content": "Correct!"})
    scorer = scorer_of("twinkle_agentic.demo.env:GuessNumberEnv", {"function": F + "PickyEnv", "kwargs": {"threshold": 2}})
    out = scorer.score([won, traj(1, n=2)])
    assert [t["reward_components"] for t in out] == [{"GuessNumberEnv": 1.0, "PickyEnv": 0.0}, {"GuessNumberEnv": 0.0, "PickyEnv": 1.0}]
    assert GuessNumberEnv().evaluate([won]) == [1.0]
