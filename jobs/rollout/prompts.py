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

The job reads the file twice, streaming, and holds no row between passes: ``check_prompts`` reports
every bad row and notes the 8-byte key of each row's base id (8 bytes per prompt while it runs) to find
the ids that repeat; ``PromptPlan.trajectories()`` then reads the file again and names each
trajectory as it goes, counting occurrences by id string only for the bases that repeat. (A key shared
by two different bases only sends both to that exact count.) ``load_prompts`` / ``to_trajectories``
are the same over lists in memory.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

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


def iter_rows(path: str) -> Iterator[tuple[int, Any]]:
    """``(line or row number, decoded row)`` pairs, read as they are needed; a line that is not JSON is
    yielded as a ``BadLine``, not skipped.

    Files are read by the project's readers (:mod:`twinkle_agentic.io`: local paths or URIs; JSON
    Lines, a ``.json`` file holding one JSON array, or Parquet; compressed or not)."""
    from pyarrow.lib import ArrowException

    from twinkle_agentic.io import JSONL, PARQUET, JSONLayoutError, format_of, iter_json_text

    layout = format_of(path) or JSONL
    try:
        if layout == PARQUET:
            yield from _parquet_rows(path)
            return
        for number, raw in iter_json_text(path, layout):
            try:
                yield number, json.loads(raw)
            except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
                yield number, BadLine(str(exc))
    except (OSError, ArrowException, JSONLayoutError) as exc:
        raise PromptError(f"cannot read prompts {path}: {exc}") from exc


def _parquet_rows(path: str, batch_rows: int = 4096) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    from twinkle_agentic.io.inputs import input_location

    filesystem, where, _ = input_location(path)
    number = 0
    with filesystem.open_input_file(where) as handle:
        for batch in pq.ParquetFile(handle).iter_batches(batch_size=batch_rows):
            for row in batch.to_pylist():
                for key in ("messages", "tools", "user_data"):  # stored as JSON text (Arrow-stable form)
                    if isinstance(row.get(key), str):
                        row[key] = json.loads(row[key])
                number += 1
                yield number, row


class BadLine:
    """A line of the prompts file that is not JSON (why: ``error``)."""

    def __init__(self, error: str):
        self.error = error


class _Problems:
    """Bad rows as they are found: the first ``MAX_REPORTED_PROBLEMS`` kept for the message, the rest counted."""

    def __init__(self, path: str):
        self.path = path
        self.shown: list[str] = []
        self.count = 0

    def check(self, number: int, row: Any) -> bool:
        """Whether ``row`` can be rolled out; notes why not."""
        problem = f"not JSON ({row.error})" if isinstance(row, BadLine) else _problem(row)
        if problem:
            self.note(f"line {number}: {problem}")
        return problem is None

    def note(self, problem: str) -> None:
        self.count += 1
        if len(self.shown) < MAX_REPORTED_PROBLEMS:
            self.shown.append(problem)

    def raise_any(self) -> None:
        if not self.count:
            return
        more = f" (and {self.count - len(self.shown)} more)" if self.count > len(self.shown) else ""
        raise PromptError(
            f"{self.path}: {self.count} prompt row(s) cannot be rolled out: {'; '.join(self.shown)}{more}"
        )


def load_prompts(path: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The prompt rows of ``path`` (the first ``limit``) in a list, checked; ``PromptError`` lists every
    bad row. (The job streams instead: ``check_prompts``.)"""
    rows = list(itertools.islice(iter_rows(path), limit))
    problems = _Problems(path)
    for number, row in rows:
        problems.check(number, row)
    problems.raise_any()
    if not rows:
        raise PromptError(f"{path} holds no prompts")
    return [row for _, row in rows]


def prompt_id(row: dict[str, Any]) -> str:
    """The row's base id: its ``id``, else ``h`` and 16 hex digits of the SHA-256 of its content."""
    if "id" in row:
        return str(row["id"])
    canonical = json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)
    return "h" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _key64(base: str) -> int:
    return int.from_bytes(hashlib.blake2b(base.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _repeated_ids(explicit: Iterable[Any]) -> list[str]:
    """The ``id`` values given more than once."""
    return sorted(i for i, n in Counter(str(i) for i in explicit).items() if n > 1)


def _repeat_error(repeated: list[str]) -> PromptError:
    return PromptError(f"prompt ids must be unique; repeated: {repeated[:10]}")


def _samples(row: dict[str, Any], pid: str, samples_per_prompt: int) -> list[dict[str, Any]]:
    """The trajectories of one prompt row named ``pid``: one per sample, in sample order."""
    trajectory = {k: v for k, v in row.items() if k not in ("id", "prompt")}
    if "prompt" in row:
        trajectory["messages"] = [{"role": "user", "content": row["prompt"]}]
    out = []
    for k in range(samples_per_prompt):
        sample = dict(trajectory)
        sample["prompt_id"] = pid
        sample["sample_index"] = k
        sample["trajectory_id"] = pid if samples_per_prompt == 1 else f"{pid}/s{k}"
        sample["group_id"] = pid
        sample["group_size"] = samples_per_prompt
        out.append(sample)
    return out


class _Namer:
    """Prompt ids in file order: the base id, then ``~2``, ``~3``... for each further row with that base.
    Occurrences are counted by string for the bases that may repeat (``counted(base)``)."""

    def __init__(self, counted: Callable[[str], bool] = lambda base: True):
        self._counted = counted
        self._seen: Counter[str] = Counter()

    def __call__(self, row: dict[str, Any]) -> str:
        base = prompt_id(row)
        if not self._counted(base):
            return base
        self._seen[base] += 1
        n = self._seen[base]
        return base if n == 1 else f"{base}~{n}"


def to_trajectories(rows: list[dict[str, Any]], samples_per_prompt: int = 1) -> list[dict[str, Any]]:
    """One trajectory per prompt and sample, each with ``trajectory_id``, ``prompt_id``, ``sample_index``,
    ``group_id`` and ``group_size``."""
    repeated = _repeated_ids(r["id"] for r in rows if "id" in r)
    if repeated:
        raise _repeat_error(repeated)
    name = _Namer()
    return [sample for row in rows for sample in _samples(row, name(row), samples_per_prompt)]


@dataclass(frozen=True)
class PromptPlan:
    """A checked prompts file: how many prompts it gives (``limit`` applied) and which base ids may
    repeat (64-bit keys, sorted); ``trajectories()`` streams what to roll out."""

    path: str
    limit: int | None
    samples_per_prompt: int
    prompts: int
    repeated: np.ndarray  # uint64 keys of base ids seen on more than one row

    def __len__(self) -> int:
        """The trajectories it asks for: prompts x samples per prompt."""
        return self.prompts * self.samples_per_prompt

    def groups(self) -> Iterator[list[dict[str, Any]]]:
        """The trajectories of each prompt (one group), in file order, read from the file as needed;
        the same ids, order and groups as ``to_trajectories(load_prompts(...))``."""
        repeated = set(self.repeated.tolist())
        name = _Namer(lambda base: _key64(base) in repeated)
        read = 0
        for number, row in itertools.islice(iter_rows(self.path), self.limit):
            read += 1
            if isinstance(row, BadLine) or _problem(row) or read > self.prompts:
                raise PromptError(f"{self.path} changed after it was checked (line {number}); rerun the job")
            yield _samples(row, name(row), self.samples_per_prompt)
        if read != self.prompts:
            raise PromptError(f"{self.path} changed after it was checked ({read} rows, was {self.prompts}); rerun the job")

    def trajectories(self) -> Iterator[dict[str, Any]]:
        for group in self.groups():
            yield from group


def check_prompts(
    path: str,
    limit: int | None = None,
    samples_per_prompt: int = 1,
    check_row: Callable[[dict[str, Any]], str | None] | None = None,
) -> PromptPlan:
    """Stream ``path`` once (its first ``limit`` rows): every bad row (``_problem``, or ``check_row``'s
    answer) goes into one ``PromptError`` listing up to ``MAX_REPORTED_PROBLEMS``; repeated ``id`` values
    are refused; the keys of repeated base ids are kept for naming. Holds 8 bytes per prompt meanwhile."""
    problems = _Problems(path)
    bases = array("Q")
    explicit = array("Q")
    prompts = 0
    for number, row in itertools.islice(iter_rows(path), limit):
        prompts += 1
        if not problems.check(number, row):
            continue
        if check_row is not None:
            problem = check_row(row)
            if problem:
                problems.note(f"line {number}: {problem}")
                continue
        key = _key64(prompt_id(row))
        bases.append(key)
        if "id" in row:
            explicit.append(key)
    problems.raise_any()
    if not prompts:
        raise PromptError(f"{path} holds no prompts")
    suspects = set(_keys_seen_twice(explicit).tolist())
    if suspects:  # ids may repeat: count them by string to be sure (a shared key alone proves nothing)
        repeated = _repeated_ids(
            row["id"]
            for _, row in itertools.islice(iter_rows(path), limit)
            if isinstance(row, dict) and "id" in row and _key64(str(row["id"])) in suspects
        )
        if repeated:
            raise _repeat_error(repeated)
    return PromptPlan(path, limit, samples_per_prompt, prompts, _keys_seen_twice(bases))


def _keys_seen_twice(keys: array) -> np.ndarray:
    """The keys that occur more than once, sorted (``keys`` is sorted in place: 1 more byte a key)."""
    values = np.frombuffer(keys, np.uint64)
    values.sort()
    return np.unique(values[1:][values[1:] == values[:-1]])
