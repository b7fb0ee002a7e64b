"""The README's "Write your own" snippets run as written and print what their comments say.

Each ```python block of that section runs in a fresh namespace, as a reader would paste it; a
``print(...)  # expected`` line's comment is the output that line must print. No Ray is started.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Write your own filter, tool, environment or reward"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
EXPECTED = re.compile(r"^\s*print\(.*\)\s+#\s(?P<out>.+)$")


def section_snippets() -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return BLOCK.findall(text[start : end if end != -1 else len(text)])


def expected_output(snippet: str) -> list[str]:
    """The comments of the snippet's ``print`` lines (a call spanning lines ends on the commented one)."""
    return [m.group("out") for line in snippet.splitlines() if (m := EXPECTED.match(line))]


def test_section_has_a_snippet_per_extension_point():
    snippets = section_snippets()
    assert len(snippets) == 4, f"expected filter, tool, env and reward snippets, found {len(snippets)}"
    for snippet in snippets:
        assert expected_output(snippet), f"snippet without a checked print:\n{snippet}"


@pytest.mark.parametrize("index", range(4), ids=["filter", "tool", "env", "reward"])
def test_snippet_runs_and_prints_what_it_says(index, tmp_path, monkeypatch):
    snippet = section_snippets()[index]
    monkeypatch.chdir(tmp_path)  # a snippet that writes files writes them here
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet, f"README.md snippet {index}", "exec"), {"__name__": "__readme__"})
    assert out.getvalue().splitlines() == expected_output(snippet)
