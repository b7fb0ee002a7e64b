"""The rollout job: multi-turn tool-calling rollouts on a Ray farm of vLLM engines.

``twinkle-agentic rollout --config rollout.yaml`` runs it on an embedded local cluster, on
``--address``/``RAY_ADDRESS``, or under ``ray job submit``; an interrupted run resumes from its output.
"""

from __future__ import annotations

from .config import ConfigError, RolloutJobConfig, build_parser, resolve_config
from .main import main

__all__ = ["ConfigError", "RolloutJobConfig", "build_parser", "main", "resolve_config"]
