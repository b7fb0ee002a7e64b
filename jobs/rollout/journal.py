"""The output directory of a rollout run: a resumable JSONL journal, the final file, run metadata.

The output is a local path or any pyarrow-filesystem URI (``file://``, ``s3://``, ``gs://``,
``hdfs://``; :mod:`twinkle_agentic.io.location`). The journal takes one of two forms:

- On the local file system, ``trajectories.jsonl``: each complete group (the samples of one prompt,
  see :mod:`twinkle_agentic.rollout.groups`) is appended as whole lines in one write and fsynced
  before the job moves on, so after a crash at most the groups in flight are lost, never a finished
  one. On open, a torn last line (the process died mid-write) is cut off, and so is a group left
  incomplete by it (a group's lines are contiguous and written at once, so only the last group can
  be cut short).
- Elsewhere (object stores cannot append to a file), ``trajectories/part-<n>.jsonl`` segments:
  finished groups are buffered and written as a new segment once ``flush_s`` seconds have passed
  since the last one (checked as groups arrive) or the buffer holds ``SEGMENT_MAX_BYTES``, and when
  the journal is closed, also after an error or an interrupt. Each segment is one upload of whole
  groups, published whole or not at all, so a crash loses at most the groups finished since the last
  segment (they are run again on resume), never part of one. The segments are the output: nothing
  rewrites them into one object (a copy would cost as much again, and a rewritten object can be
  lost if the rewrite fails).

The ids already present are what a resumed run skips. ``run.json`` records the settings a trajectory
depends on; resuming with different ones is refused. With ``output_format: parquet`` the journal is
converted to ``trajectories.parquet`` (typed token and policy-version columns) at the end of each
run; ``summary.json`` comes last.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.io import Location, iter_lines, locate, read_bytes, remove, write_bytes
from twinkle_agentic.io.location import fsync_directory, open_output

from .config import ConfigError
from .keyset import KeySet
from .summary import RewardStats, is_reward, policy_version_key

JOURNAL_FILE = "trajectories.jsonl"
SEGMENTS_DIR = "trajectories"  # the journal's segments where files cannot be appended to
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
PARQUET_FILE = "trajectories.parquet"
OUR_FILES = (JOURNAL_FILE, SEGMENTS_DIR, RUN_FILE, SUMMARY_FILE, PARQUET_FILE)
DERIVABLE_KEYS = ("attention_mask", "position_ids")  # ones and 0..n-1: recomputed by any loader
PARQUET_CHUNK_ROWS = 2048
SEGMENT_FLUSH_S = 10.0
SEGMENT_MAX_BYTES = 8 << 20
_SEGMENT_NAME = re.compile(r"part-(\d{8})\.jsonl")


def to_record(trajectory: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in trajectory.items() if k not in DERIVABLE_KEYS}


@dataclass
class JournalState:
    """What the journal already holds: trajectory ids, counts by stop reason and policy version, the
    groups (and failed ones), and the rewards of the scored trajectories. Ids and group ids are
    ``KeySet``s (16 bytes each), rewards a running ``RewardStats``: no string is kept per line."""

    ids: KeySet = field(default_factory=KeySet)
    stop_reasons: Counter = field(default_factory=Counter)
    policy_versions: Counter = field(default_factory=Counter)
    groups: KeySet = field(default_factory=KeySet)
    failed_groups: KeySet = field(default_factory=KeySet)
    rewards: RewardStats = field(default_factory=RewardStats)
    truncated_bytes: int = 0
    cut_members: int = 0  # lines of an incomplete last group that were cut

    def count(self, where: str, number: int, record: dict[str, Any]) -> None:
        tid = trajectory_id_of(where, number, record)
        self.ids.add(tid)
        self.stop_reasons[record.get("stop_reason")] += 1
        self.policy_versions[policy_version_key(record)] += 1
        if record.get("group_id") is not None:
            self.groups.add(str(record["group_id"]))
            if record.get("group_failed"):
                self.failed_groups.add(str(record["group_id"]))
        if is_reward(record.get("reward")):
            self.rewards.add(float(record["reward"]))


def trajectory_id_of(where: str, number: int, record: dict[str, Any]) -> str:
    tid = record.get("trajectory_id")
    if tid is None:
        raise ConfigError(f"{where} line {number} has no trajectory_id; pass --overwrite to start over")
    return str(tid)


class Journal:
    """The trajectory journal of one output directory (see the module docstring)."""

    def __init__(self, output: Location, flush_s: float | None = None, segmented: bool | None = None):
        self.output = output
        self.segmented = not output.local if segmented is None else segmented
        self.flush_s = SEGMENT_FLUSH_S if flush_s is None else flush_s
        self._handle: Any = None
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._last_flush = time.monotonic()
        self._next_segment = 0

    @property
    def path(self) -> str:
        """Where the trajectories are: ``trajectories.jsonl``, or the folder of its segments."""
        return self.output.child(SEGMENTS_DIR if self.segmented else JOURNAL_FILE).uri

    @classmethod
    def open(
        cls, output: str, fingerprint: dict[str, Any], overwrite: bool, **options: Any
    ) -> tuple[Journal, JournalState]:
        """Prepare ``output`` (a path or URI) for a run with ``fingerprint``; returns the journal and what
        it holds. ``options``: ``flush_s``, ``segmented`` (the journal's form; default: by file system)."""
        where = locate(output)
        try:
            return cls._open(where, output, fingerprint, overwrite, options)
        except OSError as exc:  # storage the driver cannot reach or write: a setting to fix
            raise ConfigError(f"cannot use output {output!r}: {exc}") from exc

    @classmethod
    def _open(
        cls,
        where: Location,
        output: str,
        fingerprint: dict[str, Any],
        overwrite: bool,
        options: dict[str, Any],
    ) -> tuple[Journal, JournalState]:
        from pyarrow import fs

        if where.filesystem.get_file_info(where.path).type == fs.FileType.File:
            raise ConfigError(f"output {output!r} is a file; pass a directory")
        journal = cls(where, **options)
        names = [where.child(name) for name in OUR_FILES]
        infos = where.filesystem.get_file_info([n.path for n in names])
        present = [
            name for name, info in zip(OUR_FILES, infos, strict=True) if info.type != fs.FileType.NotFound
        ]
        if overwrite:
            for name in present:
                remove(where.child(name))
        elif present:
            journal._check_resumable(fingerprint, present)
            journal._continue_form(present, options)
        where.filesystem.create_dir(
            where.child(SEGMENTS_DIR).path if journal.segmented else where.path, recursive=True
        )
        run = where.child(RUN_FILE)
        if overwrite or RUN_FILE not in present:
            write_bytes(run, json.dumps({"fingerprint": fingerprint}, indent=2, sort_keys=True).encode())
        return journal, journal.recover()

    def _check_resumable(self, fingerprint: dict[str, Any], present: list[str]) -> None:
        run = self.output.child(RUN_FILE)
        if RUN_FILE not in present:
            raise ConfigError(
                f"output directory {self.output.uri!r} holds {present} but no {RUN_FILE}; it is not a rollout "
                "run of this tool: pass --overwrite or choose another --output"
            )
        try:
            earlier = json.loads(read_bytes(run)).get("fingerprint", {})
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {run.uri}: {exc}; pass --overwrite to start over") from exc
        expected = json.loads(json.dumps(fingerprint))  # the JSON view, as it was written
        changed = sorted(k for k in set(expected) | set(earlier) if expected.get(k) != earlier.get(k))
        if changed:
            detail = ", ".join(f"{k}: {earlier.get(k)!r} -> {expected.get(k)!r}" for k in changed)
            raise ConfigError(
                f"output directory {self.output.uri!r} holds a run with other settings ({detail}); resuming "
                "would mix them: pass --overwrite to start over or choose another --output"
            )

    def _continue_form(self, present: list[str], options: dict[str, Any]) -> None:
        """Resume in the form the journal has: segments (copied to a local disk, say) stay segments; an
        appended ``trajectories.jsonl`` where files cannot be appended to is refused with the fix."""
        if SEGMENTS_DIR in present and options.get("segmented") is None:
            self.segmented = True
        elif self.segmented and JOURNAL_FILE in present:
            raise ConfigError(
                f"output directory {self.output.uri!r} holds {JOURNAL_FILE}, a journal written on a local "
                "disk, which this file system cannot append to: resume the run on a local --output, or move "
                f"the file to {SEGMENTS_DIR}/part-00000000.jsonl to continue it here"
            )

    def recover(self) -> JournalState:
        """Make the journal whole (locally: cut a torn last line and an incomplete last group), then read
        the ids (stop reasons, policy versions, groups, rewards) of every finished trajectory."""
        state = JournalState()
        if self.segmented:
            segments = self._segments()
            self._next_segment = max((number for number, _ in segments), default=-1) + 1
        else:
            self._cut_local_tail(state)
        for where, number, record in self._records():
            state.count(where, number, record)
        if state.ids.repeats:  # an id on two lines (journals joined by hand, say): count its first only
            once = JournalState(truncated_bytes=state.truncated_bytes, cut_members=state.cut_members)
            seen: set[str] = set()  # only ids that are repeated
            for where, number, record in self._records():
                tid = trajectory_id_of(where, number, record)
                if state.ids.added_more_than_once(tid):
                    if tid in seen:
                        continue
                    seen.add(tid)
                once.count(where, number, record)
            state = once
        return state

    def _cut_local_tail(self, state: JournalState) -> None:
        path = self.output.child(JOURNAL_FILE).path
        if not os.path.exists(path):
            return
        size = os.path.getsize(path)
        with open(path, "rb+") as handle:
            if size:
                handle.seek(max(0, size - 1))
                if handle.read(1) != b"\n":
                    keep = _last_newline_end(handle, size)
                    handle.truncate(keep)
                    handle.flush()
                    os.fsync(handle.fileno())
                    state.truncated_bytes = size - keep
            partial = _incomplete_last_group(path)
            if partial is not None:
                offset, members = partial
                handle.truncate(offset)
                handle.flush()
                os.fsync(handle.fileno())
                state.cut_members = members

    def _segments(self) -> list[tuple[int, Location]]:
        """The journal's segments in order (a temporary file of an unfinished segment is left out)."""
        from pyarrow import fs

        folder = self.output.child(SEGMENTS_DIR)
        infos = self.output.filesystem.get_file_info(fs.FileSelector(folder.path, allow_not_found=True))
        found = []
        for info in infos:
            name = info.path.rsplit("/", 1)[-1]
            match = _SEGMENT_NAME.fullmatch(name)
            if match and info.type == fs.FileType.File:
                found.append((int(match.group(1)), folder.child(name)))
        return sorted(found, key=lambda item: item[0])

    def _records(self) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """``(file, line number, record)`` of every line of the journal, in order."""
        files = (
            [where for _, where in self._segments()] if self.segmented else [self.output.child(JOURNAL_FILE)]
        )
        for where in files:
            if not where.exists():
                continue
            for number, line in iter_lines(where.uri):
                yield where.uri, number, _decode(where.uri, number, line)

    def append(self, trajectories: list[dict[str, Any]]) -> None:
        """Add whole lines (whole groups: see the module docstring). Locally they are written in one write
        and made durable (flush + fsync) before this returns; elsewhere they are buffered for a segment."""
        if not trajectories:
            return
        data = "".join(json.dumps(to_record(t), ensure_ascii=False, default=str) + "\n" for t in trajectories)
        encoded = data.encode("utf-8", "surrogatepass")
        if self.segmented:
            self._buffer.append(encoded)
            self._buffered += len(encoded)
            if self._buffered >= SEGMENT_MAX_BYTES or time.monotonic() - self._last_flush >= self.flush_s:
                self.flush()
            return
        if self._handle is None:
            path = self.output.child(JOURNAL_FILE).path
            created = not os.path.exists(path)
            self._handle = open(path, "ab")  # noqa: SIM115 - held open across batches, closed in close()
            if created:  # the file's directory entry must survive a crash too
                fsync_directory(self.output.path)
        self._handle.write(encoded)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def flush(self) -> None:
        """Write the buffered groups as the next segment (segmented journal; nothing buffered: no-op)."""
        if not self._buffer:
            return
        name = f"part-{self._next_segment:08d}.jsonl"
        write_bytes(self.output.child(SEGMENTS_DIR, name), b"".join(self._buffer))
        self._next_segment += 1
        self._buffer, self._buffered = [], 0
        self._last_flush = time.monotonic()

    def close(self) -> None:
        """Write what is buffered and release the file; the journal can be appended to again after."""
        self.flush()
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def write_summary(self, summary: dict[str, Any]) -> str:
        where = self.output.child(SUMMARY_FILE)
        write_bytes(where, json.dumps(summary, indent=2, ensure_ascii=False, default=str).encode("utf-8"))
        return where.uri

    def write_parquet(self) -> str:
        """Convert the journal to ``trajectories.parquet``; a conversion that fails leaves no file."""
        import pyarrow.parquet as pq

        where = self.output.child(PARQUET_FILE)
        with open_output(where) as stream:
            writer = pq.ParquetWriter(stream, parquet_schema())
            chunk: list[dict[str, Any]] = []
            for _, _, record in self._records():
                chunk.append(record)
                if len(chunk) >= PARQUET_CHUNK_ROWS:
                    _write_chunk(writer, chunk)
                    chunk = []
            if chunk:
                _write_chunk(writer, chunk)
            writer.close()  # the footer: only a complete conversion gets one
        pq.read_metadata(where.path, filesystem=where.filesystem)  # fail here, not in the trainer
        return where.uri


def _decode(where: str, number: int, line: bytes) -> dict[str, Any]:
    try:
        record = json.loads(line.decode("utf-8", "surrogatepass"))
    except ValueError as exc:
        raise ConfigError(
            f"{where} line {number} is not JSON ({exc}); pass --overwrite to start over"
        ) from exc
    if not isinstance(record, dict):
        raise ConfigError(f"{where} line {number} is not a JSON object; pass --overwrite to start over")
    return record


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
                    size = (
                        record.get("group_size")
                        if gid is not None and isinstance(record.get("group_size"), int)
                        else 1
                    )
                count += 1
            offset += len(line)
    return (start, count) if group is not None and count < size else None


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
                        [
                            pa.field("version", pa.int64()),
                            pa.field("start", pa.int32()),
                            pa.field("end", pa.int32()),
                        ]
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


def _write_chunk(writer: Any, records: list[dict[str, Any]]) -> None:
    import pyarrow as pa

    schema = parquet_schema()
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    for record in records:
        for name in TYPED_COLUMNS:
            value = record.get(name)
            columns[name].append(
                str(value)
                if name in ("trajectory_id", "prompt_id", "group_id") and value is not None
                else value
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
    writer.write_table(table)
