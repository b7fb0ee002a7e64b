"""The run's human-readable report: the drop-reason chart and the markdown table."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.fs
import pytest
from PIL import Image
from twinkle_agentic.jobs.preprocess.report import RunSummary, render_chart, render_markdown

from tests.support.paths import REPO_ROOT
from twinkle_agentic.preprocessor.stats import StepStats

STEPS = [
    StepStats("read", 10, 9, 1, 0.01, Counter(malformed_json=1)),
    StepStats("HardFilter", 9, 6, 3, 0.02, Counter(too_short=1, empty_message=2)),
    StepStats("DedupFilter", 6, 6, 0, 0.01, Counter()),
]


def test_chart_has_one_bar_per_step_and_reason_and_none_without_drops():
    png = render_chart(STEPS)
    assert png is not None and png[:4] == b"\x89PNG"
    width, height = Image.open(io.BytesIO(png)).size
    assert width == 800 and height == round(100 * (0.4 * 3 + 1.2))  # three bars, 8 in wide at 100 dpi
    assert render_chart([StepStats("read", 5, 5, 0, 0.0, Counter())]) is None


def test_chart_leaves_the_callers_matplotlib_state_alone():
    """The job runs inside notebooks and services: drawing its chart must not switch their backend
    or load pyplot (whose global figure registry a long-lived process would fill)."""
    script = (
        "import sys, matplotlib; from collections import Counter\n"
        "from jobs.preprocess.report import render_chart\n"
        "from twinkle_agentic.preprocessor.stats import StepStats\n"
        "assert render_chart([StepStats('read', 2, 1, 1, 0.0, Counter(malformed_json=1))])[:4] == b'\\x89PNG'\n"
        "print(matplotlib.get_backend(), 'matplotlib.pyplot' in sys.modules)\n"
    )
    env = {**os.environ, "MPLBACKEND": "svg"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["svg", "False"]


def test_markdown_lists_every_step_with_reasons_by_count_and_links_the_chart():
    summary = RunSummary("out", 10, 6, 4, 2.0, STEPS, inputs=["a.jsonl"], cluster="local")
    text = render_markdown(summary, "drop_reasons.png")
    assert "rows read: **10**, kept **6**, dropped **4**" in text
    assert "| HardFilter | 9 | 6 | 3 | 33.3 % | 0.02 | empty_message 2, too_short 1 |" in text
    assert "| DedupFilter | 6 | 6 | 0 | 0.0 % | 0.01 | - |" in text
    assert "![drop reasons per step](drop_reasons.png)" in text
    assert "![" not in render_markdown(summary, None)


def test_stats_json_is_written_last_so_a_failed_report_leaves_none(tmp_path, monkeypatch):
    """stats.json marks a complete run (README): the chart and report.md come before it."""
    from twinkle_agentic.jobs.preprocess import report

    summary = RunSummary(str(tmp_path), 10, 6, 4, 2.0, STEPS)
    written = report.write_reports(summary, pyarrow.fs.LocalFileSystem(), str(tmp_path))
    assert [Path(p).name for p in written] == ["drop_reasons.png", "report.md", "stats.json"]

    def broken_markdown(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "render_markdown", broken_markdown)
    out = tmp_path / "second"
    out.mkdir()
    with pytest.raises(RuntimeError, match="disk full"):
        report.write_reports(summary, pyarrow.fs.LocalFileSystem(), str(out))
    assert (out / "drop_reasons.png").exists() and not (out / "stats.json").exists()
