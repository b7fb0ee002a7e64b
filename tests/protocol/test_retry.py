"""RetryPolicy: exponential backoff with bounded jitter, Retry-After honoured, validation."""

from __future__ import annotations

import pytest

from twinkle_agentic.protocol.retry import MAX_RETRY_AFTER_S, RetryPolicy, parse_retry_after


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
