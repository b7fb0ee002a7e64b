"""The Dataset API: a caller's ``ray.data.Dataset`` through the CLI's stages equals the one-process
pipeline: the same kept rows, drop ledger and per-step statistics."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from twinkle_agentic.jobs.preprocess import PreprocessResult, process_dataset
from twinkle_agentic.jobs.preprocess.steps import ConfigError, StepSpec

from tests.support.job_data import canonical
from tests.support.paths import REPO_ROOT
from twinkle_agentic.preprocessor import HardFilter, run_pipeline
from twinkle_agentic.preprocessor.step_specs import read_pipeline_config

pytestmark = pytest.mark.integration

SAMPLE = REPO_ROOT / "data" / "sample" / "chats.jsonl"


def sample_dataset():
    import ray.data

    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    return ray.data.from_items([{"text": line} for line in lines]), lines


def test_dataset_through_the_default_pipeline_equals_run_pipeline(ray_local):
    ds, _ = sample_dataset()
    steps = read_pipeline_config(None)[0]["steps"]  # the bundled default, as YAML entries
    result = process_dataset(ds, steps, text_column="text", batch_size=64)
    assert isinstance(result, PreprocessResult)
    reference = run_pipeline([str(SAMPLE)])

    kept = [json.loads(r["row"]) for r in result.kept.take_all()]
    assert Counter(map(canonical, kept)) == Counter(map(canonical, reference.kept))
    ledger = result.dropped.take_all()
    assert Counter((e["step"], e["reason"], canonical(json.loads(e["row"]))) for e in ledger) == Counter(
        (step, reason, canonical(row)) for step, reason, row in reference.dropped
    )
    assert {e["source"] for e in ledger} == {"dataset"}

    assert (result.rows_read, result.kept_rows, result.dropped_rows) == (
        reference.rows_read,
        len(reference.kept),
        len(reference.dropped),
    )
    by_step = Counter((step, reason) for step, reason, _ in reference.dropped)
    rows = reference.rows_read
    assert [s.step for s in result.stats] == ["read"] + [
        next(iter(e)) if isinstance(e, dict) else e for e in steps
    ]
    for stats in result.stats:
        assert stats.before == rows
        assert dict(stats.reasons) == {r: n for (s, r), n in by_step.items() if s == stats.step}
        rows -= stats.dropped
        assert stats.after == rows
    assert rows == len(reference.kept)


def test_step_objects_specs_and_lineage_number_rows_by_position(ray_local):
    ds, lines = sample_dataset()
    steps = [HardFilter(), StepSpec("DedupFilter")]
    result = process_dataset(ds, steps, text_column="text", source="sample", lineage=True, batch_size=50)
    reference = run_pipeline([str(SAMPLE)], steps=[HardFilter(), "DedupFilter"], lineage=True)
    kept = result.kept.take_all()
    assert sorted((r["line"], canonical(json.loads(r["row"]))) for r in kept) == sorted(
        (r["line"], canonical(r["row"])) for r in reference.kept
    )
    assert {r["source"] for r in kept} == {"sample"}
    for record in kept:  # line N is the dataset's N-th row: here the sample file's N-th line
        assert json.loads(lines[record["line"] - 1]) == json.loads(record["row"])


def test_bad_options_are_refused_before_anything_runs(ray_local):
    ds, _ = sample_dataset()
    with pytest.raises(ConfigError, match="batch_size"):
        process_dataset(ds, ["HardFilter"], batch_size=0)
    with pytest.raises(ConfigError, match="unknown step"):
        process_dataset(ds, ["NoSuchFilter"])


def test_rows_as_ray_data_holds_them_equal_run_pipeline_over_the_same_rows(ray_local, tmp_path):
    import ray.data

    rows = [
        {"id": i, "messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for i, (q, a) in enumerate(
            [("hi", "Hello!")] * 3
            + [
                (f"How do I sort list number {i} in Python?", "Use sorted(xs) or xs.sort(). " * 3)
                for i in range(40)
            ]
            + [("How do I sort list number 7 in Python?", "Use sorted(xs) or xs.sort(). " * 3)]
        )
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = process_dataset(ray.data.from_items(rows), ["HardFilter", "DedupFilter"], batch_size=16)
    reference = run_pipeline([str(path)], ["HardFilter", "DedupFilter"])
    kept = [json.loads(r["row"]) for r in result.kept.take_all()]
    assert Counter(map(canonical, kept)) == Counter(map(canonical, reference.kept))
    assert result.dropped_rows == len(reference.dropped) > 0


def _first_block_last(batch):
    """Holds back the block with the dataset's first row so that later blocks finish first."""
    import time

    if 0 in batch["position"]:
        time.sleep(2.0)
    return batch


def test_rows_are_numbered_by_position_when_the_callers_blocks_finish_out_of_order(ray_local):
    """The caller's dataset carries the Ray Data context it was made with (order not preserved by
    default); numbering and the dedup tie-break must still follow its order, not completion order."""
    import ray.data

    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    ds = ray.data.from_items(
        [{"position": i, "text": line} for i, line in enumerate(lines)], override_num_blocks=4
    ).map_batches(_first_block_last, batch_format="numpy")
    assert ds.context.execution_options.preserve_order is False
    result = process_dataset(ds, [StepSpec("DedupFilter")], text_column="text", lineage=True, batch_size=50)
    reference = run_pipeline([str(SAMPLE)], steps=["DedupFilter"], lineage=True)
    kept = result.kept.take_all()
    assert sorted((r["line"], canonical(json.loads(r["row"]))) for r in kept) == sorted(
        (r["line"], canonical(r["row"])) for r in reference.kept
    )
    assert ds.context.execution_options.preserve_order is False  # the caller's context is left as it was
