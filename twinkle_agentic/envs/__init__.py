"""Environments for agentic rollouts: the ``Env`` interface, ``EnvTool``, OpenEnv and a code sandbox.

Names are resolved lazily: ``OpenEnv`` and the sandbox pull in nothing optional until used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Env": ".base",
    "StepResult": ".base",
    "EnvTool": ".env_tool",
    "OpenEnv": ".openenv",
    "mcp_action_mapper": ".openenv",
    "CodeExecutionEnv": ".code_env",
    "LocalSubprocessSandbox": ".sandbox",
    "SandboxLimits": ".sandbox",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
