"""``twinkle-agentic preprocess``: ends as every job CLI does (:mod:`twinkle_agentic.jobs.command`): exit 0 on success,
2 on bad config or input, 1 on a run failure, 130 / 143 on Ctrl-C / SIGTERM (``ray job stop``), each
with a last line on stdout. An interrupted run writes no ``stats.json``.
"""

from __future__ import annotations

import logging
import sys

from twinkle_agentic.io import InputError, UnreadableInputError

from ..command import JobCommand
from .config import build_parser, resolve_config
from .shared_storage import StorageNotSharedError
from .stages import StepBrokeContract, StepFailedError, StepStartError
from .steps import ConfigError


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


def raised_in_worker(exc: Exception, kinds: tuple[type, ...] = (ConfigError, InputError)) -> Exception:
    """The error as a Ray task raised it (Ray wraps it, and its text, in a RayTaskError)."""
    original = getattr(exc, "cause", None)
    return original if isinstance(original, kinds) else exc


def step_error(exc: Exception) -> Exception | None:
    """A step that raised on a batch, broke the step contract or could not load its models: said on
    the run's last line in place of Ray's wrapper, whose text ends in Ray's own advice."""
    original = raised_in_worker(exc, (StepFailedError, StepStartError, StepBrokeContract))
    return original if original is not exc else None


_STDERR_HANDLER = "twinkle-preprocess-stderr"
LOGGERS = ("twinkle_agentic.jobs.preprocess", "twinkle_agentic.io")


def _log_to_stderr() -> None:
    """Our INFO lines on stderr (the job's, and the input readers' of :mod:`twinkle_agentic.io`);
    other libraries' loggers (Ray Data logs DEBUG) are left alone.

    Each call points our handler at the current ``sys.stderr``: a process that runs the job again
    after swapping it (a notebook, a test harness) must not log into the stream it closed."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        ours = next((h for h in logger.handlers if h.get_name() == _STDERR_HANDLER), None)
        if ours is not None:
            ours.stream = sys.stderr  # not setStream(): it flushes the old stream, which may be closed
            continue
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.set_name(_STDERR_HANDLER)
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)


def user_error(exc: Exception, seconds: float) -> tuple[Exception, str] | None:
    """Bad config or input, as the driver or a read task raised it: what to print, and the run's line."""
    if not isinstance(exc, (ConfigError, InputError)):
        return None
    exc = raised_in_worker(exc)
    if isinstance(exc, UnreadableInputError):  # found by a read task, while the run was going
        return exc, f"stopped on an unreadable input after {seconds:.1f} s"
    if isinstance(exc, StorageNotSharedError):  # found by a read or write task on another node
        return exc, f"stopped after {seconds:.1f} s: a node does not see the run's files as the driver does"
    return exc, f"not started ({type(exc).__name__})"


COMMAND = JobCommand(
    name="preprocess",
    resolve=resolve_config,
    dry_run=dry_run,
    job="twinkle_agentic.jobs.preprocess.job",
    render=lambda summary: summary.line(),
    user_error=user_error,
    if_interrupted=(
        "the output holds no complete run (no stats.json): a run started with --resume continues with "
        "--resume; otherwise rerun with --overwrite"
    ),
    run_error=step_error,
)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _log_to_stderr()
    return COMMAND(args)
