"""Prompts in, trajectories to run out: reading, checking and naming.

A prompt row is an object with ``messages`` (OpenAI-shaped) or ``prompt`` (a string: one user
message). Optional keys: ``id`` (unique), ``tools`` (schemas the model is offered as they are),
``toolsets`` / ``envs`` (names of the job's tool servers and environments the trajectory may use:
default every toolset, no environment), ``user_data``; any other key passes through to the output.

Every trajectory gets a ``trajectory_id``: the prompt's ``id`` (else a hash of the row's content,
with ``~2``, ``~3``... for repeated identical rows), plus ``/s<k>`` when ``samples_per_prompt`` > 1.
Ids are stable across runs over the same file, which is what lets an interrupted job resume. The
trajectories of one prompt form a group (``group_id``: the prompt's id; ``group_size``:
``samples_per_prompt``), which is what GRPO advantages are computed over
(:mod:`twinkle_agentic.rollout.groups`).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from .config import ConfigError

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_REPORTED_PROBLEMS = 10


class PromptError(ConfigError):
    """The prompts file cannot be rolled out as it is; the message lists the rows and what is wrong."""


def _problem(row: Any) -> str | None:
    """Why a prompt row cannot be rolled out (None when it can)."""
    if not isinstance(row, dict):
        return f"must be a JSON object, got {type(row).__name__}"
    if "id" in row and not isinstance(row["id"], (str, int)):
        return f"'id' must be a string or an integer, got {type(row['id']).__name__}"
    for key in ("toolsets", "envs"):
        value = row.get(key)
        if (
            value is not None
            and not isinstance(value, str)
            and not (isinstance(value, list) and all(isinstance(v, str) for v in value))
        ):
            return f"'{key}' must be a name or a list of names"
    if "messages" in row and "prompt" in row:
        return "has both 'messages' and 'prompt'; give one"
    if "prompt" in row:
        if not isinstance(row["prompt"], str) or not row["prompt"].strip():
            return "'prompt' must be a non-empty string"
        return None
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        return "needs 'messages' (a non-empty list) or 'prompt' (a string)"
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages[{i}] must be an object"
        if message.get("role") not in ROLES:
            return f"messages[{i}].role must be one of {ROLES}, got {message.get('role')!r}"
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            return f"messages[{i}].content must be a string, a list of parts or null"
    return None


def read_rows(path: str) -> list[tuple[int, Any]]:
    """``(line or row number, decoded row)`` pairs; a line that is not JSON is reported, not skipped.

    Files are read by the project's readers (:mod:`twinkle_agentic.io`: local paths or URIs; JSON
    Lines, a ``.json`` file holding one JSON array, or Parquet; compressed or not)."""
    from pyarrow.lib import ArrowException

    from twinkle_agentic.io import JSONL, PARQUET, JSONLayoutError, format_of, iter_json_text

    layout = format_of(path) or JSONL
    if layout == PARQUET:
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (OSError, ValueError) as exc:
            raise PromptError(f"cannot read prompts {path}: {exc}") from exc
        rows = table.to_pylist()
        for row in rows:  # messages stored as JSON text (Arrow-stable form) are decoded
            for key in ("messages", "tools", "user_data"):
                if isinstance(row.get(key), str):
                    row[key] = json.loads(row[key])
        return list(enumerate(rows, start=1))
    out: list[tuple[int, Any]] = []
    try:
        for number, raw in iter_json_text(path, layout):
            try:
                out.append((number, json.loads(raw)))
            except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
                out.append((number, _BadLine(str(exc))))
    except (OSError, ArrowException, JSONLayoutError) as exc:
        raise PromptError(f"cannot read prompts {path}: {exc}") from exc
    return out


class _BadLine:
    def __init__(self, error: str):
        self.error = error


def load_prompts(path: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The prompt rows of ``path`` (the first ``limit``), checked; ``PromptError`` lists every bad row."""
    rows = read_rows(path)
    if limit is not None:
        rows = rows[:limit]
    problems = []
    for number, row in rows:
        problem = f"not JSON ({row.error})" if isinstance(row, _BadLine) else _problem(row)
        if problem:
            problems.append(f"line {number}: {problem}")
    if problems:
        shown = "; ".join(problems[:MAX_REPORTED_PROBLEMS])
        more = (
            f" (and {len(problems) - MAX_REPORTED_PROBLEMS} more)"
            if len(problems) > MAX_REPORTED_PROBLEMS
            else ""
        )
        raise PromptError(f"{path}: {len(problems)} prompt row(s) cannot be rolled out: {shown}{more}")
    if not rows:
        raise PromptError(f"{path} holds no prompts")
    return [row for _, row in rows]


def prompt_id(row: dict[str, Any]) -> str:
    if "id" in row:
        return str(row["id"])
    canonical = json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)
    return "h" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def to_trajectories(rows: list[dict[str, Any]], samples_per_prompt: int = 1) -> list[dict[str, Any]]:
    """One trajectory per prompt and sample, each with ``trajectory_id``, ``prompt_id``, ``sample_index``,
    ``group_id`` and ``group_size``."""
    explicit = Counter(str(r["id"]) for r in rows if "id" in r)
    repeated = sorted(i for i, n in explicit.items() if n > 1)
    if repeated:
        raise PromptError(f"prompt ids must be unique; repeated: {repeated[:10]}")
    seen: Counter[str] = Counter()
    out = []
    for row in rows:
        base = prompt_id(row)
        seen[base] += 1
        pid = base if seen[base] == 1 else f"{base}~{seen[base]}"
        trajectory = {k: v for k, v in row.items() if k not in ("id", "prompt")}
        if "prompt" in row:
            trajectory["messages"] = [{"role": "user", "content": row["prompt"]}]
        for k in range(samples_per_prompt):
            sample = dict(trajectory)
            sample["prompt_id"] = pid
            sample["sample_index"] = k
            sample["trajectory_id"] = pid if samples_per_prompt == 1 else f"{pid}/s{k}"
            sample["group_id"] = pid
            sample["group_size"] = samples_per_prompt
            out.append(sample)
    return out
