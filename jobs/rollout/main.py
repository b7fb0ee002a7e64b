"""``twinkle-agentic rollout``: exit 0 on success, 2 on bad config or input, 1 on a run failure.

SIGTERM (``ray job stop``) and Ctrl-C stop the run cleanly: finished batches are already in the
journal, workers are shut down, and rerunning the same command resumes.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from typing import Any

from ..interrupt import INTERRUPTED, exit_code, sigterm_raises_exit
from .config import ConfigError, RolloutJobConfig, build_parser, resolve_config

PROG = "twinkle-agentic rollout"


def dry_run(cfg: RolloutJobConfig) -> None:
    import yaml

    from actors.worker import RolloutWorker

    from .job import plan

    trajectories = plan(cfg)
    print(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True).rstrip())
    print(f"# {len(trajectories)} trajectories from {cfg.prompts}")
    print(
        f"# {cfg.engines} engine(s), each a Ray actor with {RolloutWorker.ray_options(cfg.engine_config())}"
    )
    for spec in cfg.tools:
        print(
            f"# tool server {spec.name}: "
            + (f"running at {spec.url}" if spec.url else f"deploy {spec.tools}")
        )
    for spec in cfg.envs:
        print(
            f"# env server {spec.name}: " + (f"running at {spec.url}" if spec.url else f"deploy {spec.env}")
        )


def log_to_stderr() -> None:
    """Our INFO lines on stderr; other libraries' loggers are left alone."""
    for name in ("jobs.rollout", "actors"):
        logger = logging.getLogger(name)
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_to_stderr()
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
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        print(f"rollout: not started ({type(exc).__name__}); output: {output}")
        return 2
    except INTERRUPTED as exc:
        print(
            f"rollout: interrupted after {time.perf_counter() - start:.1f} s; rerun the same command to resume; "
            f"output: {output}"
        )
        return exit_code(exc)
    except Exception as exc:  # a run failure: report it, keep the exit code contract
        traceback.print_exc()
        print(f"{PROG}: run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"rollout: FAILED after {time.perf_counter() - start:.1f} s; output: {output}")
        return 1
    print(summary.render())
    return 0
