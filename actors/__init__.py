"""Ray actors of the rollout farm: ``RolloutWorker`` (one vLLM engine each) and the ``RolloutFarm``
driver that shards trajectories over them, streams results back and restarts workers that die.

Names resolve lazily: importing ``actors`` needs neither Ray nor vLLM.
"""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

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
    "FarmOptions": ".config",
    "FarmBatch": ".driver",
    "FarmStartError": ".driver",
    "register_mode": ".modes",
    "available_modes": ".modes",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
