"""The output directory of a rollout run: a resumable JSONL journal, the final file, run metadata.

``trajectories.jsonl`` is the journal: each complete group (the samples of one prompt, see
:mod:`twinkle_agentic.rollout.groups`) is appended as whole lines in one write and fsynced before the
job moves on, so after a crash at most the groups in flight are lost, never a finished one. On open,
a torn last line (the process died mid-write) is cut off, and so is a group left incomplete by it
(a group's lines are contiguous and written at once, so only the last group can be cut short); the
ids already present are what a resumed run skips. ``run.json`` records the settings a trajectory depends on; resuming
with different ones is refused. With ``output_format: parquet`` the journal is converted to
``trajectories.parquet`` (typed token and policy-version columns) once the run is complete.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .config import ConfigError
from .summary import is_reward, policy_version_key

JOURNAL_FILE = "trajectories.jsonl"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
PARQUET_FILE = "trajectories.parquet"
OUR_FILES = (JOURNAL_FILE, RUN_FILE, SUMMARY_FILE, PARQUET_FILE)
DERIVABLE_KEYS = ("attention_mask", "position_ids")  # ones and 0..n-1: recomputed by any loader
PARQUET_CHUNK_ROWS = 2048


def to_record(trajectory: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in trajectory.items() if k not in DERIVABLE_KEYS}


@dataclass
class JournalState:
    """What the journal already holds: trajectory ids, counts by stop reason and policy version, the
    groups (and failed ones), and the rewards of the scored trajectories."""

    ids: set[str] = field(default_factory=set)
    stop_reasons: Counter = field(default_factory=Counter)
    policy_versions: Counter = field(default_factory=Counter)
    groups: set[str] = field(default_factory=set)
    failed_groups: set[str] = field(default_factory=set)
    rewards: list[float] = field(default_factory=list)
    truncated_bytes: int = 0
    cut_members: int = 0  # lines of an incomplete last group that were cut


class Journal:
    """Append-only trajectory journal in ``directory`` (see the module docstring)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, JOURNAL_FILE)
        self._handle: Any = None

    @classmethod
    def open(
        cls, directory: str, fingerprint: dict[str, Any], overwrite: bool
    ) -> tuple[Journal, JournalState]:
        """Prepare ``directory`` for a run with ``fingerprint``; returns the journal and what it holds."""
        if os.path.isfile(directory):
            raise ConfigError(f"output {directory!r} is a file; pass a directory")
        journal = cls(directory)
        run_path = os.path.join(directory, RUN_FILE)
        present = [name for name in OUR_FILES if os.path.exists(os.path.join(directory, name))]
        if overwrite:
            for name in present:
                os.remove(os.path.join(directory, name))
        elif present:
            journal._check_resumable(run_path, fingerprint, present)
        os.makedirs(directory, exist_ok=True)
        if not os.path.exists(run_path):
            _atomic_write(run_path, json.dumps({"fingerprint": fingerprint}, indent=2, sort_keys=True))
        return journal, journal.recover()

    def _check_resumable(self, run_path: str, fingerprint: dict[str, Any], present: list[str]) -> None:
        if not os.path.exists(run_path):
            raise ConfigError(
                f"output directory {self.directory!r} holds {present} but no {RUN_FILE}; it is not a rollout run "
                "of this tool: pass --overwrite or choose another --output"
            )
        try:
            with open(run_path, encoding="utf-8") as handle:
                earlier = json.load(handle).get("fingerprint", {})
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {run_path}: {exc}; pass --overwrite to start over") from exc
        expected = json.loads(json.dumps(fingerprint))  # the JSON view, as it was written
        changed = sorted(k for k in set(expected) | set(earlier) if expected.get(k) != earlier.get(k))
        if changed:
            detail = ", ".join(f"{k}: {earlier.get(k)!r} -> {expected.get(k)!r}" for k in changed)
            raise ConfigError(
                f"output directory {self.directory!r} holds a run with other settings ({detail}); resuming would mix "
                "them: pass --overwrite to start over or choose another --output"
            )

    def recover(self) -> JournalState:
        """Cut a torn last line and an incomplete last group, then read the ids (stop reasons, policy
        versions, groups, rewards) of every finished trajectory."""
        state = JournalState()
        if not os.path.exists(self.path):
            return state
        size = os.path.getsize(self.path)
        with open(self.path, "rb+") as handle:
            if size:
                handle.seek(max(0, size - 1))
                if handle.read(1) != b"\n":
                    keep = _last_newline_end(handle, size)
                    handle.truncate(keep)
                    handle.flush()
                    os.fsync(handle.fileno())
                    state.truncated_bytes = size - keep
            partial = _incomplete_last_group(self.path)
            if partial is not None:
                offset, members = partial
                handle.truncate(offset)
                handle.flush()
                os.fsync(handle.fileno())
                state.cut_members = members
        for number, record in _records(self.path):
            tid = record.get("trajectory_id")
            if tid is None:
                raise ConfigError(
                    f"{self.path} line {number} has no trajectory_id; pass --overwrite to start over"
                )
            if tid not in state.ids:
                state.ids.add(str(tid))
                state.stop_reasons[record.get("stop_reason")] += 1
                state.policy_versions[policy_version_key(record)] += 1
                if record.get("group_id") is not None:
                    state.groups.add(str(record["group_id"]))
                    if record.get("group_failed"):
                        state.failed_groups.add(str(record["group_id"]))
                if is_reward(record.get("reward")):
                    state.rewards.append(float(record["reward"]))
        return state

    def append(self, trajectories: list[dict[str, Any]]) -> None:
        """Append whole lines in one write (whole groups: see the module docstring) and make them durable
        (flush + fsync) before returning."""
        if not trajectories:
            return
        if self._handle is None:
            created = not os.path.exists(self.path)
            self._handle = open(self.path, "ab")  # noqa: SIM115 - held open across batches, closed in close()
            if created:  # the file's directory entry must survive a crash too
                _fsync_directory(self.directory)
        text = "".join(json.dumps(to_record(t), ensure_ascii=False, default=str) + "\n" for t in trajectories)
        self._handle.write(text.encode("utf-8", "surrogatepass"))
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def write_summary(self, summary: dict[str, Any]) -> str:
        path = os.path.join(self.directory, SUMMARY_FILE)
        _atomic_write(path, json.dumps(summary, indent=2, ensure_ascii=False, default=str))
        return path

    def write_parquet(self) -> str:
        """Convert the journal to ``trajectories.parquet`` (temp file, then rename)."""
        import pyarrow.parquet as pq

        path = os.path.join(self.directory, PARQUET_FILE)
        tmp = path + ".tmp"
        writer = None
        try:
            chunk: list[dict[str, Any]] = []
            for _, record in _records(self.path):
                chunk.append(record)
                if len(chunk) >= PARQUET_CHUNK_ROWS:
                    writer = _write_chunk(writer, tmp, chunk)
                    chunk = []
            writer = _write_chunk(writer, tmp, chunk, force=writer is None)
        finally:
            if writer is not None:
                writer.close()
        os.replace(tmp, path)
        pq.read_metadata(path)  # fail here, not in the trainer, if the file is unreadable
        return path


def _last_newline_end(handle: Any, size: int) -> int:
    """Offset just after the last ``\\n`` of the file (0 when there is none)."""
    block = 1 << 16
    end = size
    while end > 0:
        start = max(0, end - block)
        handle.seek(start)
        data = handle.read(end - start)
        index = data.rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def _incomplete_last_group(path: str) -> tuple[int, int] | None:
    """``(offset of its first line, its lines)`` when the file's last group has fewer lines than its
    ``group_size``; None when it is complete (or the lines carry no group)."""
    start = offset = 0
    group: Any = None
    size = count = 0
    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                try:
                    record = json.loads(line)
                except ValueError:
                    record = {}
                gid = record.get("group_id") if isinstance(record, dict) else None
                if gid is None or gid != group or count >= size:
                    start, group, count = offset, gid, 0
                    size = record.get("group_size") if gid is not None and isinstance(record.get("group_size"), int) else 1
                count += 1
            offset += len(line)
    return (start, count) if group is not None and count < size else None


def _records(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8", errors="surrogatepass") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ConfigError(
                    f"{path} line {number} is not JSON ({exc}); pass --overwrite to start over"
                ) from exc
            yield number, record


def _atomic_write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_directory(os.path.dirname(path))


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- Parquet ------------------------------------------------------------------------------------------

TYPED_COLUMNS = (
    "trajectory_id", "prompt_id", "sample_index", "input_ids", "labels", "logprobs", "length", "turns",
    "stop_reason", "truncated", "error", "token_drift", "worker", "attempts", "policy_version", "policy_versions",
    "group_id", "group_size", "reward", "reward_components", "reward_error", "advantage", "group_failed",
    "group_error", "member_attempts",
)  # fmt: skip
JSON_COLUMNS = ("messages", "tools", "user_data", "env_rewards")


def parquet_schema() -> Any:
    """Fixed columns, so every run's file has the same shape: token columns typed for training (with
    ``policy_versions`` as ``{version, start, end}`` structs over ``input_ids``), the group and reward
    columns typed (``reward_components`` a map of name to float), the schemaless parts (messages,
    tools, anything else) as JSON text."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("trajectory_id", pa.string()),
            pa.field("prompt_id", pa.string()),
            pa.field("sample_index", pa.int32()),
            pa.field("input_ids", pa.list_(pa.int32())),
            pa.field("labels", pa.list_(pa.int32())),
            pa.field("logprobs", pa.list_(pa.float32())),
            pa.field("length", pa.int32()),
            pa.field("turns", pa.int32()),
            pa.field("stop_reason", pa.string()),
            pa.field("truncated", pa.bool_()),
            pa.field("error", pa.string()),
            pa.field("token_drift", pa.int32()),
            pa.field("worker", pa.int32()),
            pa.field("attempts", pa.int32()),
            pa.field("policy_version", pa.int64()),
            pa.field(
                "policy_versions",
                pa.list_(
                    pa.struct(
                        [pa.field("version", pa.int64()), pa.field("start", pa.int32()), pa.field("end", pa.int32())]
                    )
                ),
            ),
            pa.field("group_id", pa.string()),
            pa.field("group_size", pa.int32()),
            pa.field("reward", pa.float64()),
            pa.field("reward_components", pa.map_(pa.string(), pa.float64())),
            pa.field("reward_error", pa.string()),
            pa.field("advantage", pa.float64()),
            pa.field("group_failed", pa.bool_()),
            pa.field("group_error", pa.string()),
            pa.field("member_attempts", pa.int32()),
        ]
        + [pa.field(name, pa.large_string()) for name in JSON_COLUMNS]
        + [pa.field("extra", pa.large_string())]
    )


def _write_chunk(writer: Any, path: str, records: list[dict[str, Any]], force: bool = False) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not records and not force:
        return writer
    schema = parquet_schema()
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    for record in records:
        for name in TYPED_COLUMNS:
            value = record.get(name)
            columns[name].append(
                str(value) if name in ("trajectory_id", "prompt_id", "group_id") and value is not None else value
            )
        for name in JSON_COLUMNS:
            value = record.get(name)
            columns[name].append(
                None if value is None else json.dumps(value, ensure_ascii=False, default=str)
            )
        extra = {k: v for k, v in record.items() if k not in TYPED_COLUMNS and k not in JSON_COLUMNS}
        columns["extra"].append(json.dumps(extra, ensure_ascii=False, default=str) if extra else None)
    table = pa.table(
        {name: pa.array(columns[name], schema.field(name).type) for name in schema.names}, schema=schema
    )
    if writer is None:
        writer = pq.ParquetWriter(path, schema)
    writer.write_table(table)
    return writer
