"""Trajectories, model input features and the Arrow-stable ``user_data`` helpers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from .message import Message, Tool

UserData = list[tuple[str, str]]


class PolicySpan(TypedDict):
    """Generated tokens ``input_ids[start:end]`` (half-open) came from policy ``version``."""

    version: int
    start: int
    end: int


class Trajectory(TypedDict, total=False):
    """A conversation plus what a rollout or trainer attaches to it; free keys are allowed.

    An engine rollout adds, among others, ``policy_version`` (the version of the weights that
    generated the last token) and ``policy_versions`` (``PolicySpan`` objects over ``input_ids``: one
    per assistant turn, several when a weight update landed inside a turn); both are None where the
    versions are unknown (the API rollout), and ``policy_version`` is None when no token was generated.
    """

    messages: list[Message]
    tools: list[Tool]
    user_data: UserData | dict[str, Any]
    images: list[Any]
    videos: list[Any]
    audios: list[Any]
    policy_version: int | None
    policy_versions: list[PolicySpan] | None


class InputFeature(TypedDict, total=False):
    """Token-level model input. ``labels`` are unshifted: ``labels[i]`` is ``input_ids[i]`` or -100."""

    input_ids: list[int]
    labels: list[int]
    attention_mask: list[int]
    position_ids: list[int]
    length: int


def pack_value(value: Any) -> str:
    """Serialise a ``user_data`` value the Arrow-stable way (JSON, unicode kept)."""
    return json.dumps(value, ensure_ascii=False)


def _items(items: UserData | Mapping[str, Any] | None) -> Iterable[tuple[str, Any]]:
    if items is None:
        return ()
    if isinstance(items, Mapping):
        return items.items()
    return ((pair[0], pair[1]) for pair in items if isinstance(pair, (list, tuple)) and len(pair) == 2)


def user_data_get(items: UserData | Mapping[str, Any] | None, key: str, default: Any = None) -> Any:
    """Return the first value stored under ``key``, JSON-decoded (the raw value when it is not JSON)."""
    for k, v in _items(items):
        if k != key:
            continue
        if not isinstance(v, str):
            return v
        try:
            return json.loads(v)
        except ValueError:
            return v
    return default


def user_data_set(items: UserData | Mapping[str, Any] | None, key: str, value: Any) -> UserData:
    """Return a new pair list with every ``key`` entry replaced by one packed entry at the end."""
    out: UserData = []
    for k, v in _items(items):
        if k == key:
            continue
        out.append((k, v if isinstance(v, str) else pack_value(v)))
    out.append((key, pack_value(value)))
    return out
