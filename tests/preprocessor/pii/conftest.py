"""Fixtures for the PII filter tests: one warmed-up filter (spaCy + LAC + Presidio) per session."""

from __future__ import annotations

import json

import pytest

from tests.support.paths import REPO_ROOT

EVAL_SET = REPO_ROOT / "bench" / "data" / "pii_eval.jsonl"


@pytest.fixture(scope="session")
def pii_filter():
    pytest.importorskip("presidio_analyzer")
    pytest.importorskip("spacy")
    from twinkle_agentic.preprocessor.pii import PIIPresidioFilter

    step = PIIPresidioFilter()
    step.warmup()
    return step


@pytest.fixture(scope="session")
def analyzer(pii_filter):
    return pii_filter._analyzer()


@pytest.fixture(scope="session")
def eval_records() -> list[dict]:
    with open(EVAL_SET, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="session")
def eval_predictions(analyzer, eval_records):
    return analyzer.analyze([r["text"] for r in eval_records])


@pytest.fixture(scope="session")
def find(analyzer):
    """``find(text)``: the (entity, value) pairs the analyzer reports for ``text``."""

    def run(text: str) -> list[tuple[str, str]]:
        return [(s.entity, text[s.start : s.end]) for s in analyzer.analyze([text])[0]]

    return run
