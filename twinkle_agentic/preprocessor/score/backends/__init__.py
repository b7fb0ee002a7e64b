"""Scorer backends: the project's vLLM sampler, or an OpenAI-compatible server.

``build_backend`` turns what a user (or a YAML config) gives ``ScoreFilter(backend=...)`` into a
backend: a backend as is, a sampler object (with ``template``), or a config dict
``{'type': 'sampler', 'model': <path>, ...engine kwargs}`` / ``{'type': 'openai', 'base_url': ...,
'model': ...}``. Config-built backends create their engine or client on first use.
"""

from __future__ import annotations

from typing import Any

from .base import BackendError, ScoreBackend
from .openai import OpenAIBackend
from .sampler import SamplerBackend

BACKEND_TYPES = ("sampler", "openai")


def build_backend(spec: Any, template: Any = None) -> ScoreBackend | None:
    if spec is None or isinstance(spec, ScoreBackend):
        return spec
    if isinstance(spec, dict):
        config = dict(spec)
        kind = config.pop("type", None)
        if kind == "sampler":
            if "model" not in config:
                raise ValueError("backend {'type': 'sampler'} needs 'model' (a model path or name)")
            config.setdefault("template", template)
            return SamplerBackend.from_config(**config)
        if kind == "openai":
            return OpenAIBackend(**config)
        raise ValueError(f"backend config needs 'type' in {BACKEND_TYPES}, got {kind!r}")
    if hasattr(spec, "sample"):
        if template is None:
            raise ValueError("a sampler backend needs template= (the chat template the sampler's model uses)")
        return SamplerBackend(spec, template)
    if all(callable(getattr(spec, m, None)) for m in ("encode_chat", "prompt_logprobs", "chat")):
        return spec  # duck-typed backend
    raise TypeError(
        f"backend must be a ScoreBackend, a sampler with sample(), or a config dict; got {type(spec).__name__}"
    )


__all__ = [
    "BACKEND_TYPES",
    "BackendError",
    "OpenAIBackend",
    "SamplerBackend",
    "ScoreBackend",
    "build_backend",
]
