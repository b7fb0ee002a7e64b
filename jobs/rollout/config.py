"""``RolloutJobConfig``: one schema for the rollout job's YAML, its command line and Python.

Top-level scalar fields become flags (``--engines 2``, ``--output DIR``...); the nested sections
(``engine``, ``sampling``, ``template``, ``tools``, ``envs``) live in the YAML. Precedence: built-in
defaults < the YAML file < flags given. Paths in the YAML are relative to the YAML file.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.actors.config import EngineConfig, FarmConfigError, RolloutSpec
from twinkle_agentic.actors.driver import FarmOptions

from ..config_flags import add_field_flags, cli_fields, option, yaml_only

OUTPUT_FORMATS = ("jsonl", "parquet")
DIGEST_SPAN = 1 << 20  # bytes read from each end of a weights file to tell checkpoints apart
ENGINE_KEYS = tuple(f.name for f in dataclasses.fields(EngineConfig) if f.name not in ("model", "mode"))
TOOL_KEYS = (
    "name",
    "tools",
    "url",
    "route_prefix",
    "deployment",
    "user_config",
    "timeout_s",
    "retries",
    "token_env",
)
ENV_KEYS = (
    "name", "env", "env_kwargs", "url", "route_prefix", "deployment", "user_config", "client", "reset_kwargs",
    "retry_attempts", "token_env",
)  # fmt: skip


class ConfigError(FarmConfigError):
    """The rollout job's configuration or input is invalid; the message names the setting and the fix."""


@dataclass
class ToolServerSpec:
    """A tool server: deployed on Serve from ``tools`` (import paths), or already running at ``url``."""

    name: str
    tools: list[Any] = field(default_factory=list)
    url: str | None = None
    route_prefix: str | None = None
    deployment: dict[str, Any] = field(default_factory=dict)
    user_config: dict[str, Any] | None = None
    timeout_s: float = 60.0
    retries: int = 3
    token_env: str | None = None


@dataclass
class EnvServerSpec:
    """An OpenEnv-protocol env server: deployed on Serve from ``env`` ("module:Class"), or running at ``url``."""

    name: str
    env: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    url: str | None = None
    route_prefix: str | None = None
    deployment: dict[str, Any] = field(default_factory=dict)
    user_config: dict[str, Any] | None = None
    client: dict[str, Any] = field(default_factory=dict)
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    retry_attempts: int = 8
    token_env: str | None = None


@dataclass
class RolloutJobConfig:
    model: str | None = field(
        default=None,
        metadata=option("model directory or hub id (default: the bundled tiny model)", metavar="PATH"),
    )
    prompts: str = field(
        default="",
        metadata=option(
            "prompts file: JSON Lines, a JSON array (.json) or Parquet, optionally compressed", metavar="PATH"
        ),
    )
    output: str = field(
        default="", metadata=option("output directory (journal, trajectories, summary)", metavar="DIR")
    )
    output_format: str = field(
        default="jsonl",
        metadata=option(
            "format of the final trajectories file (the resumable journal is always JSONL)",
            choices=OUTPUT_FORMATS,
        ),
    )
    limit: int | None = field(default=None, metadata=option("roll out only the first N prompts"))
    samples_per_prompt: int = field(default=1, metadata=option("trajectories per prompt (e.g. a GRPO group)"))
    mode: str = field(
        default="sync",
        metadata=option(
            "rollout mode of the workers: sync (turn-synchronous), async (per trajectory), or module:Class"
        ),
    )
    mode_options: dict[str, Any] = field(
        default_factory=dict,
        metadata=yaml_only(
            "options of the mode (async: tool_limits, default_tool_limit, parallel_tool_calls, failure_policy)"
        ),
    )
    engines: int = field(
        default=1, metadata=option("number of engines (rollout workers, one vLLM engine each)")
    )
    engine: dict[str, Any] = field(
        default_factory=dict,
        metadata=yaml_only(f"per-engine settings and resources: {', '.join(ENGINE_KEYS)}"),
    )
    sampling: dict[str, Any] = field(
        default_factory=lambda: {"temperature": 0.0, "max_tokens": 128},
        metadata=yaml_only("SamplingParams fields"),
    )
    max_turns: int = field(default=6, metadata=option("assistant turns per trajectory"))
    max_trajectory_tokens: int | None = field(default=None, metadata=option("token budget per trajectory"))
    template: dict[str, Any] = field(default_factory=dict, metadata=yaml_only("Template options"))
    tools: list[ToolServerSpec] = field(default_factory=list, metadata=yaml_only("tool servers"))
    envs: list[EnvServerSpec] = field(default_factory=list, metadata=yaml_only("env servers"))
    batch_size: int = field(default=8, metadata=option("trajectories per worker call"))
    inflight_per_worker: int = field(default=2, metadata=option("batches queued per worker"))
    tool_concurrency: int = field(default=8, metadata=option("tool calls a worker runs at once"))
    ready_timeout_s: float = field(default=900.0, metadata=option("how long an engine may take to start"))
    batch_timeout_s: float | None = field(
        default=None, metadata=option("restart a worker stuck on one batch this long")
    )
    max_worker_restarts: int = field(default=3, metadata=option("replacements per worker slot"))
    max_batch_attempts: int = field(
        default=3, metadata=option("failures a batch may cause before its trajectories end in error")
    )
    verify_tokens: bool = field(
        default=True,
        metadata=option(
            "skip re-rendering each trajectory to measure token_drift", negate="--no-verify-tokens"
        ),
    )
    serve_host: str = field(
        default="127.0.0.1", metadata=option("Serve HTTP host (set a token_env before 0.0.0.0)")
    )
    serve_port: int | None = field(
        default=None,
        metadata=option("Serve HTTP port (default: a free port on an embedded cluster, else 8000)"),
    )
    deploy_timeout_s: float = field(
        default=180.0, metadata=option("how long the tool/env apps may take to come up")
    )
    keep_services: bool = field(
        default=False, metadata=option("leave the deployed tool/env apps running at the end")
    )
    address: str | None = field(
        default=None,
        metadata=option("Ray cluster address (default: RAY_ADDRESS, else an embedded local cluster)"),
    )
    num_cpus: int | None = field(default=None, metadata=option("logical CPUs of the embedded local cluster"))
    worker_logs: bool = field(
        default=False, metadata=option("stream the workers' (engines') logs to this console")
    )
    overwrite: bool = field(default=False, metadata=option("discard an earlier run in the output directory"))
    progress: bool = field(default=True, metadata=option("hide the progress bar", negate="--no-progress"))

    # -- derived objects -----------------------------------------------------------------------------

    def model_path(self) -> str:
        if self.model:
            return self.model
        from twinkle_agentic.demo import tiny_model_path

        return tiny_model_path()

    def engine_config(self) -> EngineConfig:
        return EngineConfig(model=self.model_path(), mode=self.mode, **self.engine)

    def rollout_spec(self, catalog: Any = None) -> RolloutSpec:
        return RolloutSpec(
            sampling=dict(self.sampling),
            max_turns=self.max_turns,
            max_trajectory_tokens=self.max_trajectory_tokens,
            tool_concurrency=self.tool_concurrency,
            verify_tokens=self.verify_tokens,
            template=dict(self.template),
            catalog=catalog,
            mode_options=dict(self.mode_options),
        )

    def farm_options(self) -> FarmOptions:
        return FarmOptions(
            workers=self.engines,
            batch_size=self.batch_size,
            inflight_per_worker=self.inflight_per_worker,
            ready_timeout_s=self.ready_timeout_s,
            max_worker_restarts=self.max_worker_restarts,
            max_batch_attempts=self.max_batch_attempts,
            batch_timeout_s=self.batch_timeout_s,
        )

    def fingerprint(self) -> dict[str, Any]:
        """The settings a finished trajectory depends on; a resumed run must match them."""
        return {
            "model": model_identity(self.model_path()),
            "mode": self.mode,
            "sampling": dict(self.sampling),
            "max_turns": self.max_turns,
            "max_trajectory_tokens": self.max_trajectory_tokens,
            "samples_per_prompt": self.samples_per_prompt,
            "template": dict(self.template),
            "tools": sorted(s.name for s in self.tools),
            "envs": sorted(s.name for s in self.envs),
            **({"mode_options": dict(self.mode_options)} if self.mode_options else {}),
        }

    # -- checks ----------------------------------------------------------------------------------------

    def validate(self) -> RolloutJobConfig:
        if not self.prompts:
            raise ConfigError("no prompts: pass --prompts PATH (or 'prompts:' in the config file)")
        if not self.output:
            raise ConfigError("no output directory: pass --output DIR (or 'output:' in the config file)")
        if self.output_format not in OUTPUT_FORMATS:
            raise ConfigError(f"output_format must be one of {OUTPUT_FORMATS}, got {self.output_format!r}")
        for name in ("samples_per_prompt",):
            _check_int(name, getattr(self, name))
        for name in ("limit", "num_cpus", "serve_port"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name))
        if not isinstance(self.deploy_timeout_s, (int, float)) or self.deploy_timeout_s <= 0:
            raise ConfigError(f"deploy_timeout_s must be a number > 0, got {self.deploy_timeout_s!r}")
        unknown = sorted(set(self.engine) - set(ENGINE_KEYS))
        if unknown:
            raise ConfigError(f"engine: unknown key(s) {unknown}; known: {list(ENGINE_KEYS)}")
        try:
            from twinkle_agentic.actors.modes import check_mode_options

            self.engine_config().validate()
            self.rollout_spec().validate()
            check_mode_options(self.mode, self.mode_options)
            self.farm_options().validate()
        except FileNotFoundError as exc:
            raise ConfigError(str(exc)) from exc
        except (FarmConfigError, TypeError) as exc:
            raise ConfigError(str(exc)) from exc
        names = [s.name for s in self.tools] + [s.name for s in self.envs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"tool and env server names must be unique, {duplicates} repeat")
        for spec in self.tools:
            if not spec.name or not isinstance(spec.name, str):
                raise ConfigError(f"every tools entry needs a name, got {spec.name!r}")
            if (spec.url is None) == (not spec.tools):
                raise ConfigError(
                    f"tools '{spec.name}': give either tools (import paths to deploy) or url, not both"
                )
        for spec in self.envs:
            if not spec.name or not isinstance(spec.name, str):
                raise ConfigError(f"every envs entry needs a name, got {spec.name!r}")
            if (spec.url is None) == (spec.env is None):
                raise ConfigError(
                    f"envs '{spec.name}': give either env ('module:Class' to deploy) or url, not both"
                )
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def model_identity(model: str) -> str:
    """What a model *is*, independent of where it lies: a local directory by a digest of its config and
    weights (their names, sizes, first and last MiB), a hub id as given. A ``ray job submit`` copy of
    the same checkpoint in another working directory is the same model."""
    if not os.path.isdir(model):
        return model
    digest = hashlib.sha256()
    for name in sorted(os.listdir(model)):
        path = os.path.join(model, name)
        if not os.path.isfile(path):
            continue
        if name == "config.json" or name.endswith(("tokenizer.json", "tokenizer_config.json")):
            with open(path, "rb") as handle:
                digest.update(name.encode() + b"\0" + handle.read())
        elif name.endswith((".safetensors", ".bin", ".pt")):
            size = os.path.getsize(path)
            with open(path, "rb") as handle:
                head = handle.read(DIGEST_SPAN)
                handle.seek(max(0, size - DIGEST_SPAN))
                tail = handle.read(DIGEST_SPAN)
            digest.update(f"{name}\0{size}\0".encode() + head + tail)
    return f"sha256:{digest.hexdigest()[:32]}"


def _check_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")


# -- YAML and flags ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twinkle-agentic rollout",
        description=(
            "Multi-turn tool-calling rollouts on a Ray farm of vLLM engines: tools and environments served on "
            "Ray Serve, trajectories with input_ids/labels/logprobs streamed to a resumable journal."
        ),
    )
    parser.add_argument(
        "--config", metavar="ROLLOUT_YAML", help="job config (see jobs/configs/demo_rollout.yaml)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resolved config and plan, run nothing"
    )
    add_field_flags(parser, RolloutJobConfig)
    return parser


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of options, got {type(data).__name__}")
    return data


def _specs(where: str, entries: Any, cls: type, allowed: tuple[str, ...]) -> list[Any]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"{where} must be a list of mappings, got {type(entries).__name__}")
    specs = []
    for i, entry in enumerate(entries):
        if isinstance(entry, cls):
            specs.append(entry)
            continue
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}[{i}] must be a mapping, got {type(entry).__name__}")
        unknown = sorted(set(entry) - set(allowed))
        if unknown:
            raise ConfigError(f"{where}[{i}]: unknown key(s) {unknown}; known: {list(allowed)}")
        if "name" not in entry:
            raise ConfigError(f"{where}[{i}] needs a name")
        specs.append(cls(**entry))
    return specs


def config_from_mapping(data: dict[str, Any], where: str = "config") -> RolloutJobConfig:
    """Build (not yet validated) from a YAML-shaped mapping."""
    known = {f.name for f in dataclasses.fields(RolloutJobConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {unknown}; known: {sorted(known)}")
    values = dict(data)
    values["tools"] = _specs("tools", data.get("tools"), ToolServerSpec, TOOL_KEYS)
    values["envs"] = _specs("envs", data.get("envs"), EnvServerSpec, ENV_KEYS)
    for name in ("engine", "sampling", "template", "mode_options"):
        if name in values and not isinstance(values[name], dict):
            raise ConfigError(f"{where}: {name} must be a mapping, got {type(values[name]).__name__}")
    try:
        return RolloutJobConfig(**values)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def resolve_config(args: argparse.Namespace) -> RolloutJobConfig:
    """Defaults < YAML < command-line flags, validated. YAML paths are relative to the YAML file,
    flag paths to the working directory."""
    path = getattr(args, "config", None)
    data = resolve_paths(load_yaml(path), os.path.dirname(os.path.abspath(path))) if path else {}
    for f in cli_fields(RolloutJobConfig):
        if hasattr(args, f.name):
            data[f.name] = getattr(args, f.name)
    return config_from_mapping(data, path or "command line").validate()


def resolve_paths(data: dict[str, Any], base: str) -> dict[str, Any]:
    """``prompts``/``output`` relative to ``base``; ``model`` too when such a directory exists (else a hub id)."""
    data = dict(data)
    for name in ("prompts", "output", "model"):
        value = data.get(name)
        if not isinstance(value, str) or "://" in value or os.path.isabs(os.path.expanduser(value)):
            continue
        candidate = os.path.normpath(os.path.join(base, value))
        if name != "model" or os.path.exists(candidate):
            data[name] = candidate
    return data
