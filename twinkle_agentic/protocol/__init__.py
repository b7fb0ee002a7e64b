"""LLM endpoint clients: the ``API`` contract and the OpenAI-compatible implementation.

Names are resolved lazily; the ``openai`` SDK is imported only when a client is first used.
"""

from __future__ import annotations

from twinkle_agentic.lazy import lazy_exports

_EXPORTS = {
    "API": ".base",
    "OpenAI": ".openai",
    "RetryPolicy": "twinkle_agentic.retry",
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

__getattr__ = lazy_exports(__name__, _EXPORTS)
