"""JSON for the HTTP hot path: ``orjson`` when installed (several times faster than ``json`` for
chat payloads), the standard library otherwise, with identical results for what the chat API
sends (UTF-8 text, no ASCII escaping)."""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None


def dumps(obj: Any) -> bytes:
    """``obj`` as compact UTF-8 JSON bytes."""
    if orjson is not None:
        try:
            return orjson.dumps(obj)
        except TypeError:  # what orjson refuses (non-str keys, ints past 64 bits...) the stdlib may take
            pass
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def loads(data: bytes | str) -> Any:
    """Parse JSON; ``ValueError`` when it is not JSON. ``NaN``/``Infinity`` are accepted, as by ``json``."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # re-parse with the stdlib: it takes NaN/Infinity and words the error
    return json.loads(data)
