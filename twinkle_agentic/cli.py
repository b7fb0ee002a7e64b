"""The ``twinkle-agentic`` command.

Each subcommand lives in its own module exposing ``main(argv: list[str] | None) -> int``; this module
only dispatches, so ``--help`` stays cheap (no subcommand module is imported to print it).
Exit codes: 0 success, 1 run failure, 2 bad usage or config.
"""

from __future__ import annotations

import importlib
import sys

# name -> ("module:function", one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("twinkle_agentic.doctor:main", "report which optional stacks are installed and working"),
    "cluster": ("twinkle_agentic.cluster.cli:main", "connect to / start / stop a Ray cluster; print its environment"),
    "preprocess": ("twinkle_agentic.jobs.preprocess:main", "clean chat/agent datasets on Ray Data: filters, global dedup, drop ledger"),
    "rollout": ("twinkle_agentic.jobs.rollout:main", "multi-turn tool-calling rollouts on a Ray farm of vLLM engines, resumable"),
    "demo": ("twinkle_agentic.jobs.demo:main", "the full demo on a local cluster: preprocess the sample, serve tools, roll out"),
}


def _usage() -> str:
    width = max(len(n) for n in COMMANDS) + 2
    lines = [
        "usage: twinkle-agentic <command> [options]",
        "",
        "Clean multi-turn chat/agent data and run multi-turn tool-calling rollouts on Ray.",
        "",
        "commands:",
    ]
    lines += [f"  {name.ljust(width)}{help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'twinkle-agentic <command> --help' for the options of a command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from importlib.metadata import version

        print(version("twinkle-agentic"))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"twinkle-agentic: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
