"""No network at run time; missing models fail loudly (strict) or degrade to pattern-only once."""

from __future__ import annotations

import socket
import warnings

import pytest

from twinkle_agentic.preprocessor.pii import PIIPresidioFilter

TEXT = "I'm Maria Gonzalez, mail maria.gonzalez@gmail.com or call (415) 555-0132. 我叫王小明。"


def test_no_socket_during_construction_and_use(monkeypatch, pii_filter):
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    import spacy.cli

    monkeypatch.setattr(spacy.cli, "download", refuse)
    step = PIIPresidioFilter(score_threshold=0.55)  # a configuration not built yet: builds a new analyzer
    step.warmup()
    out = step([{"messages": [{"role": "user", "content": TEXT}]}])[0][0]["messages"][0]["content"]
    assert attempts == []
    for value in ("Maria Gonzalez", "maria.gonzalez@gmail.com", "(415) 555-0132", "王小明"):
        assert value not in out


def test_missing_model_strict_raises(monkeypatch):
    import spacy.cli

    monkeypatch.setattr(spacy.cli, "download", lambda *a, **k: pytest.fail("spacy.cli.download was called"))
    with pytest.raises(RuntimeError, match="no_such_spacy_model_strict"):
        PIIPresidioFilter(spacy_models={"en": "no_such_spacy_model_strict"}, strict=True).warmup()


def test_missing_model_warns_once_and_runs_pattern_only(monkeypatch):
    import spacy.cli

    monkeypatch.setattr(spacy.cli, "download", lambda *a, **k: pytest.fail("spacy.cli.download was called"))
    step = PIIPresidioFilter(spacy_models={"en": "no_such_spacy_model_lenient"}, languages=("en",))
    with pytest.warns(RuntimeWarning, match="no_such_spacy_model_lenient"):
        step.warmup()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PIIPresidioFilter(spacy_models={"en": "no_such_spacy_model_lenient"}, languages=("en",), score_threshold=0.6).warmup()
    out = step([{"messages": [{"role": "user", "content": TEXT}]}])[0][0]["messages"][0]["content"]
    assert "maria.gonzalez@gmail.com" not in out and "(415) 555-0132" not in out
    assert "Maria Gonzalez" in out  # no NER: names stay


def test_use_ner_false_is_pattern_only():
    step = PIIPresidioFilter(use_ner=False)
    out = step([{"messages": [{"role": "user", "content": TEXT}]}])[0][0]["messages"][0]["content"]
    assert "Maria Gonzalez" in out and "王小明" in out and "maria.gonzalez@gmail.com" not in out
