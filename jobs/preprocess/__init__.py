"""The preprocess job: the library's filters as Ray Data stages, global dedup as a shuffle.

``twinkle-agentic preprocess --input PATH... --output DIR [--config pipeline.yaml]`` runs it on an
embedded local cluster, on ``--address``/``RAY_ADDRESS``, or under ``ray job submit``.
:func:`process_dataset` runs the same stages on a ``ray.data.Dataset`` built by the caller.
"""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

from .config import PreprocessConfig, build_parser, resolve_config
from .main import main

__all__ = [
    "PreprocessConfig",
    "PreprocessResult",
    "build_parser",
    "main",
    "process_dataset",
    "resolve_config",
]

# The Dataset API: imported on first use, like Ray Data itself.
__getattr__ = lazy_exports(__name__, {"process_dataset": ".dataset_api", "PreprocessResult": ".dataset_api"})
