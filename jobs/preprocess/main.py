"""``twinkle-agentic preprocess``: exit 0 on success, 2 on bad config or input, 1 on a run failure.

Ctrl-C and SIGTERM (``ray job stop``) stop the run with a line saying so and exit 130 / 143; Ray's
shutdown still runs. Such a run writes no ``stats.json``.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from typing import Any

from ..interrupt import INTERRUPTED, exit_code, sigterm_raises_exit
from .config import build_parser, resolve_config
from .sources import InputError, UnreadableInputError
from .steps import ConfigError

PROG = "twinkle-agentic preprocess"


def dry_run(cfg) -> None:
    import yaml

    from .job import plan

    sources, _, names, stages = plan(cfg)
    print(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True).rstrip())
    print(f"# {len(sources)} input file(s):")
    for source in sources[:20]:
        print(f"#   [{source.index}] {source.uri} ({source.format})")
    if len(sources) > 20:
        print(f"#   ... and {len(sources) - 20} more")
    print("# stages:")
    for i, stage in enumerate(stages, 1):
        print(f"#   {i}. {stage.describe(names)}")


def raised_in_worker(exc: Exception) -> Exception:
    """The error as a Ray task raised it (Ray wraps it, and its text, in a RayTaskError)."""
    original = getattr(exc, "cause", None)
    return original if isinstance(original, (ConfigError, InputError)) else exc


_STDERR_HANDLER = "twinkle-preprocess-stderr"


def _log_to_stderr() -> None:
    """Our INFO lines on stderr; other libraries' loggers (Ray Data logs DEBUG) are left alone.

    Each call points our handler at the current ``sys.stderr``: a process that runs the job again
    after swapping it (a notebook, a test harness) must not log into the stream it closed."""
    logger = logging.getLogger("jobs.preprocess")
    ours = next((h for h in logger.handlers if h.get_name() == _STDERR_HANDLER), None)
    if ours is not None:
        ours.stream = sys.stderr  # not setStream(): it flushes the old stream, which may be closed
        return
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(_STDERR_HANDLER)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _log_to_stderr()
    start = time.perf_counter()
    output = getattr(args, "output", "?")
    with sigterm_raises_exit():
        return _run(args, start, output)


def _run(args: Any, start: float, output: str) -> int:
    try:
        cfg = resolve_config(args)
        output = cfg.output
        if args.dry_run:
            dry_run(cfg)
            return 0
        from .job import run

        summary = run(cfg)
    except (ConfigError, InputError) as exc:
        exc = raised_in_worker(exc)
        print(f"{PROG}: {exc}", file=sys.stderr)
        if isinstance(exc, UnreadableInputError):  # found by a read task, while the run was going
            print(
                f"preprocess: stopped on an unreadable input after {time.perf_counter() - start:.1f} s; output: {output}"
            )
        else:
            print(f"preprocess: not started ({type(exc).__name__}); output: {output}")
        return 2
    except INTERRUPTED as exc:
        print(
            f"preprocess: interrupted after {time.perf_counter() - start:.1f} s; the output holds no complete run "
            f"(no stats.json), rerun with --overwrite; output: {output}"
        )
        return exit_code(exc)
    except Exception as exc:  # a run failure: report it, keep the exit code contract
        traceback.print_exc()
        print(f"{PROG}: run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"preprocess: FAILED after {time.perf_counter() - start:.1f} s; output: {output}")
        return 1
    print(summary.line())
    return 0
