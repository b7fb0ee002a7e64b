"""The reward server: its HTTP API in-process (the app over ``httpx.ASGITransport``, no Ray), and
deployed on Serve, scored from a worker-side ``RewardScorer`` through ``RewardServerClient``."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
import httpx  # noqa: E402
from twinkle_agentic.deployments.common import DeploymentConfigError  # noqa: E402
from twinkle_agentic.deployments.reward_server import build_app, make_reward_app  # noqa: E402

from tests.support import reward_functions  # noqa: E402
from twinkle_agentic.rewards import RewardScorer, RewardSpec  # noqa: E402
from twinkle_agentic.rewards.remote import RewardServerClient  # noqa: E402

F = "tests.support.reward_functions:"
SERVER_REWARDS = [
    {"function": "twinkle_agentic.rewards.builtin:contains_ground_truth", "weight": 2.0},
    {"function": F + "raises_on_odd"},
    {"function": F + "hang_when_asked", "timeout_s": 0.3},
]
TOKEN = "s3cret"


def traj(n: int, answer: str, **extra) -> dict:
    messages = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": answer}]
    return {"trajectory_id": f"t{n}", "n": n, "messages": messages, "stop_reason": "stop", "ground_truth": ["sunny"],
            "input_ids": [1, 2, 3], "logprobs": [-0.1], **extra}  # fmt: skip


def check_scored(out: list[dict]) -> None:
    sunny, odd, cloudy, hung = out
    assert sunny["reward_components"] == {"judge": 3.0} and sunny["reward"] == 1.5  # weight 0.5 on the server's 2*1 + 1
    assert odd["reward"] is None and odd["reward_error"] == "judge: RemoteRewardError: raises_on_odd: ValueError: odd"
    assert cloudy["reward"] == 0.5
    assert hung["reward_error"] == "judge: RemoteRewardError: hang_when_asked: timed out after 0.3 s"


def batch() -> list[dict]:
    return [traj(0, "Sunny."), traj(1, "Sunny."), traj(2, "Cloudy."), traj(4, "Sunny.", hang=True)]


@pytest.fixture
def local_scorer():
    reward_functions.RELEASE.clear()
    server = RewardScorer(SERVER_REWARDS)
    transport = httpx.ASGITransport(app=make_reward_app(server, TOKEN))

    def make(token: str = TOKEN) -> RewardScorer:
        kwargs = {"url": "http://rewards.test", "token": token, "transport": transport}
        scorer = RewardScorer([RewardSpec("twinkle_agentic.rewards.remote:RewardServerClient", weight=0.5, name="judge", kwargs=kwargs)])
        made.append(scorer)
        return scorer

    made: list[RewardScorer] = []
    yield make
    reward_functions.RELEASE.set()
    for scorer in [*made, server]:
        scorer.close()


def test_a_batch_is_scored_on_the_server_in_one_call(local_scorer):
    check_scored(local_scorer().score(batch()))


def test_a_wrong_token_is_an_error_on_each_trajectory_of_the_batch(local_scorer):
    out = local_scorer("wrong").score(batch()[:2])
    assert all(t["reward"] is None and t["reward_error"].startswith("judge: HTTPStatusError: Client error '401") for t in out)


def test_server_and_client_settings_are_checked():
    with pytest.raises(DeploymentConfigError, match=r"rewards\[0\]\.weight must be a finite number"):
        build_app({"rewards": [{"function": F + "raises", "weight": "x"}]})
    with pytest.raises(DeploymentConfigError, match="reward server args need 'rewards'"):
        build_app({})
    with pytest.raises(ValueError, match="url must be the reward server's http"):
        RewardServerClient("rewards:8000")


@pytest.mark.integration
def test_the_reward_server_on_serve(serve_http):
    from ray import serve
    from twinkle_agentic.deployments.reward_server import reward_server_app

    app = reward_server_app(SERVER_REWARDS, token=TOKEN, ray_actor_options={"num_cpus": 0.1})
    serve.run(app, name="rewards", route_prefix="/rewards")
    url = f"{serve_http}/rewards"
    assert httpx.get(f"{url}/rewards", headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False).json() == {
        "rewards": ["contains_ground_truth", "raises_on_odd", "hang_when_asked"]
    }
    spec = RewardSpec("twinkle_agentic.rewards.remote:RewardServerClient", weight=0.5, name="judge", kwargs={"url": url, "token": TOKEN})
    scorer = RewardScorer([spec])
    try:
        check_scored(scorer.score(batch()))
    finally:
        scorer.close()
        serve.delete("rewards")
