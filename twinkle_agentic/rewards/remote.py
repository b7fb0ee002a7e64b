"""``RewardServerClient``: a batch-mode reward backed by a reward server (``deployments/reward_server.py``).

Name it in a rollout's ``rewards:`` list like an ``Env`` class; the worker builds it once with
``kwargs`` and each batch becomes one ``POST /score``::

    rewards:
      - function: twinkle_agentic.rewards.remote:RewardServerClient
        name: judge
        kwargs: {url: "http://head:8000/rewards", token_env: REWARD_TOKEN}
        timeout_s: 120

The server's reward (its weighted sum) is this component's value; a trajectory the server could not
score gets the server's ``reward_error``. Token-level fields (``input_ids``, ``labels``, ``logprobs``,
``policy_versions``...) are not sent: graders read messages, tools and the prompt row's fields.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from .spec import RewardConfigError

TOKEN_FIELDS = ("input_ids", "labels", "logprobs", "policy_versions", "attention_mask", "position_ids")


class RemoteRewardError(RuntimeError):
    """The reward server answered, but could not score this trajectory (its ``reward_error``)."""


class RewardServerClient:
    """Scores batches on the reward server at ``url`` (``token``/``token_env``: its bearer token)."""

    def __init__(self, url: str, token: str | None = None, token_env: str | None = None, transport: Any = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise RewardConfigError(f"url must be the reward server's http(s) address, got {url!r}")
        if token is not None and token_env is not None:
            raise RewardConfigError("give either token or token_env, not both")
        if token_env is not None:
            token = os.environ.get(token_env) or None
            if token is None:
                raise RewardConfigError(f"token_env={token_env!r} names an unset or empty environment variable; set it")
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.transport = transport  # an httpx transport (tests: httpx.ASGITransport over the app)

    async def evaluate(self, trajectories: list[dict[str, Any]]) -> list[float | Exception]:
        """The server's reward of each trajectory, or a ``RemoteRewardError`` carrying its ``reward_error``."""
        import httpx

        body = json.dumps({"trajectories": [_wire(t) for t in trajectories]}, default=_jsonable)
        async with httpx.AsyncClient(transport=self.transport, trust_env=False, timeout=None) as client:
            response = await client.post(
                f"{self.url}/score", content=body, headers={**self.headers, "Content-Type": "application/json"}
            )
        response.raise_for_status()
        results = response.json().get("results")
        if not isinstance(results, list) or len(results) != len(trajectories):
            raise RuntimeError(f"reward server {self.url} answered {type(results).__name__} for {len(trajectories)} trajectories")
        return [
            RemoteRewardError(r.get("reward_error") or "no reward") if r.get("reward") is None else r["reward"]
            for r in results
        ]


def _wire(trajectory: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in trajectory.items() if k not in TOKEN_FIELDS}


def _jsonable(value: Any) -> Any:
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)
