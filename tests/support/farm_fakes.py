"""A scripted rollout mode for unit tests of the worker and the driver's failure handling.

It stands in for the engine only (selected with ``EngineConfig(mode="tests.support.farm_fakes:ScriptedMode")``); the
worker, its tool managers, activity accounting, Ray actors, restarts and requeues are all real. A
trajectory steers it with keys: ``call`` (a tool call to make), ``explode`` (the rollout raises),
``explode_ids`` (the rollout raises for these trajectory ids only), ``crash`` (the worker process
exits), ``hang_s`` (the rollout sleeps), ``kill_engine`` (the engine
becomes unusable).

Weight updates: ``apply_update`` records the version, and each trajectory is stamped with the
version it started under and the one it ended under (``policy_version``). ``CrashOnUpdateWorker`` is
a real worker (any mode) whose process exits on an update while a marker file exists.
"""

from __future__ import annotations

import os
import time
from typing import Any

from twinkle_agentic.actors.worker import RolloutWorker

from twinkle_agentic.rollout.base import finish

CRASH_ON_UPDATE = "CRASH_ON_UPDATE"  # env var of the worker: a marker file's path


class ScriptedMode:
    concurrent_batches = False

    def __init__(self, engine: Any, spec: Any, recorder: Any):
        self.recorder = recorder
        self.dead = False
        self.version = 0
        self.updates: list[tuple[int, str]] = []

    def ready(self) -> dict[str, Any]:
        return {"model": "scripted", "max_model_len": 64, "device": "none", "policy_version": self.version}

    def apply_update(self, update: Any, *, version: int, on_update: str) -> dict[str, Any]:
        self.version = version
        self.updates.append((version, on_update))
        return {"drain_s": 0.0, "load_s": 0.0, "reset_s": 0.0, "paused_s": 0.0, "rpc_calls": update.rpc_calls}

    def rollout(self, trajectories: list[dict[str, Any]], managers: list[Any]) -> list[dict[str, Any]]:
        out = []
        for trajectory, manager in zip(trajectories, managers, strict=True):
            started = self.version
            if trajectory.get("crash"):
                os._exit(1)
            if trajectory.get("kill_engine"):
                self.dead = True
                raise RuntimeError("EngineDeadError: the engine core died")
            if trajectory.get("explode") or trajectory["trajectory_id"] in trajectory.get("explode_ids", ()):
                raise RuntimeError(f"cannot roll out {trajectory['trajectory_id']}")
            time.sleep(float(trajectory.get("hang_s", 0)))
            with self.recorder.span("engine"):
                time.sleep(0.01)
            messages = [*trajectory["messages"], {"role": "assistant", "content": "ok"}]
            if "call" in trajectory:
                messages.append({"role": "tool", "content": manager(trajectory["call"])})
            result = {
                **trajectory, "messages": messages, "input_ids": [1, 2, 3], "labels": [-100, 2, 3],
                "logprobs": [-0.1, -0.2], "started_version": started, "policy_version": self.version,
            }
            out.append(finish(result, "stop", 1))
        return out

    def healthy(self) -> bool:
        return not self.dead

    def shutdown(self) -> None:
        pass


class BrokenMode(ScriptedMode):
    """An engine that cannot start (e.g. a model that does not load)."""

    def __init__(self, engine: Any, spec: Any, recorder: Any):
        raise OSError(f"cannot load model {engine.model!r}")


class CrashOnUpdateWorker(RolloutWorker):
    """A real rollout worker whose process exits when an update arrives while the file named by
    ``$CRASH_ON_UPDATE`` exists (removed first, so only one worker dies)."""

    def update_weights(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        marker = os.environ.get(CRASH_ON_UPDATE)
        if marker and os.path.exists(marker):
            os.remove(marker)
            os._exit(1)
        return super().update_weights(*args, **kwargs)
