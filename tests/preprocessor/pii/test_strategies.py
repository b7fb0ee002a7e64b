"""mask / redact / hash / replace, chosen per entity."""

from __future__ import annotations

import hashlib
import re

import pytest

from twinkle_agentic.preprocessor.pii.strategies import hash_token, mask

TEXT = "Email john.doe@gmail.com or call (212) 555-0187, ID 11010519491231002X."


def _content(step, text=TEXT):
    rows, dropped = step([{"messages": [{"role": "user", "content": text}]}])
    assert dropped == []
    return rows[0]["messages"][0]["content"]


def test_mask_and_hash_helpers():
    assert mask("13812345678") == "138****5678"
    assert mask("abc1234") == "*******"
    digest = hashlib.sha256(b"sJohn").hexdigest()[:12]
    assert hash_token("PERSON", "John", "s") == f"<PERSON:{digest}>"


@pytest.mark.parametrize(
    "strategy, expect",
    [
        ("mask", ["joh***********.com", "(21*******0187", "110***********002X"]),
        ("redact", []),
        ("hash", ["<EMAIL_ADDRESS:", "<PHONE_NUMBER:", "<CN_ID:"]),
    ],
)
def test_strategy_for_all_entities(pii_filter, strategy, expect):
    from twinkle_agentic.preprocessor.pii import PIIPresidioFilter

    step = PIIPresidioFilter(strategy=strategy, hash_salt="s", use_ner=False)
    out = _content(step)
    for value in ("john.doe@gmail.com", "(212) 555-0187", "11010519491231002X"):
        assert value not in out
    for piece in expect:
        assert piece in out
    if strategy == "redact":
        assert out == "Email  or call , ID ."


def test_entity_strategy_overrides_default(pii_filter):
    from twinkle_agentic.preprocessor.pii import PIIPresidioFilter

    step = PIIPresidioFilter(entity_strategy={"CN_ID": "mask", "EMAIL_ADDRESS": "hash"}, use_ner=False)
    out = _content(step)
    assert "110***********002X" in out
    assert re.search(r"<EMAIL_ADDRESS:[0-9a-f]{12}>", out)
    assert "(212) 555-0187" not in out and re.search(r"\(\d{3}\) \d{3}-\d{4}", out)  # replaced, same layout


def test_hash_tokens_survive_a_second_pass(pii_filter):
    from twinkle_agentic.preprocessor.pii import PIIPresidioFilter

    step = PIIPresidioFilter(strategy="hash", hash_salt="s")
    once = _content(step, "Write to Maria Gonzalez at maria@gmail.com")
    assert _content(step, once) == once


def test_bad_configuration_names_the_argument():
    from twinkle_agentic.preprocessor.pii import PIIConfigError, PIIPresidioFilter

    with pytest.raises(PIIConfigError, match="strategy"):
        PIIPresidioFilter(strategy="scramble")
    with pytest.raises(PIIConfigError, match="entities"):
        PIIPresidioFilter(entities=["PASSPORT"])
    with pytest.raises(PIIConfigError, match="entity_strategy"):
        PIIPresidioFilter(entity_strategy={"EMAIL_ADDRESS": "drop"})
    with pytest.raises(PIIConfigError, match="languages"):
        PIIPresidioFilter(languages=["fr"])
