"""``PassNScorer``: how often the model solves the round's task, from N samples.

The model (the filter's backend) answers each round's history N times; every sample is graded by
running its code against the row's tests in a sandbox (``exec``) or by an LLM judge (``judge``).
The score is the fraction of samples that pass. With the defaults (``min_pass=0``, ``max_pass=None``)
the scorer only observes; ``min_pass=1, max_pass=n-1`` keeps tasks the model sometimes solves, the
usual choice for RL data.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...data_format import SamplingParams, user_data_get
from .backends.base import call_or_none
from .graders import CodeTests, judge_messages, normalise_tests, parse_verdict, run_tests
from .types import ScoreContext, Scorer, ScoreResult, unmeasured

GRADERS = ("auto", "exec", "judge")
JUDGE_MAX_TOKENS = 1024


class PassNScorer(Scorer):
    """Pass rate of ``n`` sampled answers; passes when ``min_pass <= passes <= max_pass``.

    ``grader``: ``'exec'`` (needs tests), ``'judge'`` (needs ``judge_api``), or ``'auto'`` (exec when
    the row has tests, else the judge when configured, else unmeasured). Tests are read from the
    row's ``tests_field``, then from its ``user_data``. ``sandbox`` defaults to
    ``LocalSubprocessSandbox()``; ``judge_api`` is an ``API`` (e.g. the project's ``OpenAI``) or the
    keyword arguments to build one. Exec results also record whether the dataset's own answer passes
    the tests (``extras['reference_passed']``).
    """

    name = "pass_n"
    requires_backend = True

    def __init__(
        self,
        n: int = 4,
        grader: str = "auto",
        sandbox: Any = None,
        judge_api: Any = None,
        tests_field: str = "tests",
        min_pass: int = 0,
        max_pass: int | None = None,
        sample_temperature: float = 0.7,
        sample_max_tokens: int = 4096,
        exec_timeout_s: float = 10,
        *,
        max_workers: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"PassNScorer.n must be an integer >= 1, got {n!r}")
        if grader not in GRADERS:
            raise ValueError(f"PassNScorer.grader must be one of {GRADERS}, got {grader!r}")
        if grader == "judge" and judge_api is None:
            raise ValueError(
                "PassNScorer(grader='judge') needs judge_api (an API such as OpenAI(model, base_url=...))"
            )
        if max_pass is not None and max_pass < min_pass:
            raise ValueError(f"PassNScorer.max_pass ({max_pass}) is below min_pass ({min_pass})")
        self.n = n
        self.grader = grader
        self.sandbox = sandbox
        self.judge_api = judge_api
        self.tests_field = tests_field
        self.min_pass = min_pass
        self.max_pass = max_pass
        self.sample_temperature = sample_temperature
        self.sample_max_tokens = sample_max_tokens
        self.exec_timeout_s = exec_timeout_s
        self.max_workers = max_workers or min(8, os.cpu_count() or 1)

    def warmup(self) -> None:
        self._sandbox()
        self._judge()

    def _sandbox(self) -> Any:
        if self.sandbox is None:
            from ...envs.sandbox import LocalSubprocessSandbox

            self.sandbox = LocalSubprocessSandbox()
        return self.sandbox

    def _judge(self) -> Any:
        if isinstance(self.judge_api, dict):
            from ...protocol.openai import OpenAI

            self.judge_api = OpenAI(**self.judge_api)
        return self.judge_api

    def tests_of(self, row: dict) -> CodeTests | None:
        value = row.get(self.tests_field)
        if value is None:
            value = user_data_get(row.get("user_data"), self.tests_field)
        return normalise_tests(value)

    def grader_for(self, ctx: ScoreContext) -> tuple[str | None, CodeTests | None]:
        tests = self.tests_of(ctx.row) if self.grader in ("auto", "exec") else None
        if tests is not None:
            return "exec", tests
        if self.grader in ("auto", "judge") and self.judge_api is not None:
            return "judge", None
        return None, None

    # -- grading ------------------------------------------------------------------------------

    def _exec_grade(self, tests: CodeTests) -> Callable[[str], bool]:
        sandbox = self._sandbox()
        return lambda answer: run_tests(sandbox, answer, tests, self.exec_timeout_s)

    def _judge_grade(self, ctx: ScoreContext) -> Callable[[str], bool]:
        api = self._judge()
        params = SamplingParams(temperature=0.0, max_tokens=JUDGE_MAX_TOKENS)

        def grade(answer: str) -> bool:
            if not answer.strip():
                return False
            reply = api({"messages": judge_messages(ctx.history, ctx.answer, answer)}, params)
            if isinstance(reply, list):
                reply = reply[0] if reply else {}
            return parse_verdict(reply.get("content") if isinstance(reply, dict) else None)

        return grade

    def _result(self, grader: str, verdicts: list[bool], reference_passed: bool | None) -> ScoreResult:
        passes = sum(verdicts)
        upper = self.max_pass if self.max_pass is not None else len(verdicts)
        extras: dict[str, Any] = {"grader": grader, "passes": passes, "n_samples": len(verdicts)}
        if reference_passed is not None:
            extras["reference_passed"] = reference_passed
        return ScoreResult(passes / len(verdicts), self.min_pass <= passes <= upper, extras)

    def score_batch(self, contexts: list[ScoreContext]) -> list[ScoreResult]:
        results: list[ScoreResult | None] = [None] * len(contexts)
        plans: list[tuple[int, str, Callable[[str], bool]]] = []
        for i, ctx in enumerate(contexts):
            grader, tests = self.grader_for(ctx)
            if grader is None:
                results[i] = unmeasured("no_grader")
            else:
                plans.append(
                    (i, grader, self._exec_grade(tests) if tests is not None else self._judge_grade(ctx))
                )
        if not plans:
            return results  # type: ignore[return-value]

        samples = self.backend.chat(
            [contexts[i].history for i, _, _ in plans],
            self.n,
            self.sample_temperature,
            self.sample_max_tokens,
        )
        jobs: list[tuple[int, int, str]] = []  # (plan index, sample index or -1 for the reference, text)
        for p, (i, grader, _) in enumerate(plans):
            drawn = samples[p]
            if not drawn:
                results[i] = unmeasured("sampling_failed")
                continue
            jobs.extend((p, k, text) for k, text in enumerate(drawn))
            if grader == "exec":
                jobs.append((p, -1, contexts[i].answer))

        def grade(job: tuple[int, int, str]) -> bool | None:
            p, _, text = job
            return call_or_none(lambda: plans[p][2](text), f"pass_n {plans[p][1]} grading")

        with ThreadPoolExecutor(self.max_workers) as pool:
            verdicts = list(pool.map(grade, jobs))

        by_plan: dict[int, tuple[list[bool | None], list[bool | None]]] = {}
        for (p, k, _), verdict in zip(jobs, verdicts, strict=True):
            samples_v, reference_v = by_plan.setdefault(p, ([], []))
            (reference_v if k < 0 else samples_v).append(verdict)
        for p, (samples_v, reference_v) in by_plan.items():
            i, grader, _ = plans[p]
            if any(v is None for v in samples_v):
                results[i] = unmeasured("grading_failed", grader=grader)
            else:
                reference = reference_v[0] if reference_v else None
                results[i] = self._result(grader, [bool(v) for v in samples_v], reference)
        return results  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"PassNScorer(n={self.n}, grader={self.grader!r}, min_pass={self.min_pass}, max_pass={self.max_pass})"
