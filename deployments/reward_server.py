"""Ray Serve reward server: reward functions scored away from the rollout workers (model-based graders
that need their own GPU or memory, sandboxed graders), one HTTP call per batch.

HTTP API (relative to the application's ``route_prefix``)::

    GET  /rewards -> {"rewards": [<component name>, ...]}                         (token required if set)
    POST /score   {"trajectories": [<finished trajectory>, ...]}
                  -> {"results": [{"reward", "reward_components", "reward_error"}, ...]}   (same order)
    GET  /health  -> {"status": "healthy", "rewards": <count>}

The replica scores with a ``RewardScorer`` over its ``rewards`` (the ``RewardSpec`` mappings a rollout
job's ``rewards:`` list takes), so deadlines and errors mean the same as on a worker: a function that
raises or overruns gives that trajectory a ``reward_error``, never an HTTP error. Workers call it
through ``twinkle_agentic.rewards.remote:RewardServerClient``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import Depends, FastAPI
from pydantic import BaseModel, ConfigDict
from ray import serve

from twinkle_agentic.rewards.scorer import COMPONENTS, REWARD, REWARD_ERROR, RewardScorer
from twinkle_agentic.rewards.spec import RewardConfigError, check_reward_specs

from .common import DeploymentConfigError, check_keys, require_bearer, resolve_token

REWARD_SERVER_ARGS = ("rewards", "token", "token_env")


class ScoreRequest(BaseModel):
    """The body of ``POST /score``."""

    model_config = ConfigDict(extra="forbid")
    trajectories: list[dict[str, Any]]


def make_reward_app(scorer: RewardScorer, token: str | None = None) -> Any:
    """The FastAPI app for one replica (also runnable under plain uvicorn)."""
    authorized = require_bearer(token)
    app = FastAPI(title="twinkle-agentic reward server", docs_url=None, redoc_url=None)

    @app.get("/rewards", dependencies=[Depends(authorized)])
    async def rewards() -> dict[str, Any]:
        return {"rewards": [spec.component for spec in scorer.specs]}

    @app.post("/score", dependencies=[Depends(authorized)])
    async def score(request: ScoreRequest) -> dict[str, Any]:
        trajectories = request.trajectories
        await asyncio.to_thread(scorer.score, trajectories)  # the scorer runs the calls on its own loop
        return {
            "results": [
                {REWARD: t.get(REWARD), COMPONENTS: t.get(COMPONENTS, {}), REWARD_ERROR: t.get(REWARD_ERROR)}
                for t in trajectories
            ]
        }

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "rewards": len(scorer.specs)}

    return app


def check_server_rewards(rewards: Any) -> list[Any]:
    """The ``rewards`` of a server, shape-checked without importing them (bind time)."""
    if not isinstance(rewards, Sequence) or isinstance(rewards, str) or not rewards:
        raise DeploymentConfigError("rewards must be a non-empty list of reward functions ({function, weight, ...})")
    try:
        check_reward_specs(list(rewards), load=False)
    except RewardConfigError as exc:
        raise DeploymentConfigError(str(exc)) from exc
    return list(rewards)


@serve.deployment
@serve.ingress()
class RewardServer:
    """Serve deployment around a ``RewardScorer`` (functions imported and env classes built once per replica)."""

    def __init__(self, rewards: Sequence[Mapping[str, Any] | str], token: str | None = None, token_env: str | None = None):
        self._token = resolve_token(token, token_env)
        self._scorer = RewardScorer(check_server_rewards(rewards))

    def __serve_build_asgi_app__(self) -> Any:
        return make_reward_app(self._scorer, self._token)

    def __del__(self) -> None:
        scorer = getattr(self, "_scorer", None)
        if scorer is not None:
            scorer.close()


def reward_server_app(
    rewards: Sequence[Mapping[str, Any] | str],
    *,
    token: str | None = None,
    token_env: str | None = None,
    **deployment_options: Any,
) -> Any:
    """Bind a RewardServer application from Python; ``deployment_options`` go to ``RewardServer.options``
    (``num_replicas``, ``ray_actor_options``...)."""
    rewards = check_server_rewards(rewards)
    if token is not None and token_env is not None:
        raise DeploymentConfigError("give either token or token_env, not both")
    deployment = RewardServer.options(**deployment_options) if deployment_options else RewardServer
    return deployment.bind(rewards, token=token, token_env=token_env)


def build_app(args: dict[str, Any]) -> Any:
    """Application builder for ``serve deploy``: ``args`` holds ``rewards`` and optionally ``token``/``token_env``."""
    check_keys("reward server args", args, REWARD_SERVER_ARGS)
    if "rewards" not in args:
        raise DeploymentConfigError("reward server args need 'rewards': a list of {function, weight, name, timeout_s}")
    return reward_server_app(args["rewards"], token=args.get("token"), token_env=args.get("token_env"))
