"""``RolloutWorker``: one vLLM engine and the rollout that drives it, as a plain class.

The driver makes it a Ray actor from ``RolloutWorker.ray_options(cfg)`` (``concurrency_groups`` goes to
``ray.remote``, the rest to ``.options``);
tests can build it in-process. A batch never raises for a trajectory's sake: a trajectory whose
tools cannot be opened, or whose rollout fails, comes back with ``stop_reason="error"`` and the
actor lives on. Only a broken engine makes ``run_batch`` raise ``WorkerUnhealthy``, telling the
driver to replace the worker. Each finished batch is scored with the spec's reward functions and
env episode rewards (``twinkle_agentic.rewards``) before it is returned, off the engine lock.

``update_weights`` runs in its own Ray concurrency group (``CONTROL_GROUP``), next to the batches:
with ``on_update="finish"`` it holds batches that have not started, waits for the running ones (at
most ``finish_timeout_s``, after which the rest are aborted and resumed), then loads; with
``"abort_and_resume"`` it loads at once and the running trajectories continue under the new weights.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twinkle_agentic.data_format import Trajectory
from twinkle_agentic.rewards.scorer import RewardScorer
from twinkle_agentic.rollout.base import ERROR, finish, format_error

from .activity import Activity, ActivityRecorder
from .catalog import ToolCatalog
from .config import EngineConfig, RolloutSpec
from .modes import mode_class

if TYPE_CHECKING:
    from twinkle_agentic.sampler.weights import WeightUpdate

logger = logging.getLogger(__name__)

ID_KEY = "trajectory_id"
MAX_CONCURRENT_BATCHES = 16  # for modes that share the engine between batches (concurrent_batches)
CONTROL_GROUP = "control"  # the Ray concurrency group of calls that must not queue behind batches


class WorkerUnhealthy(RuntimeError):
    """The worker's engine is unusable; the driver should replace this worker."""


@dataclass
class BatchResult:
    """A finished batch: the trajectories in input order and the worker's activity meanwhile."""

    trajectories: list[Trajectory]
    activity: Activity
    generated_tokens: int


def error_trajectory(trajectory: Trajectory, error: str) -> Trajectory:
    """A trajectory that ended before any token was sampled: the prompt, no tokens, ``stop_reason='error'``."""
    out = dict(trajectory)
    out["messages"] = [dict(m) for m in trajectory.get("messages") or []]
    out.update({"input_ids": [], "labels": [], "logprobs": [], "length": 0, "policy_version": None, "policy_versions": []})
    return finish(out, ERROR, 0, error)


def generated_tokens(trajectory: Trajectory) -> int:
    """Tokens the policy generated in a trajectory (its trainable labels)."""
    return sum(1 for label in trajectory.get("labels") or [] if label != -100)


class RolloutWorker:
    """Holds one engine (built by the ``cfg.mode`` rollout mode) and rolls out batches on it."""

    def __init__(
        self,
        cfg: EngineConfig,
        rollout: RolloutSpec | None = None,
        weights: WeightUpdate | None = None,
        policy_version: int = 0,
    ):
        """``weights`` (a checked payload) and ``policy_version``: the farm's latest weights, which a
        worker started after an update loads before it reports ready."""
        self.cfg = cfg.validate()
        self.spec = (rollout or RolloutSpec()).validate()
        self.scorer = RewardScorer(self.spec.rewards)  # the reward functions, imported once per worker
        self.recorder = ActivityRecorder()
        start = time.perf_counter()
        self.mode = mode_class(cfg.mode)(cfg, self.spec, self.recorder)
        if weights is not None:
            self._apply(weights, policy_version, "finish")
        self.startup_s = time.perf_counter() - start
        # The engine leaves millions of long-lived objects behind; without this every full collection
        # walks them and stops the worker's threads for 1-2 s mid-rollout (measured in bench/async_rollout).
        gc.freeze()
        self._engine_lock = contextlib.nullcontext() if self.mode.concurrent_batches else threading.Lock()
        self._open_pool = ThreadPoolExecutor(max(1, self.spec.tool_concurrency), thread_name_prefix="open-tools")
        self._batches = threading.Condition()  # guards the two fields below
        self._running = 0
        self._held = False  # an update with on_update="finish" holds batches that have not started

    @staticmethod
    def ray_options(cfg: EngineConfig) -> dict[str, Any]:
        """Ray actor options for a worker of ``cfg``: resources, process environment, no Ray-side restarts
        (the driver restarts workers itself and re-runs only their unfinished trajectories).

        A mode that runs one batch at a time gets a sequential actor: Ray then runs calls in the order
        they were sent, so when the worker dies the driver knows which batch it was running. An engine
        of several GPUs adds ``placement_group`` (``bundles``, ``strategy``: see ``placement.py``), which
        the driver turns into one group per worker and the actor's scheduling strategy."""
        placement = cfg.placement()  # validates cfg
        runtime_env = dict(cfg.runtime_env)
        runtime_env["env_vars"] = {**cfg.process_env(), **dict(runtime_env.get("env_vars") or {})}
        concurrent = bool(getattr(mode_class(cfg.mode), "concurrent_batches", False))
        group = {"placement_group": placement.group_spec()} if placement.uses_group else {}
        return {
            **placement.actor_options(),
            **group,
            "runtime_env": runtime_env,
            "max_restarts": 0,
            "max_concurrency": MAX_CONCURRENT_BATCHES if concurrent else 1,
            "concurrency_groups": {CONTROL_GROUP: 1},
        }

    def ready(self) -> dict[str, Any]:
        """What the driver checks before sending work: model, context length, device, where and how fast."""
        info = dict(self.mode.ready())
        info.update(mode=self.cfg.mode, pid=os.getpid(), host=socket.gethostname(), startup_s=round(self.startup_s, 3))
        return info

    def generate(self, batch: list[Trajectory]) -> list[Trajectory]:
        """Roll out ``batch``; every trajectory comes back, in order, with a ``stop_reason``."""
        return self.run_batch(batch).trajectories

    def run_batch(self, batch: list[Trajectory]) -> BatchResult:
        """``generate`` plus the worker's activity over the batch (what the driver's summary is built from)."""
        if not isinstance(batch, list) or not all(isinstance(t, dict) for t in batch):
            raise TypeError("run_batch takes a list of trajectory dicts")
        with self._batches:
            self._batches.wait_for(lambda: not self._held)
            self._running += 1
        try:
            with self._engine_lock, self.recorder.span("active"):
                results = self._roll(batch)
        finally:
            with self._batches:
                self._running -= 1
                self._batches.notify_all()
        with self.recorder.span("active"):  # off the engine: the next batch may generate meanwhile
            self.scorer.score(results)
        return BatchResult(results, self.recorder.settle(), sum(generated_tokens(t) for t in results))

    def update_weights(
        self, weights: WeightUpdate, policy_version: int, on_update: str = "finish", finish_timeout_s: float = 600.0
    ) -> dict[str, Any]:
        """Load ``weights`` (checked by ``sampler.weights.prepare_update``) as ``policy_version``; see the
        module docstring for ``on_update``. Returns the engine's ``UpdateTimings`` and ``wait_s``, the
        time the running batches took to finish."""
        start = time.perf_counter()
        if on_update != "finish":
            timings = self._apply(weights, policy_version, on_update)
            return {"wait_s": 0.0, **timings, "total_s": round(time.perf_counter() - start, 6)}
        with self._batches:
            self._held = True
            finished = self._batches.wait_for(lambda: not self._running, timeout=finish_timeout_s)
        wait_s = time.perf_counter() - start
        if not finished:
            logger.warning(
                "batches still running after finish_timeout_s=%g; their trajectories continue under the new weights",
                finish_timeout_s,
            )
        try:
            timings = self._apply(weights, policy_version, "finish" if finished else "abort_and_resume")
        finally:
            with self._batches:
                self._held = False
                self._batches.notify_all()
        return {"wait_s": round(wait_s, 6), **timings, "total_s": round(time.perf_counter() - start, 6)}

    def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        """Join a trainer's weight-transfer group (``RolloutFarm.open_weight_transfer``); blocks until
        every member has joined."""
        self._engine_mode("init_weight_transfer")(init_info)

    def close_weight_transfer(self) -> None:
        """Leave the trainer's weight-transfer group, before the farm forms a new one."""
        self._engine_mode("close_weight_transfer")()

    def _engine_mode(self, method: str) -> Any:
        found = getattr(self.mode, method, None)
        if found is None:
            from twinkle_agentic.sampler.weights import WeightUpdateError

            raise WeightUpdateError(f"rollout mode {self.cfg.mode!r} cannot load new weights (it has no {method})")
        return found

    def _apply(self, weights: WeightUpdate, policy_version: int, on_update: str) -> dict[str, Any]:
        return self._engine_mode("apply_update")(weights, version=policy_version, on_update=on_update)

    def _roll(self, batch: list[Trajectory]) -> list[Trajectory]:
        """Open each trajectory's tools, run the mode's rollout, close the tools.

        When the rollout fails as a whole, each trajectory is retried alone with fresh tools (its env
        sessions may have moved), so only trajectories that fail on their own end with ``error``.
        """
        results: list[Trajectory | None] = [None] * len(batch)
        managers = self._open_managers(batch, results)
        todo = [i for i, r in enumerate(results) if r is None]
        failure = None
        try:
            if todo:
                outputs = self.mode.rollout([batch[i] for i in todo], [managers[i] for i in todo])
                for i, output in zip(todo, outputs, strict=True):
                    rewards = managers[i].env_rewards()
                    results[i] = {**output, "env_rewards": rewards} if rewards else output
        except Exception as exc:
            self._check_health(exc)
            failure = exc
        finally:
            for manager in managers:
                if manager is not None:
                    manager.close()
        if failure is not None:
            if len(batch) == 1:
                return [error_trajectory(batch[0], format_error(failure))]
            logger.warning("a batch of %d failed (%s); retrying each trajectory alone", len(todo), format_error(failure))
            for i in todo:
                results[i] = self._roll([batch[i]])[0]
        return results

    def _open_managers(self, batch: list[Trajectory], results: list[Trajectory | None]) -> list[Any]:
        """One tool manager per trajectory (env sessions opened in parallel); failures end that trajectory."""
        catalog = self.spec.catalog or ToolCatalog()
        futures = [self._open_pool.submit(catalog.manager_for, t, self.recorder) for t in batch]
        managers = []
        for i, future in enumerate(futures):
            try:
                managers.append(future.result())
            except Exception as exc:
                managers.append(None)
                results[i] = error_trajectory(batch[i], format_error(exc, "ToolSetup"))
        return managers

    def _check_health(self, exc: BaseException) -> None:
        if not self.mode.healthy():
            raise WorkerUnhealthy(f"the engine of this worker is unusable: {format_error(exc)}") from exc

    def shutdown(self) -> None:
        self._open_pool.shutdown(wait=False, cancel_futures=True)
        self.scorer.close()
        self.mode.shutdown()
