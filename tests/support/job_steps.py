"""Steps used by the job tests (workers import this module by name: tests/jobs is on their path)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from twinkle_agentic.preprocessor.base import Filter, Mapper


class ShoutMapper(Mapper):
    """Upper-cases user text: a mapper, so the job must write rewritten rows."""

    def map_row(self, row: dict) -> dict:
        messages = [
            {**m, "content": m["content"].upper()}
            if m.get("role") == "user" and isinstance(m.get("content"), str)
            else m
            for m in row.get("messages") or []
        ]
        return {**row, "messages": messages}


class ModelStep(Filter):
    """Pretends to hold a model: loads it in ``warmup`` (eagerly) or on first use (lazily), and
    leaves a marker file per load so tests can count loads per process."""

    needs_actor = True

    def __init__(self, marker_dir: str, drop_if_contains: str = "SQL"):
        self.marker_dir = marker_dir
        self.drop_if_contains = drop_if_contains
        self.loaded_in: int | None = None

    def _load(self, how: str) -> None:
        self.loaded_in = os.getpid()
        Path(self.marker_dir, f"{how}-{os.getpid()}").write_text("loaded")

    def warmup(self) -> None:
        self._load("warmup")

    def reason(self, row: dict) -> str | None:
        if self.loaded_in != os.getpid():
            self._load("lazy")
        text = " ".join(str(m.get("content")) for m in row.get("messages") or [])
        return "mentions_sql" if self.drop_if_contains in text else None


class LosesKeys:
    """Breaks the step contract: returns rows without their other keys."""

    name = "LosesKeys"

    def __call__(self, rows):
        return [{"messages": r.get("messages")} for r in rows], []


class StallsWhenRunning:
    """Leaves a marker file when it gets its first batch, then holds it for ``stall_s`` seconds: a
    run that is certainly under way, and cannot finish, when a test interrupts it."""

    name = "StallsWhenRunning"

    def __init__(self, marker_dir: str, stall_s: float = 300.0):
        self.marker_dir = marker_dir
        self.stall_s = stall_s

    def __call__(self, rows):
        Path(self.marker_dir, f"running-{os.getpid()}").write_text("running")
        time.sleep(self.stall_s)
        return rows, []


class Explodes:
    """A buggy step: raises on any batch."""

    name = "Explodes"

    def __call__(self, rows):
        raise ValueError("cannot handle these rows")


class FailsToLoad:
    """A model step whose model is missing: its ``warmup`` raises, as a real one's load would."""

    name = "FailsToLoad"
    needs_actor = True

    def warmup(self) -> None:
        raise FileNotFoundError("no model weights at /models/pii-xl")

    def __call__(self, rows):
        return rows, []


class NodeStamp(Mapper):
    """Writes the id of the Ray node that ran it into each row, after ``delay_s`` per row: which node
    read which rows, in the fused read+first-stage tasks. With ``wait_file`` each row first waits (at
    most 120 s) for that file to exist, so the tasks already running outlast an event the test makes."""

    def __init__(self, delay_s: float = 0.0, wait_file: str | None = None):
        self.delay_s = delay_s
        self.wait_file = wait_file

    def map_row(self, row: dict) -> dict:
        import ray

        deadline = time.monotonic() + 120
        while self.wait_file and not os.path.exists(self.wait_file) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(self.delay_s)
        return {**row, "node": ray.get_runtime_context().get_node_id()}



class RecordsRows(Filter):
    """A model step (an actor pool's) that drops rows mentioning ``drop_if_contains`` and writes the id
    of each row it is given, ``<input> <line>``, to a file of its process in ``log_dir``: which rows a
    run sent through the stage. Before each row it passes the crash point ``model:<input>``
    (``jobs.preprocess.resume.crash_point``), where a test can stop a run while the stage works on
    that input."""

    needs_actor = True

    def __init__(self, log_dir: str, drop_if_contains: str = "SQL"):
        self.log_dir = log_dir
        self.drop_if_contains = drop_if_contains

    def reasons(self, rows: list[dict]) -> list[str | None]:
        from twinkle_agentic.jobs.preprocess.resume import crash_point
        from twinkle_agentic.jobs.preprocess.stages import ROW_ID_KEY

        from twinkle_agentic.io.inputs import LINE_BITS, MAX_LINE

        with open(Path(self.log_dir, f"rows-{os.getpid()}.txt"), "a") as log:
            for row in rows:
                order = row[ROW_ID_KEY]
                crash_point(f"model:{order >> LINE_BITS}")
                log.write(f"{order >> LINE_BITS} {order & MAX_LINE}\n")
                log.flush()
        texts = (" ".join(str(m.get("content")) for m in row.get("messages") or []) for row in rows)
        return ["mentions_sql" if self.drop_if_contains in text else None for text in texts]
