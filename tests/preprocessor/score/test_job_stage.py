"""ScoreFilter as a stage of the preprocess job: configured like YAML, run by a Ray Data actor pool.

The backend is an OpenAI-compatible server (the scripted one: an engine per actor would not fit the
test budget); the actor builds its client in ``warmup()`` and scores its batches over HTTP.
"""

from __future__ import annotations

import json

import pytest

from twinkle_agentic.preprocessor import ScoreFilter

pytestmark = pytest.mark.integration


def rows() -> list[dict]:
    out = []
    for i in range(24):
        answer = "the quick brown fox" if i % 3 == 0 else f"Entry {i}: ZQX VWK {i * 7}"
        out.append(
            {
                "id": f"r{i}",
                "messages": [
                    {"role": "user", "content": "Say: the quick brown fox"},
                    {"role": "assistant", "content": answer},
                ],
            }
        )
    return out


def test_score_filter_runs_as_an_actor_pool_stage(ray_local, scripted, tmp_path):
    from twinkle_agentic.jobs.preprocess.config import PreprocessConfig
    from twinkle_agentic.jobs.preprocess.job import plan, run
    from twinkle_agentic.jobs.preprocess.steps import StepSpec

    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    kwargs = {
        "scorers": ["sifd", {"type": "chr_min", "threshold": 0.47}],
        "backend": {"type": "openai", "base_url": scripted.url, "model": "scripted", "max_retries": 0},
    }
    cfg = PreprocessConfig(
        inputs=[str(data)],
        output=str(tmp_path / "out"),
        steps=[StepSpec("ScoreFilter", kwargs)],
        batch_size=8,
        progress=False,
    )
    _, steps, _, stages = plan(cfg)
    assert [s.kind for s in stages] == ["map", "actor"] and steps[0].needs_actor

    summary = run(cfg)
    expected_kept, expected_dropped = ScoreFilter(**kwargs)(rows())
    assert summary.rows_read == 24
    assert summary.kept == len(expected_kept) and summary.dropped == len(expected_dropped) == 8
    (step,) = [s for s in summary.steps if s.step == "ScoreFilter"]
    assert dict(step.reasons) == {"score_round_failed": 8}
    # the actor scored over HTTP: its warm-up tokenised, then each batch fetched prompt logprobs
    assert {"/tokenize", "/v1/completions"} <= set(scripted.paths())
