"""How ``PassNScorer`` grades one sampled answer: by running its code against tests, or by an LLM judge.

*exec*: the last fenced code block of the sample (the whole text when there is none) runs in a
sandbox with the row's tests, which are either assert code (appended to the program) or
``{input, output}`` pairs (the program reads stdin; stripped stdout must match). A sample passes on
exit code 0, no timeout and, for pairs, every output matching.

*judge*: a strict-grader prompt ending in ``<verdict>PASS</verdict>`` or ``<verdict>FAIL</verdict>``;
anything ambiguous is a FAIL.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

FENCED_BLOCK = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
VERDICT_TAG = re.compile(r"<VERDICT>(PASS|FAIL)</VERDICT>")
WHITESPACE = re.compile(r"\s+")
#: Bare PASS/FAIL keywords are looked for only in this many trailing characters of the judge's reply.
VERDICT_TAIL_CHARS = 200
#: Each field of the judge prompt is cut to this many characters (head 2/3, marker, tail 1/3).
JUDGE_FIELD_CHARS = 6000
CLIP_MARKER = "\n...[truncated]...\n"

JUDGE_SYSTEM = (
    "You are a strict grader. You decide whether a candidate answer fully and correctly solves the "
    "task. Partial, vague, off-topic or unverifiable answers fail. Think briefly, then end your reply "
    "with exactly one line: <verdict>PASS</verdict> or <verdict>FAIL</verdict>."
)
JUDGE_USER = (
    "## Task (conversation so far)\n{task}\n\n"
    "## Reference answer (from the dataset; may itself be imperfect)\n{reference}\n\n"
    "## Candidate answer\n{candidate}\n\n"
    "Does the candidate answer correctly and completely solve the task? End with "
    "<verdict>PASS</verdict> or <verdict>FAIL</verdict>."
)


# -- exec ----------------------------------------------------------------------------------------


def last_code_block(text: str) -> str:
    """The body of the last fenced code block, or the whole text when there is none."""
    blocks = FENCED_BLOCK.findall(text or "")
    return blocks[-1] if blocks else (text or "")


@dataclass(frozen=True)
class CodeTests:
    """Normalised tests: assert code, or (stdin, expected stdout) pairs."""

    asserts: str = ""
    io_pairs: tuple[tuple[str, str], ...] = ()


def _io_pair(item: Any) -> tuple[str, str] | None:
    if isinstance(item, dict) and "input" in item and "output" in item:
        return _text(item["input"]), _text(item["output"])
    return None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n".join(_text(v) for v in value)
    return "" if value is None else str(value)


def normalise_tests(value: Any) -> CodeTests | None:
    """Tests from a row field: assert code (str or list of str), a list of ``{input, output}`` dicts,
    an ``{inputs: [...], outputs: [...]}`` dict, or any of these JSON-encoded. None when there are none."""
    if isinstance(value, str):
        stripped = value.strip()
        if not stripped:
            return None
        if stripped[0] in "[{":
            try:
                return normalise_tests(json.loads(stripped))
            except ValueError:
                pass
        return CodeTests(asserts=value)
    if isinstance(value, dict):
        pair = _io_pair(value)
        if pair is not None:
            return CodeTests(io_pairs=(pair,))
        inputs, outputs = value.get("inputs"), value.get("outputs")
        if isinstance(inputs, list) and isinstance(outputs, list) and inputs and len(inputs) == len(outputs):
            return CodeTests(
                io_pairs=tuple((_text(i), _text(o)) for i, o in zip(inputs, outputs, strict=True))
            )
        return None
    if isinstance(value, (list, tuple)) and value:
        pairs = [_io_pair(item) for item in value]
        if all(p is not None for p in pairs):
            return CodeTests(io_pairs=tuple(pairs))  # type: ignore[arg-type]
        if all(isinstance(item, str) for item in value):
            return CodeTests(asserts="\n".join(value))
    return None


def _ok(result: dict[str, Any]) -> bool:
    return result.get("exit_code") == 0 and not result.get("timed_out")


def run_tests(sandbox: Any, answer: str, tests: CodeTests, timeout_s: float) -> bool:
    """True when the answer's code passes every test in the sandbox."""
    code = last_code_block(answer)
    if not code.strip():
        return False
    program = code.rstrip() + "\n\n" + tests.asserts
    if tests.asserts and not _ok(sandbox.run(program, stdin=None, timeout_s=timeout_s)):
        return False
    for stdin, expected in tests.io_pairs:
        result = sandbox.run(code, stdin=stdin, timeout_s=timeout_s)
        if not _ok(result) or (result.get("stdout") or "").strip() != expected.strip():
            return False
    return True


# -- judge ---------------------------------------------------------------------------------------


def clip(text: str, limit: int = JUDGE_FIELD_CHARS) -> str:
    """``text`` cut to about ``limit`` characters: the first 2/3, a marker, the last 1/3."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return text[:head] + CLIP_MARKER + text[len(text) - (limit - head) :]


def render_task(messages: list[dict]) -> str:
    from ..text import message_text

    return "\n\n".join(f"[{m.get('role', '?')}] {message_text(m)}" for m in messages if isinstance(m, dict))


def judge_messages(history: list[dict], reference: str, candidate: str) -> list[dict]:
    user = JUDGE_USER.format(
        task=clip(render_task(history)), reference=clip(reference), candidate=clip(candidate)
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def parse_verdict(reply: str | None) -> bool:
    """PASS only when the judge clearly said so.

    Whitespace is removed and the text upper-cased. Verdict tags decide when they all agree; otherwise
    bare PASS/FAIL keywords in the last 200 characters decide when exactly one of them appears;
    anything else (no verdict, both, empty) is a FAIL.
    """
    text = WHITESPACE.sub("", reply or "").upper()
    if not text:
        return False
    tags = set(VERDICT_TAG.findall(text))
    if len(tags) == 1:
        return tags == {"PASS"}
    tail = text[-VERDICT_TAIL_CHARS:]
    has_pass, has_fail = "PASS" in tail, "FAIL" in tail
    return has_pass and not has_fail
