"""Floors on the labelled evaluation set (bench/data/pii_eval.jsonl; figures: python bench/pii.py)."""

from __future__ import annotations

import pytest

GROUPS = {"CN_PHONE": "PHONE", "PHONE_NUMBER": "PHONE", "CN_LANDLINE": "PHONE", "CREDIT_CARD": "CARD", "CN_BANK": "CARD"}


def _group(entity: str) -> str:
    return GROUPS.get(entity, entity)


def _overlaps(p, g) -> bool:
    return _group(p.entity) == _group(g["entity"]) and p.start < g["end"] and g["start"] < p.end


def _recall(records, predictions, entities, lang=None) -> float:
    hit = total = 0
    for record, spans in zip(records, predictions, strict=True):
        if lang and record["lang"] != lang:
            continue
        for g in record["spans"]:
            if g["entity"] in entities:
                total += 1
                hit += any(_overlaps(p, g) for p in spans)
    assert total >= 10
    return hit / total


def test_eval_set_size(eval_records):
    assert len(eval_records) >= 300
    assert {r["lang"] for r in eval_records} == {"en", "zh"}
    assert {r["part"] for r in eval_records} == {"faker", "hand", "negative"}


@pytest.mark.parametrize(
    "entities, floor",
    [
        (("EMAIL_ADDRESS",), 0.95),
        (("PHONE_NUMBER", "CN_PHONE", "CN_LANDLINE"), 0.95),
        (("CN_ID",), 0.95),
        (("CREDIT_CARD", "CN_BANK"), 0.95),
    ],
)
def test_recall_floors(eval_records, eval_predictions, entities, floor):
    assert _recall(eval_records, eval_predictions, entities) >= floor


def test_english_person_recall(eval_records, eval_predictions):
    assert _recall(eval_records, eval_predictions, ("PERSON",), lang="en") >= 0.85


def test_overall_precision(eval_records, eval_predictions):
    matched = total = 0
    for record, spans in zip(eval_records, eval_predictions, strict=True):
        for p in spans:
            total += 1
            matched += any(_overlaps(p, g) for g in record["spans"])
    assert matched / total >= 0.9


def test_hard_negatives_are_clean(eval_records, eval_predictions):
    noisy = [(r["id"], [r["text"][s.start : s.end] for s in spans])
             for r, spans in zip(eval_records, eval_predictions, strict=True) if r["part"] == "negative" and spans]
    assert noisy == []
