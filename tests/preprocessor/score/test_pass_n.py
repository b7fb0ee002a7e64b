"""PassNScorer: samples come over HTTP from a scripted server; exec grading runs them in the real
LocalSubprocessSandbox; judge grading goes through the project's OpenAI client to a scripted judge."""

import pytest

from twinkle_agentic.preprocessor import PassNScorer, ScoreFilter
from twinkle_agentic.preprocessor.score import OpenAIBackend
from twinkle_agentic.protocol.openai import OpenAI

CORRECT_FENCED = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\nDone."
CORRECT_BARE = "def add(a, b):\n    return b + a"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"
LOOPS = "```python\ndef add(a, b):\n    while True:\n        pass\n```\n```python\nadd(1, 2)\n```"
REFERENCE = "```python\ndef add(a, b):\n    return a + b\n```"
ASSERTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0"

IO_CORRECT = "```python\na, b = map(int, input().split())\nprint(a * b)\n```"
IO_WRONG = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
IO_CRASH = "```python\nraise SystemExit(3)\n```"


def backend(server) -> OpenAIBackend:
    return OpenAIBackend(server.url, "scripted-model", timeout=30, max_retries=0)


def code_row(rid, tests, reference=REFERENCE, question="Write add(a, b)."):
    return {
        "id": rid,
        "tests": tests,
        "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": reference}],
    }


def test_exec_grader_runs_code_against_asserts(scripted):
    scripted.chat = lambda body: [CORRECT_FENCED, CORRECT_BARE, WRONG, LOOPS][: body["n"]]
    records = []
    f = ScoreFilter(
        [PassNScorer(n=4, exec_timeout_s=1)], backend=backend(scripted), trace_callback=records.append
    )
    kept, dropped = f([code_row("add", ASSERTS)])
    result = records[0]["scores"]["pass_n"]
    assert result["score"] == 0.5 and result["passed"] is True  # observe-only defaults
    assert result["extras"] == {"grader": "exec", "passes": 2, "n_samples": 4, "reference_passed": True}
    body = next(b for p, b in scripted.requests if p == "/v1/chat/completions")
    assert body["n"] == 4 and body["temperature"] == 0.7 and body["max_tokens"] == 4096
    assert body["messages"] == [{"role": "user", "content": "Write add(a, b)."}]


def test_exec_grader_stdin_stdout_pairs(scripted):
    scripted.chat = lambda body: [IO_CORRECT, IO_WRONG, IO_CRASH, IO_CORRECT]
    tests = [{"input": "3 4\n", "output": "12"}, {"input": "2 5\n", "output": "10\n"}]
    scorer = PassNScorer(n=4, min_pass=1, max_pass=2)
    records = []
    ScoreFilter([scorer], backend=backend(scripted), trace_callback=records.append)(
        [code_row("mul", tests, reference=IO_WRONG, question="Multiply two numbers from stdin.")]
    )
    result = records[0]["scores"]["pass_n"]
    assert result["extras"]["passes"] == 2 and result["extras"]["reference_passed"] is False
    assert result["passed"] is True  # 1 <= 2 <= 2


def test_pass_window_drops_too_easy_and_impossible_tasks(scripted):
    scripted.chat = lambda body: [CORRECT_BARE] * body["n"]
    f = ScoreFilter([PassNScorer(n=3, min_pass=1, max_pass=2)], backend=backend(scripted))
    kept, dropped = f([code_row("easy", ASSERTS)])
    assert kept == [] and dropped[0]["drop_reason"] == "score_round_failed"
    scripted.chat = lambda body: [WRONG] * body["n"]
    kept, dropped = f([code_row("impossible", ASSERTS)])
    assert kept == [] and dropped[0]["drop_reason"] == "score_round_failed"


def test_tests_from_user_data_and_json(scripted):
    scripted.chat = lambda body: [CORRECT_BARE]
    row = code_row("ud", None)
    del row["tests"]
    row["user_data"] = [("tests", '["assert add(2, 2) == 4"]')]
    records = []
    ScoreFilter([PassNScorer(n=1)], backend=backend(scripted), trace_callback=records.append)([row])
    assert records[0]["scores"]["pass_n"]["score"] == 1.0


JUDGE_PASS = "The candidate computes 6 * 7 = 42 correctly.\n<verdict>PASS</verdict>"
JUDGE_FAIL = "The candidate's result is wrong.\n<verdict>FAIL</verdict>"


def scripted_judge_or_model(body):
    """One server plays both parts: the judge (strict-grader system prompt) and the sampled model."""
    if body["messages"][0]["role"] == "system" and "strict grader" in body["messages"][0]["content"]:
        candidate = body["messages"][1]["content"].split("## Candidate answer")[1]
        return [JUDGE_PASS if "42" in candidate else JUDGE_FAIL]
    return ["6 times 7 is 42.", "It is 41.", "", "42"][: body["n"]]


def test_judge_grader_parses_verdicts(scripted):
    scripted.chat = scripted_judge_or_model
    judge = OpenAI("judge-model", base_url=scripted.url + "/v1", client_kwargs={"max_retries": 0})
    records = []
    f = ScoreFilter(
        [PassNScorer(n=4, judge_api=judge)], backend=backend(scripted), trace_callback=records.append
    )
    f(
        [
            {
                "id": "m",
                "messages": [
                    {"role": "user", "content": "What is 6 * 7?"},
                    {"role": "assistant", "content": "42"},
                ],
            }
        ]
    )
    result = records[0]["scores"]["pass_n"]
    assert result["score"] == 0.5 and result["extras"] == {"grader": "judge", "passes": 2, "n_samples": 4}
    judge_calls = [
        b for p, b in scripted.requests if p == "/v1/chat/completions" and b["model"] == "judge-model"
    ]
    assert len(judge_calls) == 3  # the empty sample fails without asking the judge
    assert all(b["temperature"] == 0.0 for b in judge_calls)
    assert "## Reference answer" in judge_calls[0]["messages"][1]["content"]


def test_judge_from_config_dict(scripted):
    scripted.chat = scripted_judge_or_model
    scorer = PassNScorer(
        n=2, grader="judge", judge_api={"model": "judge-model", "base_url": scripted.url + "/v1"}
    )
    records = []
    ScoreFilter([scorer], backend=backend(scripted), trace_callback=records.append)(
        [
            {
                "id": "m",
                "messages": [{"role": "user", "content": "6*7?"}, {"role": "assistant", "content": "42"}],
            }
        ]
    )
    assert records[0]["scores"]["pass_n"]["extras"]["passes"] == 1  # "6 times 7 is 42." yes, "It is 41." no


def test_auto_without_tests_or_judge_is_unmeasured_and_samples_nothing(scripted):
    f = ScoreFilter([PassNScorer()], backend=backend(scripted))
    row = {
        "id": "p",
        "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi!"}],
    }
    records = []
    f.trace_callback = records.append
    kept, _ = f([row])
    assert kept == [row] and records[0]["scores"]["pass_n"]["extras"] == {"skipped": "no_grader"}
    assert "/v1/chat/completions" not in scripted.paths()


def test_sampling_failure_is_unmeasured(scripted):
    scripted.fail_paths.add("/v1/chat/completions")
    records = []
    f = ScoreFilter([PassNScorer(n=2, min_pass=1)], backend=backend(scripted), trace_callback=records.append)
    kept, _ = f([code_row("x", ASSERTS)])
    assert len(kept) == 1 and records[0]["scores"]["pass_n"]["extras"]["skipped"] == "sampling_failed"


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"grader": "vote"}, {"min_pass": 3, "max_pass": 2}])
def test_invalid_settings(kwargs):
    with pytest.raises(ValueError):
        PassNScorer(**kwargs)
