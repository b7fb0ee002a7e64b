"""LLM endpoint clients: the ``API`` contract and the OpenAI-compatible implementation.

Names are resolved lazily; the ``openai`` SDK is imported only when a client is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "API": ".base",
    "OpenAI": ".openai",
    "RetryPolicy": ".retry",
    "to_request": ".openai_payload",
    "from_choice": ".openai_payload",
    "sanitize_messages": ".openai_payload",
    "ProtocolError": ".errors",
    "RateLimitedError": ".errors",
    "ServerError": ".errors",
    "ProtocolTimeoutError": ".errors",
    "ProtocolConnectionError": ".errors",
    "AuthenticationFailedError": ".errors",
    "BadRequestError": ".errors",
    "MalformedResponseError": ".errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
