"""twinkle-agentic demo: the whole system on this machine, end to end.

1. start an embedded Ray cluster sized to the rollout plan (logical CPUs for its engines and Serve
   replicas, at least the machine's cores: 3 for the default two engines on a 2-core laptop);
2. clean the bundled sample chats (data/sample/chats.jsonl) with the preprocess job and its default
   pipeline;
3. serve the demo tools and the guessing-game environment on Ray Serve (127.0.0.1), and roll out the
   bundled held-out prompts with the tiny tool-calling model on vLLM engines through the farm
   (jobs/configs/demo_rollout.yaml);
4. print both summaries and where the outputs are (runs/demo/ by default; ``--output`` to change).

Exit codes: 0 success, 2 bad arguments or data, 1 a run failure.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from importlib import resources
from pathlib import Path

PROG = "twinkle-agentic demo"
REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_CHATS = REPO_ROOT / "data" / "sample" / "chats.jsonl"
DEMO_CONFIG = "demo_rollout.yaml"
DEFAULT_OUTPUT = "runs/demo"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output",
        default=DEFAULT_OUTPUT,
        metavar="DIR",
        help=f"where outputs go (default: {DEFAULT_OUTPUT})",
    )
    parser.add_argument(
        "--prompts", type=int, default=None, metavar="N", help="roll out only the first N demo prompts"
    )
    parser.add_argument(
        "--engines", type=int, default=None, help="vLLM engines (default: the demo config's, 2)"
    )
    parser.add_argument(
        "--model", default=None, metavar="PATH", help="model directory (default: the bundled tiny model)"
    )
    parser.add_argument(
        "--num-cpus",
        type=int,
        default=None,
        help="logical CPUs of the embedded cluster (default: what the rollout's engines and Serve replicas "
        "reserve, at least this machine's cores)",
    )
    parser.add_argument("--address", default=None, help="run on this Ray cluster instead of an embedded one")
    parser.add_argument("--skip-preprocess", action="store_true", help="only serve the tools and roll out")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    return parser


def preprocess(output: str) -> str:
    """Step 2; returns the job's summary line."""
    from twinkle_agentic.jobs.preprocess.config import build_parser as preprocess_parser
    from twinkle_agentic.jobs.preprocess.config import resolve_config
    from twinkle_agentic.jobs.preprocess.job import run

    argv = [
        "--input",
        str(SAMPLE_CHATS),
        "--output",
        output,
        "--overwrite",
        "--no-progress",
        "--dedup-partitions",
        "2",
    ]
    return run(resolve_config(preprocess_parser().parse_args(argv))).line()


def rollout_config(args: argparse.Namespace, output: str):
    """The demo's rollout job config (jobs/configs/demo_rollout.yaml with the demo's options), validated."""
    from twinkle_agentic.jobs.rollout.config import config_from_mapping, load_yaml, resolve_paths

    with resources.as_file(resources.files("twinkle_agentic.jobs.configs").joinpath(DEMO_CONFIG)) as path:
        data = resolve_paths(load_yaml(str(path)), str(path.parent))
    data.update(
        output=output, overwrite=True, progress=args.progress, address=args.address, num_cpus=args.num_cpus
    )
    for key, value in (("limit", args.prompts), ("engines", args.engines), ("model", args.model)):
        if value is not None:
            data[key] = value
    return config_from_mapping(data, DEMO_CONFIG).validate()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from twinkle_agentic.jobs.preprocess.steps import ConfigError as PipelineError
    from twinkle_agentic.jobs.rollout.config import ConfigError
    from twinkle_agentic.jobs.rollout.main import log_to_stderr

    from twinkle_agentic.io import InputError

    log_to_stderr()
    start = time.perf_counter()
    output = os.path.abspath(args.output)
    try:
        from twinkle_agentic.cluster import connect
        from twinkle_agentic.jobs.rollout.job import demand
        from twinkle_agentic.jobs.rollout.job import run as run_rollout

        rollout_cfg = rollout_config(args, os.path.join(output, "rollout"))
        info = connect(
            args.address,
            num_cpus=args.num_cpus,
            min_cpus=demand(rollout_cfg).cpus(),
            include_dashboard=False,
            log_to_driver=False,
        )
        print(f"[1/3] Ray: {info.summary()}", flush=True)
        pre_line = "skipped"
        if not args.skip_preprocess:
            print(
                f"[2/3] preprocessing {SAMPLE_CHATS.relative_to(REPO_ROOT)} with the default pipeline ...",
                flush=True,
            )
            pre_line = preprocess(os.path.join(output, "preprocess"))
            print(pre_line, flush=True)
        print(
            "[3/3] serving the demo tools and env on Ray Serve; rolling out the demo prompts on the tiny model ...",
            flush=True,
        )
        summary = run_rollout(rollout_cfg)
    except (ConfigError, PipelineError, InputError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        traceback.print_exc()
        print(f"{PROG}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print()
    print(summary.render())
    print()
    print(f"demo finished in {time.perf_counter() - start:.1f} s. Outputs under {output}:")
    if not args.skip_preprocess:
        print(f"  preprocess/   kept rows, drop ledger, stats.json, report.md   ({pre_line.split(';')[0]})")
    print(
        "  rollout/      trajectories.jsonl (input_ids, labels, logprobs, messages, stop_reason), summary.json"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
