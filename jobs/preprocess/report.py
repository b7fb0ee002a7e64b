"""Run statistics: ``stats.json`` (always the same keys), ``report.md`` and a drop-reason chart."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.preprocessor.stats import StepStats

STATS_FILE = "stats.json"
REPORT_FILE = "report.md"
CHART_FILE = "drop_reasons.png"


@dataclass
class RunSummary:
    output: str
    rows_read: int
    kept: int
    dropped: int
    seconds: float
    steps: list[StepStats]
    config: dict[str, Any] = field(default_factory=dict)
    # each input file: {"uri", "size_bytes", "sha256"} of the bytes as stored (twinkle_agentic.io.file_digest)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    cluster: str = ""
    # a resumable run (--resume): its id, how many inputs came from checkpoints or were processed (.resume)
    resume: dict[str, Any] | None = None
    already_complete: bool = False  # a resume found the run finished and did nothing

    @property
    def rows_per_s(self) -> float:
        return self.rows_read / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        if self.already_complete:
            return (
                f"preprocess: the run in the output is already complete (read {self.rows_read:,} rows -> kept "
                f"{self.kept:,}, dropped {self.dropped:,}); nothing to resume; output: {self.output}"
            )
        resumed = ""
        if self.resume and self.resume.get("resumed"):
            resumed = (
                f"resumed: {self.resume['inputs_reused']:,} input(s) from checkpoints, "
                f"{self.resume['inputs_processed']:,} read; "
            )
        return (
            f"preprocess: read {self.rows_read:,} rows -> kept {self.kept:,}, dropped {self.dropped:,} "
            f"in {self.seconds:.1f} s ({self.rows_per_s:,.0f} rows/s); {resumed}output: {self.output}"
        )

    @classmethod
    def from_stats(cls, output: str, stats: dict[str, Any]) -> RunSummary:
        """The summary a stats.json holds (a complete run's, read back by a resume)."""
        return cls(
            output=output,
            rows_read=stats["rows_read"],
            kept=stats["kept"],
            dropped=stats["dropped"],
            seconds=stats["seconds"],
            steps=[StepStats.from_dict(s) for s in stats["steps"]],
            config=stats["config"],
            inputs=stats["inputs"],
            cluster=stats["cluster"],
            resume=stats.get("resume"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows_read": self.rows_read,
            "kept": self.kept,
            "dropped": self.dropped,
            "seconds": round(self.seconds, 3),
            "rows_per_s": round(self.rows_per_s, 1),
            "steps": [s.to_dict() for s in self.steps],
            "inputs": self.inputs,
            "cluster": self.cluster,
            "resume": self.resume,
            "config": self.config,
        }


def render_markdown(summary: RunSummary, chart: str | None) -> str:
    lines = [
        "# Preprocess run",
        "",
        f"- rows read: **{summary.rows_read:,}**, kept **{summary.kept:,}**, dropped **{summary.dropped:,}**",
        f"- wall time {summary.seconds:.1f} s, {summary.rows_per_s:,.0f} rows/s",
        f"- inputs: {len(summary.inputs)} file(s); cluster: {summary.cluster or 'n/a'}",
        "",
        "| step | rows in | rows out | dropped | share dropped | time (s, summed over tasks) | reasons |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for s in summary.steps:
        share = f"{100 * s.dropped / s.before:.1f} %" if s.before else "-"
        reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(s.reasons.items(), key=lambda kv: -kv[1])) or "-"
        lines.append(
            f"| {s.step} | {s.before:,} | {s.after:,} | {s.dropped:,} | {share} | {s.seconds:.2f} | {reasons} |"
        )
    if chart:
        lines += ["", f"![drop reasons per step]({chart})"]
    lines += ["", "Dropped rows, with step, reason, source file and line, are in `dropped/`.", ""]
    return "\n".join(lines)


def render_chart(steps: list[StepStats]) -> bytes | None:
    """A horizontal bar chart of drops per (step, reason), PNG bytes; None when nothing was dropped.

    Drawn on a bare ``Figure`` with the Agg canvas, not through pyplot: the job runs inside callers'
    processes (notebooks, services), whose matplotlib backend and open figures it must not touch."""
    bars = [(f"{s.step}: {r}", n) for s in steps for r, n in sorted(s.reasons.items()) if n]
    if not bars:
        return None
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = [b[0] for b in bars][::-1]
    values = [b[1] for b in bars][::-1]
    fig = Figure(figsize=(8, 0.4 * len(bars) + 1.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.barh(labels, values, color="#4c72b0")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:,}", va="center", fontsize=8)
    ax.set_xlabel("rows dropped")
    ax.set_title("Drop reasons per step")
    ax.margins(x=0.15)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def write_reports(summary: RunSummary, filesystem: Any, root: str) -> list[str]:
    """Write the chart, report.md and, last, stats.json into ``root``; returns the paths written.

    stats.json goes last, whole or not at all (``write_bytes``), so that its presence marks a run
    whose data and reports are all written."""
    import posixpath

    from twinkle_agentic.io.location import Location, write_bytes

    written = []

    def put(name: str, data: bytes) -> None:
        path = posixpath.join(root, name)
        write_bytes(Location(filesystem, path), data)
        written.append(path)

    chart = render_chart(summary.steps)
    if chart is not None:
        put(CHART_FILE, chart)
    put(REPORT_FILE, render_markdown(summary, CHART_FILE if chart else None).encode())
    put(STATS_FILE, (json.dumps(summary.to_dict(), ensure_ascii=False, indent=2) + "\n").encode())
    return written
