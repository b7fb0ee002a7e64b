"""Batching, caching and the cheap pre-check (which must never lose a detection)."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

# Everything but digits, '@', ':', capitals and CJK: no configured entity can be found in such text.
SAFE_ALPHABET = string.ascii_lowercase + " .,;!?'\"-_()[]{}/\\\n\t#$%&*+=<>|~" + "éüñß"


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=SAFE_ALPHABET, min_size=0, max_size=120))
def test_precheck_skips_only_texts_without_pii(analyzer, text):
    assert not analyzer.may_hold_pii(text)
    assert analyzer._analyze_uncached([text]) == [()]  # the full pipeline agrees


def test_lowercase_names_and_places_are_not_reported(analyzer):
    text = "my name is john smith and i live in boston near the charles river"
    assert not analyzer.may_hold_pii(text)
    assert analyzer._analyze_uncached([text]) == [()]


def test_batch_equals_one_by_one_and_cache_is_used(analyzer, eval_records):
    texts = [r["text"] for r in eval_records[:40]] + ["You are a helpful assistant. Contact ops@acme.io."] * 5
    batched = analyzer.analyze(texts)
    singles = [analyzer._analyze_uncached([t])[0] for t in texts]
    assert batched == singles
    hits = analyzer.cache.hits
    analyzer.analyze(texts)
    assert analyzer.cache.hits >= hits + len(set(texts))


def test_markup_tags_do_not_hide_names(analyzer):
    text = "<think>user is John Smith from Boston</think>Done."
    found = {(s.entity, text[s.start : s.end]) for s in analyzer.analyze([text])[0]}
    assert ("PERSON", "John Smith") in found
