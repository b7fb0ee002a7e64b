"""``PreprocessConfig``: one schema for the YAML file, the command line and Python.

Command-line flags are generated from the dataclass fields (``metadata`` holds the help text), so a
new option is added in one place. Precedence: built-in defaults < the YAML file < flags given.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.config_tree import build
from twinkle_agentic.io import FORMATS, UNREADABLE_FAIL, UNREADABLE_MODES
from twinkle_agentic.preprocessor.step_specs import DEFAULT_PIPELINE, read_pipeline_config

from ..config_flags import add_field_flags, flag_values, option
from .steps import ConfigError, StepSpec, parse_steps, positive_int

OUTPUT_FORMATS = ("jsonl", "parquet")


@dataclass
class PreprocessConfig:
    inputs: list[str] = field(
        default_factory=list,
        metadata=option(
            "input files, directories, globs or pyarrow URIs (JSON Lines or a JSON array, optionally .gz, or Parquet)",
            flag="--input",
            metavar="PATH",
            nargs="+",
            action="extend",
        ),
    )
    output: str = field(default="", metadata=option("output directory (local path or URI)", metavar="DIR"))
    steps: list[StepSpec] = field(
        default_factory=list,
        metadata={
            "cli": False,
            "help": "pipeline steps in order: a name, {Name: {kwargs}} or 'module:Class', with actors, max_actors "
            "and batch_size beside a model step (default: jobs/configs/default_pipeline.yaml)",
        },
    )
    input_format: str | None = field(
        default=None,
        metadata=option("force the input format instead of guessing from file names", choices=FORMATS),
    )
    output_format: str = field(
        default="jsonl",
        metadata=option("format of the kept rows (the drop ledger is always JSONL)", choices=OUTPUT_FORMATS),
    )
    unreadable_files: str = field(
        default=UNREADABLE_FAIL,
        metadata=option(
            "a file that cannot be read to its end (truncated or corrupt compressed data, a damaged "
            "Parquet file, an I/O error): 'fail' stops the run naming it; 'drop' keeps the records "
            "before the break and records the rest as one unreadable_file drop",
            choices=UNREADABLE_MODES,
        ),
    )
    batch_size: int = field(default=1024, metadata=option("rows per map_batches call (and per read block)"))
    dedup_partitions: int | None = field(
        default=None,
        metadata=option(
            "hash partitions of the dedup exchange (default: 2 x cluster CPUs, at most 64, or one per "
            "512 MiB of input when that is more, rounded up to a multiple of the CPUs)"
        ),
    )
    read_concurrency: int | None = field(
        default=None,
        metadata=option(
            "read+filter tasks running at once, and the CPUs the read is spread over (default: the "
            "cluster's CPUs at its largest as its autoscaler reports them, so nodes added while the job "
            "runs take reads too; with no bound reported, the CPUs present when the job starts; an "
            "autoscaler with no upper bound: one per 256 MiB of input, no cap)"
        ),
    )
    actors: int = field(
        default=1, metadata=option("actor pool size of each model stage (steps with needs_actor)")
    )
    max_actors: int | None = field(
        default=None,
        metadata=option(
            "largest actor pool of each model stage: pools start at --actors and grow while batches wait "
            "and the cluster has room (an autoscaling cluster adds nodes for them); default: fixed pools"
        ),
    )
    lineage: bool = field(
        default=False,
        metadata=option(
            'write each kept JSON Lines row as {"source": input file, "line": its line or record '
            'number, "row": the row} (the drop ledger\'s layout; Parquet output always has these columns)'
        ),
    )
    # Each write task gathers this many rows before it starts: the writes are the job's last step, and
    # with 200k a 200k-row input ended on one write task while the other CPUs idled.
    rows_per_file: int = field(default=100_000, metadata=option("about how many rows each output file holds"))
    address: str | None = field(
        default=None,
        metadata=option("Ray cluster address (default: RAY_ADDRESS, else an embedded local cluster)"),
    )
    num_cpus: int | None = field(
        default=None, metadata=option("CPUs of the embedded local cluster (default: all)")
    )
    overwrite: bool = field(
        default=False, metadata=option("replace the outputs of an earlier run in the output directory")
    )
    resume: bool = field(
        default=False,
        metadata=option(
            "make the run resumable, and continue the resumable run in the output directory if there is "
            "one: inputs whose rows passed every stage before the dedup exchange are taken from their "
            "checkpoints, the others are processed again, the exchange and the writes are redone (an "
            "empty output directory starts a fresh run; a finished run is left as it is)"
        ),
    )
    progress: bool = field(
        default=True, metadata=option("hide Ray Data's progress bars", negate="--no-progress")
    )

    def validate(self) -> PreprocessConfig:
        if not self.inputs:
            raise ConfigError("no input: pass --input PATH (or 'inputs:' in the config file)")
        if not self.output:
            raise ConfigError("no output directory: pass --output DIR (or 'output:' in the config file)")
        for name in ("batch_size", "actors", "rows_per_file"):
            positive_int(getattr(self, name), name)
        for name in ("dedup_partitions", "num_cpus", "read_concurrency", "max_actors"):
            if getattr(self, name) is not None:
                positive_int(getattr(self, name), name)
        if self.resume and self.overwrite:
            raise ConfigError(
                "resume and overwrite exclude each other: pass --resume to continue the run in the output "
                "directory, or --overwrite to replace it"
            )
        if self.output_format not in OUTPUT_FORMATS:
            raise ConfigError(f"output_format must be one of {OUTPUT_FORMATS}, got {self.output_format!r}")
        if self.unreadable_files not in UNREADABLE_MODES:
            raise ConfigError(
                f"unreadable_files must be one of {UNREADABLE_MODES}, got {self.unreadable_files!r}"
            )
        if self.input_format is not None and self.input_format not in FORMATS:
            raise ConfigError(f"input_format must be one of {FORMATS}, got {self.input_format!r}")
        return self

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["steps"] = [spec.to_config() for spec in self.steps]
        return data


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twinkle-agentic preprocess",
        description=(
            "Clean multi-turn chat/agent datasets with a Ray Data job: the configured filters as map_batches "
            "stages, global longest-first dedup as a shuffle, every dropped row in a ledger with its reason."
        ),
    )
    parser.add_argument(
        "--config", metavar="PIPELINE_YAML", help=f"pipeline config (default: the bundled {DEFAULT_PIPELINE})"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resolved config and stage plan, run nothing"
    )
    add_field_flags(parser, PreprocessConfig)
    return parser


def resolve_config(args: argparse.Namespace) -> PreprocessConfig:
    """Defaults < YAML < command-line flags; paths in the YAML are relative to the YAML file. The
    values are type-checked once, naming the setting (``twinkle_agentic.config_tree``)."""
    data, where = read_pipeline_config(getattr(args, "config", None))
    values: dict[str, Any] = dict(data)
    values["steps"] = parse_steps(data.get("steps"))
    if isinstance(values.get("inputs"), str):
        values["inputs"] = [values["inputs"]]
    if "inputs" in values and (
        not isinstance(values["inputs"], list) or not all(isinstance(p, str) for p in values["inputs"])
    ):
        raise ConfigError(f"{where}: inputs must be a path or a list of paths, got {values['inputs']!r}")
    base = os.path.dirname(os.path.abspath(args.config)) if getattr(args, "config", None) else os.getcwd()
    if "inputs" in data:
        values["inputs"] = [_relative_to(base, p) for p in values["inputs"]]
    if "output" in data:
        values["output"] = _relative_to(base, values["output"])
    values.update(flag_values(args, PreprocessConfig))
    return build(PreprocessConfig, values, where, ConfigError).validate()


def _relative_to(base: str, path: Any) -> Any:
    if not isinstance(path, str) or "://" in path or os.path.isabs(os.path.expanduser(path)):
        return path
    return os.path.join(base, path)
