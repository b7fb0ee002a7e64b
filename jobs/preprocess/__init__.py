"""The preprocess job: the library's filters as Ray Data stages, global dedup as a shuffle.

``twinkle-agentic preprocess --input PATH... --output DIR [--config pipeline.yaml]`` runs it on an
embedded local cluster, on ``--address``/``RAY_ADDRESS``, or under ``ray job submit``.
"""

from __future__ import annotations

from .config import PreprocessConfig, build_parser, resolve_config
from .main import main

__all__ = ["PreprocessConfig", "build_parser", "main", "resolve_config"]
