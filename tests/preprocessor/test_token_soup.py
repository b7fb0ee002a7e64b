"""TokenSoupFilter: each soup check at its boundary (SPEC 7: exactly upstream's behaviour)."""

from __future__ import annotations

import pytest

from tests.support.preprocessor_rows import LONG_Q, assistant, row, user
from twinkle_agentic.preprocessor import TokenSoupFilter
from twinkle_agentic.preprocessor.token_soup import has_char_run, script_chaos

F = TokenSoupFilter()
BASE = "This is a perfectly normal sentence about the weather today. " * 3  # 183 characters


def soup(text: str) -> bool:
    return F.is_soup(text)


def test_replacement_char_ratio_boundary():
    assert not soup(BASE + "\ufffd" * 3)  # 3/186 = 0.016
    assert soup(BASE + "\ufffd" * 4)  # 4/187 = 0.021


@pytest.mark.parametrize("char, counted", [("\x00", True), ("\x0b", True), ("\x1f", True), ("\x7f", True), ("\t", False), ("\r", False), ("\x80", False)])
def test_control_chars(char, counted):
    text = "x y " * 25 + char * 3 + "x y " * 25  # 3/203 > 0.01 (inside: strip() would remove \x0b, \x1f)
    assert soup(text) is counted


@pytest.mark.parametrize("char", ["\ue000", "\uf8ff", "\U000f0000", "\U0010fffd"])
def test_private_use(char):
    assert soup(BASE + char * 10)
    assert not soup(BASE + char * 5)  # 5/188 < 0.03


@pytest.mark.parametrize(
    "token, counted",
    [("<|im_end|>", True), ("</s>", True), ("[PAD]", True), ("[/MASK]", True), ("<UNK>", True), ("</pad>", True), ("<0x0A>", True), ("<0x0a>", True), ("[mask]", False), ("<s>", False), ("<||>", False), ("<0xGG>", False)],
)
def test_special_tokens(token, counted):
    assert soup(BASE + " ".join([token] * 20)) is counted


def test_special_token_count_boundary():
    assert not soup(BASE + " <|x|>" * 19)
    assert soup(BASE + " <|x|>" * 20)
    assert not soup(BASE + " dp[mask]" * 30)


@pytest.mark.parametrize("char", ["a", "!", "/", "中", "?", "\u200b"])
def test_char_run_boundary(char):
    assert not soup(BASE + char * 19 + " " + BASE)
    assert soup(BASE + char * 20 + " " + BASE)


@pytest.mark.parametrize("char", ["-", "=", "_", ".", "*", "+", "~", "#", "|", ">", "<", "1", "\u2013", "\u2500", "\u2800", "ー", "\uff0d", " ", "\u3000"])
def test_exempt_runs(char):
    assert not has_char_run(BASE + char * 40 + BASE)


def test_char_run_sampling_finds_every_offset():
    for offset in range(20):
        text = "ab" * 30 + "c" * offset + "z" * 20 + "ab" * 30
        assert has_char_run(text), offset
        assert not has_char_run("ab" * 30 + "c" * offset + "z" * 19 + "ab" * 30)


def test_script_chaos():
    assert script_chaos("a中" * 20) == 1.0
    assert script_chaos("a中" * 19 + "a") == 0.0  # 39 letters: below the minimum
    assert script_chaos("a中 " * 20) == 1.0  # spaces are not letters
    assert script_chaos("ab" * 30) == 0.0
    assert script_chaos("中。" * 40) == 0.0
    assert script_chaos("١a" * 20) == 1.0  # Arabic-Indic digits are arabic
    assert soup("a中" * 40)
    assert not soup("中文内容" * 40)


def test_max_chars_cuts_head():
    text = "x y " * 100 + "\ufffd" * 20
    assert soup(text)
    assert not TokenSoupFilter(max_chars=300).is_soup(text)


def test_row_level(verdict):
    assert verdict(F, row(user(LONG_Q), assistant("fine"), assistant(BASE + "\ufffd" * 10))) == "token_soup"
    assert verdict(F, row(user("\ufffd" * 50), assistant("fine"))) is None  # only assistant text
    assert verdict(F, row(user(LONG_Q), assistant(None))) is None
    assert verdict(F, {"messages": [1]}) == "invalid_messages"


def test_none_disables():
    f = TokenSoupFilter(replacement_char_ratio=None, control_char_ratio=None, private_use_ratio=None, special_token_count=None, script_chaos_threshold=None, min_char_run=None)
    assert not f.is_soup("\ufffd\x00\ue000" * 20 + "<|x|>" * 30 + "a中" * 40)
