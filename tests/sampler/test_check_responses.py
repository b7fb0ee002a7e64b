"""``check_responses``: the sampler contract every rollout enforces on a sampler's output (no engine)."""

from __future__ import annotations

import pytest

from twinkle_agentic.data_format import SampledSequence, SampleResponse, check_policy_version_runs
from twinkle_agentic.sampler.base import check_responses


def response(**seq) -> SampleResponse:
    return SampleResponse(sequences=[SampledSequence(**seq)])


def test_policy_version_runs_that_cover_the_tokens_pass():
    ok = [
        response(tokens=[1, 2, 3]),  # the sampler does not know
        response(tokens=[1, 2, 3], policy_versions=[(0, 1), (1, 2)]),
        response(tokens=[], policy_versions=[]),
        response(tokens=[1], policy_versions=[[4, 1]]),  # pairs as lists, as JSON gives them
    ]
    assert check_responses(ok, 4) == ok
    assert SampledSequence(tokens=[1]).policy_versions is None
    assert check_policy_version_runs([[4, 1], (5, 0)], 1) == [(4, 1), (5, 0)]


@pytest.mark.parametrize(
    "runs, message",
    [
        ([(0, 2)], "cover 2 tokens, but the sequence has 3"),
        ([(0, 1), (-1, 2)], "the version must be an integer >= 0"),
        ([(0.5, 3)], "the version must be an integer >= 0"),
        ([(0, 4), (1, -1)], "the token count must be an integer >= 0"),
        ([0, 3], "is not a \\(version, token_count\\) pair"),
        ({0: 3}, "must be a list of \\(version, token_count\\) pairs, got dict"),
    ],
)
def test_runs_that_do_not_cover_the_tokens_are_refused(runs, message):
    responses = [response(tokens=[1, 2, 3]), response(tokens=[1, 2, 3], policy_versions=runs)]
    with pytest.raises(RuntimeError, match=f"sampler response 1: .*{message}"):
        check_responses(responses, 2)
