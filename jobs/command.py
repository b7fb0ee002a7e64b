"""What the job CLIs share: how a run ends, and what it prints and exits with.

Every outcome ends with one line on stdout that starts with the job's name and names the output:

- success: exit 0 and the run's summary;
- bad config or input (an error the job recognises as the user's): exit 2, the error on stderr;
- Ctrl-C or SIGTERM (``ray job stop``): exit 130 / 143 and how long it ran (see :mod:`.interrupt`);
- anything else (a run failure): exit 1, with the traceback on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .interrupt import INTERRUPTED, exit_code, sigterm_raises_exit


@dataclass(frozen=True)
class JobCommand:
    """One job CLI. ``job`` names the module whose ``run(cfg)`` runs the job, imported only when a run
    starts (so ``--help`` and config errors never import Ray); ``user_error`` maps an exception to
    ``(error to print, stdout line)`` when it is bad config or input, else None; ``if_interrupted``
    tells what to do with the output after an interrupt; ``run_error`` finds, in a run failure that
    Ray wrapped, the job's own error that says what failed (a step and its rows), for the last line."""

    name: str
    resolve: Callable[[argparse.Namespace], Any]
    dry_run: Callable[[Any], None]
    job: str
    render: Callable[[Any], str]
    user_error: Callable[[Exception, float], tuple[Exception, str] | None]
    if_interrupted: str
    run_error: Callable[[Exception], Exception | None] = lambda exc: None

    @property
    def prog(self) -> str:
        return f"twinkle-agentic {self.name}"

    def __call__(self, args: argparse.Namespace) -> int:
        start = time.perf_counter()
        output = getattr(args, "output", "?")
        with sigterm_raises_exit():
            try:
                cfg = self.resolve(args)
                output = cfg.output
                if args.dry_run:
                    self.dry_run(cfg)
                    return 0
                summary = importlib.import_module(self.job).run(cfg)
            except INTERRUPTED as exc:
                seconds = time.perf_counter() - start
                print(
                    f"{self.name}: interrupted after {seconds:.1f} s; {self.if_interrupted}; output: {output}"
                )
                return exit_code(exc)
            except Exception as exc:
                return self._failed(exc, time.perf_counter() - start, output)
        print(self.render(summary))
        return 0

    def _failed(self, exc: Exception, seconds: float, output: str) -> int:
        known = self.user_error(exc, seconds)
        if known is not None:
            error, line = known
            print(f"{self.prog}: {error}", file=sys.stderr)
            print(f"{self.name}: {line}; output: {output}")
            return 2
        traceback.print_exception(exc)
        said = self.run_error(exc) or exc
        print(f"{self.prog}: run failed: {type(said).__name__}: {said}", file=sys.stderr)
        print(f"{self.name}: FAILED after {seconds:.1f} s; output: {output}")
        return 1
