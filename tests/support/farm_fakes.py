"""A scripted rollout mode for unit tests of the worker and the driver's failure handling.

It stands in for the engine only (selected with ``EngineConfig(mode="tests.support.farm_fakes:ScriptedMode")``); the
worker, its tool managers, activity accounting, Ray actors, restarts and requeues are all real. A
trajectory steers it with keys: ``call`` (a tool call to make), ``explode`` (the rollout raises),
``crash`` (the worker process exits), ``hang_s`` (the rollout sleeps), ``kill_engine`` (the engine
becomes unusable).
"""

from __future__ import annotations

import os
import time
from typing import Any

from twinkle_agentic.rollout.base import finish


class ScriptedMode:
    concurrent_batches = False

    def __init__(self, engine: Any, spec: Any, recorder: Any):
        self.recorder = recorder
        self.dead = False

    def ready(self) -> dict[str, Any]:
        return {"model": "scripted", "max_model_len": 64, "device": "none"}

    def rollout(self, trajectories: list[dict[str, Any]], managers: list[Any]) -> list[dict[str, Any]]:
        out = []
        for trajectory, manager in zip(trajectories, managers, strict=True):
            if trajectory.get("crash"):
                os._exit(1)
            if trajectory.get("kill_engine"):
                self.dead = True
                raise RuntimeError("EngineDeadError: the engine core died")
            if trajectory.get("explode"):
                raise RuntimeError(f"cannot roll out {trajectory['trajectory_id']}")
            time.sleep(float(trajectory.get("hang_s", 0)))
            with self.recorder.span("engine"):
                time.sleep(0.01)
            messages = [*trajectory["messages"], {"role": "assistant", "content": "ok"}]
            if "call" in trajectory:
                messages.append({"role": "tool", "content": manager(trajectory["call"])})
            result = {**trajectory, "messages": messages, "input_ids": [1, 2, 3], "labels": [-100, 2, 3], "logprobs": [-0.1, -0.2]}
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
