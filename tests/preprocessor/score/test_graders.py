import pytest

from twinkle_agentic.preprocessor.score.graders import (
    CLIP_MARKER,
    CodeTests,
    clip,
    last_code_block,
    normalise_tests,
    parse_verdict,
)


def test_last_code_block():
    text = "First:\n```python\nprint(1)\n```\nthen\n```\nprint(2)\n```\ndone"
    assert last_code_block(text) == "print(2)\n"
    assert last_code_block("x = 1") == "x = 1"  # no fence: the whole text


@pytest.mark.parametrize(
    "value, expected",
    [
        ("assert f(1) == 2", CodeTests(asserts="assert f(1) == 2")),
        (["assert f(1) == 2", "assert f(2) == 3"], CodeTests(asserts="assert f(1) == 2\nassert f(2) == 3")),
        ([{"input": "1 2\n", "output": "3"}], CodeTests(io_pairs=(("1 2\n", "3"),))),
        ('[{"input": "1", "output": "2"}]', CodeTests(io_pairs=(("1", "2"),))),
        ({"inputs": ["1", "2"], "outputs": ["2", "3"]}, CodeTests(io_pairs=(("1", "2"), ("2", "3")))),
        ({"input": "1", "output": "1"}, CodeTests(io_pairs=(("1", "1"),))),
        (None, None),
        ("", None),
        ([], None),
        ({"inputs": ["1"], "outputs": []}, None),
        ([1, 2], None),
    ],
)
def test_normalise_tests(value, expected):
    assert normalise_tests(value) == expected


@pytest.mark.parametrize(
    "reply, passed",
    [
        ("The code is right.\n<verdict>PASS</verdict>", True),
        ("< verdict >\n pass </ verdict>", True),  # whitespace removed, case folded
        ("Wrong output.\n<verdict>FAIL</verdict>", False),
        ("<verdict>PASS</verdict> no wait <verdict>FAIL</verdict>", False),  # mixed tags, both keywords
        ("Looks correct overall. PASS", True),  # bare keyword in the tail
        ("It does not FAIL any test but PASS is unclear", False),  # both keywords: ambiguous
        ("PASS" + "x" * 300, False),  # bare keyword outside the last 200 characters
        ("", False),
        (None, False),
        ("I cannot tell.", False),
    ],
)
def test_parse_verdict(reply, passed):
    assert parse_verdict(reply) is passed


def test_clip_keeps_head_and_tail():
    text = "".join(str(i % 10) for i in range(1000))
    out = clip(text, 300)
    assert out.startswith(text[:200]) and out.endswith(text[-100:]) and CLIP_MARKER in out
    assert clip("short", 300) == "short"
