"""Ray actors of the rollout farm: ``RolloutWorker`` (one vLLM engine each) and the ``RolloutFarm``
driver that shards trajectories over them, streams results back and restarts workers that die.

Names resolve lazily: importing ``actors`` needs neither Ray nor vLLM.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EngineConfig": ".config",
    "RolloutSpec": ".config",
    "FarmConfigError": ".config",
    "Activity": ".activity",
    "ActivityRecorder": ".activity",
    "ToolCatalog": ".catalog",
    "EnvEndpoint": ".catalog",
    "RolloutWorker": ".worker",
    "BatchResult": ".worker",
    "WorkerUnhealthy": ".worker",
    "RolloutFarm": ".driver",
    "FarmOptions": ".driver",
    "FarmBatch": ".driver",
    "FarmStartError": ".driver",
    "register_mode": ".modes",
    "available_modes": ".modes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
