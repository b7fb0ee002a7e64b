"""Environments for agentic rollouts: the ``Env`` interface, ``EnvTool``, OpenEnv and a code sandbox.

Names are resolved lazily: ``OpenEnv`` and the sandbox pull in nothing optional until used.
"""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

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

__getattr__ = lazy_exports(__name__, _EXPORTS)
