"""RetryPolicy: exponential backoff with bounded jitter, Retry-After honoured, validation."""

from __future__ import annotations

import pytest

from twinkle_agentic.retry import MAX_RETRY_AFTER_S, RetryPolicy, parse_retry_after


def test_backoff_grows_and_is_capped_with_jitter_bounds():
    policy = RetryPolicy(attempts=10, base_s=0.5, max_s=8.0, jitter=0.2)
    for k, nominal in enumerate([0.5, 1.0, 2.0, 4.0, 8.0, 8.0]):
        delays = [policy.delay_s(k) for _ in range(200)]
        assert nominal * 0.8 <= min(delays) and max(delays) <= nominal * 1.2
        assert max(delays) - min(delays) > 0  # jittered, not constant


def test_retry_after_is_honoured_up_to_a_bound():
    policy = RetryPolicy()
    assert policy.delay_s(5, retry_after_s=0.25) == 0.25
    assert policy.delay_s(0, retry_after_s=MAX_RETRY_AFTER_S + 1) <= 0.6


def test_parse_retry_after_headers():
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize("kwargs", [{"attempts": 0}, {"attempts": True}, {"base_s": -1}, {"jitter": 1.0}])
def test_invalid_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)


def test_tool_server_and_openenv_clients_pause_by_the_same_policy(monkeypatch):
    """Remote tools and the OpenEnv client take their pauses from RetryPolicy, not a copy of it."""
    from twinkle_agentic.envs.openenv import OpenEnv
    from twinkle_agentic.tools.remote import HttpPolicy

    http = HttpPolicy(retries=4, backoff_s=0.25, backoff_max_s=1.0)
    assert http.backoff == RetryPolicy(attempts=5, base_s=0.25, max_s=1.0)
    env = OpenEnv("http://127.0.0.1:1", retry_attempts=3, retry_base_s=0.1, retry_max_s=0.3)
    assert env._backoff == RetryPolicy(attempts=4, base_s=0.1, max_s=0.3)

    slept: list[float] = []
    monkeypatch.setattr("random.uniform", lambda low, high: 1.0)
    monkeypatch.setattr("twinkle_agentic.tools.remote.time.sleep", slept.append)
    monkeypatch.setattr("twinkle_agentic.envs.openenv.time.sleep", slept.append)
    _, problem = http.request("GET", "http://127.0.0.1:1/unreachable")
    assert "gave up after 5 attempts" in problem
    assert slept == [0.25, 0.5, 1.0, 1.0]
    slept.clear()
    result = env.reset()
    assert result.done and result.info["error_code"] == "CONNECTION_FAILED"
    assert slept == [0.1, 0.2, 0.3]
