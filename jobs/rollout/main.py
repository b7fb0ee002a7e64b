"""``twinkle-agentic rollout``: ends as every job CLI does (:mod:`twinkle_agentic.jobs.command`): exit 0 on success,
2 on bad config or input, 1 on a run failure, 130 / 143 on Ctrl-C / SIGTERM (``ray job stop``).

An interrupted run stops cleanly: finished batches are already in the journal, workers are shut
down, and rerunning the same command resumes.
"""

from __future__ import annotations

import logging

from ..command import JobCommand
from .config import ConfigError, RolloutJobConfig, build_parser, resolve_config


def dry_run(cfg: RolloutJobConfig) -> None:
    import yaml
    from twinkle_agentic.actors.worker import RolloutWorker

    from .job import plan

    trajectories = plan(cfg)
    print(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True).rstrip())
    print(f"# {len(trajectories)} trajectories from {cfg.prompts}")
    engine = cfg.engine_config()
    options = RolloutWorker.ray_options(engine)
    options.pop("placement_group", None)  # printed per engine below
    print(f"# {cfg.engines} engine(s), each a Ray actor with {options}")
    print(f"# each engine: {engine.world_size} shard(s), {engine.placement().describe()}")
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
    for name in ("twinkle_agentic.jobs.rollout", "actors"):
        logger = logging.getLogger(name)
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)


def user_error(exc: Exception, seconds: float) -> tuple[Exception, str] | None:
    return (exc, f"not started ({type(exc).__name__})") if isinstance(exc, ConfigError) else None


COMMAND = JobCommand(
    name="rollout",
    resolve=resolve_config,
    dry_run=dry_run,
    job="twinkle_agentic.jobs.rollout.job",
    render=lambda summary: summary.render(),
    user_error=user_error,
    if_interrupted="rerun the same command to resume",
)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_to_stderr()
    return COMMAND(args)
