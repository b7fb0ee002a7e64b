"""``twinkle-agentic cluster``: reach, start and submit to Ray clusters with one consistent environment."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys

from .auth import AUTH_MODES, ClusterConfigError, ray_environment


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="twinkle-agentic cluster", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--auth-mode", choices=AUTH_MODES, help="Ray auth mode (default: RAY_AUTH_MODE or token)")

    info = sub.add_parser("info", help="connect (RAY_ADDRESS / --address, else embedded local) and describe")
    info.add_argument("--address", help="Ray address (host:port or ray://...); default RAY_ADDRESS or embedded")
    common(info)

    env = sub.add_parser("env", help="print the shell exports every Ray process here should share")
    env.add_argument("--address", help="also export RAY_ADDRESS")
    common(env)

    head = sub.add_parser("head", help="run a Ray head node in the foreground until interrupted")
    head.add_argument("--num-cpus", type=int)
    head.add_argument("--num-gpus", type=int)
    head.add_argument("--host", default="127.0.0.1")
    common(head)

    submit = sub.add_parser("submit", help="submit a job (entrypoint after --) and follow its logs")
    submit.add_argument("--address", help="Jobs API URL (default RAY_API_SERVER_ADDRESS or http://127.0.0.1:8265)")
    submit.add_argument("--working-dir", default=".", help="directory uploaded as the job's working dir")
    submit.add_argument("--no-wait", action="store_true", help="return after submitting")
    submit.add_argument("entrypoint", nargs=argparse.REMAINDER, help="-- command ...")
    common(submit)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return ACTIONS[args.action](args)
    except ClusterConfigError as exc:
        print(f"twinkle-agentic cluster: {exc}", file=sys.stderr)
        return 2


def _info(args: argparse.Namespace) -> int:
    from .connect import connect, disconnect

    info = connect(args.address, auth_mode=args.auth_mode)
    print(info.summary())
    disconnect()
    return 0


def _env(args: argparse.Namespace) -> int:
    env = ray_environment(args.auth_mode)
    print(f"export RAY_AUTH_MODE={env['RAY_AUTH_MODE']}")
    if args.address:
        print(f"export RAY_ADDRESS={shlex.quote(args.address)}")
    return 0


def _head(args: argparse.Namespace) -> int:
    from .head import LocalHead

    head = LocalHead(num_cpus=args.num_cpus, num_gpus=args.num_gpus, auth_mode=args.auth_mode, host=args.host)
    head.start()
    print(f"Ray head at {head.address} (pid {head.pid}); dashboard and Jobs API at {head.dashboard_url}")
    print(f"  export RAY_AUTH_MODE={head.env['RAY_AUTH_MODE']} RAY_ADDRESS={head.address}")
    print(f"  ray job submit --address {head.dashboard_url} --working-dir . -- twinkle-agentic ...")
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    # sigwait only takes a signal that is blocked: unblocked, SIGTERM ended this process at once and
    # left the head running, and SIGINT is ignored by processes a script starts in the background.
    # Blocked before the line that tells a script it may now stop the head.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    print("Ctrl-C stops it.", flush=True)
    try:
        signal.sigwait(stop_signals)
    finally:
        head.stop()
    return 0


def _submit(args: argparse.Namespace) -> int:
    from .submit import submit

    entrypoint = args.entrypoint[1:] if args.entrypoint[:1] == ["--"] else args.entrypoint
    if not entrypoint:
        raise ClusterConfigError("no entrypoint: use 'twinkle-agentic cluster submit -- <command> ...'")
    job_id, status = submit(
        entrypoint, address=args.address, working_dir=args.working_dir, wait=not args.no_wait, auth_mode=args.auth_mode
    )
    print(f"job {job_id}: {status}")
    return 0 if status in ("SUCCEEDED", "PENDING", "RUNNING") else 1


ACTIONS = {"info": _info, "env": _env, "head": _head, "submit": _submit}
