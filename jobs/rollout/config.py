"""``RolloutJobConfig``: one typed tree for the rollout job's YAML, its command line and Python.

The tree composes the farm's own frozen dataclasses, so each setting has one name and one default
from the YAML down to the actors: ``engine`` is an ``EngineConfig`` (the ``VLLMEngineConfig`` fields
plus the worker's Ray resources; ``model`` and ``mode`` are written at the top level), ``groups`` a
``GroupConfig`` (GRPO advantages over each prompt's samples, member retries), ``sampling`` a
``SamplingParams`` (keys it has no field for pass through to vLLM), the rollout settings
(``RolloutSpec``: ``max_turns``...) and the farm options (``FarmOptions``: ``engines``,
``batch_size``...) are spelled at the top level, and ``tools``/``envs`` are lists of server specs.
Every setting with a plain value has a flag: ``--engines 2``, ``--max-turns 4``,
``--engine.tensor_parallel_size 2``, ``--sampling.temperature 0.7``. Precedence: built-in defaults <
the YAML file < flags given. Paths in the YAML are relative to the YAML file. The tree is built and
checked once, in ``resolve_config`` / ``config_from_mapping``; what it hands on is frozen.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.actors.config import EngineConfig, FarmConfigError, FarmOptions, RolloutSpec

from twinkle_agentic.checks import check_positive
from twinkle_agentic.config_tree import build, section, to_mapping
from twinkle_agentic.data_format import SamplingParams
from twinkle_agentic.envs.openenv import DEFAULT_RETRY_ATTEMPTS
from twinkle_agentic.errors import ConfigError as BaseConfigError
from twinkle_agentic.loading import load_yaml as _load_yaml
from twinkle_agentic.rollout.groups import GroupConfig
from twinkle_agentic.tools.remote import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S

from ..config_flags import ConfigArgumentParser, add_field_flags, flag_values, option, yaml_only

OUTPUT_FORMATS = ("jsonl", "parquet")
DIGEST_SPAN = 1 << 20  # bytes read from each end of a weights file to tell checkpoints apart


class ConfigError(FarmConfigError):
    """The rollout job's configuration or input is invalid; the message names the setting and the fix."""


@dataclass(frozen=True)
class ToolServerSpec:
    """A tool server: deployed on Serve from ``tools`` (import paths), or already running at ``url``.

    ``timeout_s`` bounds each HTTP attempt of a tool call and ``retries`` counts the extra attempts
    (``twinkle_agentic.tools.remote.HttpPolicy``, whose defaults these are).
    """

    name: str
    tools: list[Any] = field(default_factory=list)
    url: str | None = None
    route_prefix: str | None = None
    deployment: dict[str, Any] = field(default_factory=dict)
    user_config: dict[str, Any] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    token_env: str | None = None


@dataclass(frozen=True)
class EnvServerSpec:
    """An OpenEnv-protocol env server: deployed on Serve from ``env`` ("module:Class"), or running at ``url``.

    ``env_kwargs`` construct the environment on the server; ``client`` holds the options of each
    trajectory's client session (``OpenEnv(env_kwargs=...)``: ``message_timeout_s``, ``headers``...).
    """

    name: str
    env: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    url: str | None = None
    route_prefix: str | None = None
    deployment: dict[str, Any] = field(default_factory=dict)
    user_config: dict[str, Any] | None = None
    client: dict[str, Any] = field(default_factory=dict)
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    retry_attempts: int = DEFAULT_RETRY_ATTEMPTS
    token_env: str | None = None


def default_engine() -> EngineConfig:
    """The engine of a config that names none: the bundled tiny model, the EngineConfig defaults."""
    from twinkle_agentic.demo import tiny_model_path

    return EngineConfig(model=tiny_model_path())


@dataclass(frozen=True)
class RolloutJobConfig:
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
    groups: GroupConfig = field(
        default_factory=GroupConfig,
        metadata=section("GRPO groups: advantage estimator, epsilon, which failures fail a member, member retries"),
    )
    engine: EngineConfig = field(
        default_factory=default_engine,
        metadata=section(
            "per-engine vLLM settings and Ray resources; model and mode are written at the top level",
            hoist=("model", "mode"),
        ),
    )
    rollout: RolloutSpec = field(
        default_factory=RolloutSpec,
        metadata=section("sampling, turns, budgets, template, mode options", flatten=True),
    )
    farm: FarmOptions = field(
        default_factory=FarmOptions, metadata=section("engines, batches, restarts", flatten=True)
    )
    tools: list[ToolServerSpec] = field(default_factory=list, metadata=yaml_only("tool servers"))
    envs: list[EnvServerSpec] = field(default_factory=list, metadata=yaml_only("env servers"))
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

    # -- the parts the farm receives -----------------------------------------------------------------

    @property
    def engines(self) -> int:
        return self.farm.engines

    def model_path(self) -> str:
        return self.engine.model

    def engine_config(self) -> EngineConfig:
        return self.engine

    def rollout_spec(self, catalog: Any = None) -> RolloutSpec:
        return dataclasses.replace(self.rollout, catalog=catalog)

    def farm_options(self) -> FarmOptions:
        return self.farm

    def fingerprint(self) -> dict[str, Any]:
        """The settings a finished trajectory depends on; a resumed run must match them. ``rewards`` is
        left out when none is configured, and ``groups`` for one sample per prompt with the default
        settings, so journals written before either existed still resume."""
        rollout = self.rollout
        return {
            "model": model_identity(self.engine.model),
            "mode": self.engine.mode,
            "sampling": rollout.sampling.settings(),
            "max_turns": rollout.max_turns,
            "max_trajectory_tokens": rollout.max_trajectory_tokens,
            "samples_per_prompt": self.samples_per_prompt,
            "template": dict(rollout.template),
            "tools": sorted(s.name for s in self.tools),
            "envs": sorted(s.name for s in self.envs),
            **({"mode_options": dict(rollout.mode_options)} if rollout.mode_options else {}),
            **({"rewards": [reward_identity(r) for r in rollout.rewards]} if rollout.rewards else {}),
            **({"groups": to_mapping(self.groups)} if self.samples_per_prompt > 1 or self.groups != GroupConfig() else {}),
        }

    # -- checks ----------------------------------------------------------------------------------------

    def validate(self) -> RolloutJobConfig:
        if not self.prompts:
            raise ConfigError("no prompts: pass --prompts PATH (or 'prompts:' in the config file)")
        if not self.output:
            raise ConfigError("no output directory: pass --output DIR (or 'output:' in the config file)")
        if self.output_format not in OUTPUT_FORMATS:
            raise ConfigError(f"output_format must be one of {OUTPUT_FORMATS}, got {self.output_format!r}")
        check_positive("samples_per_prompt", self.samples_per_prompt, integer=True, error=ConfigError)
        for name in ("limit", "num_cpus", "serve_port"):
            check_positive(name, getattr(self, name), integer=True, allow_none=True, error=ConfigError)
        check_positive("deploy_timeout_s", self.deploy_timeout_s, error=ConfigError)
        temperature = self.rollout.sampling.temperature if isinstance(self.rollout.sampling, SamplingParams) else None
        if self.samples_per_prompt > 1 and temperature == 0:
            raise ConfigError(
                f"samples_per_prompt={self.samples_per_prompt} with greedy sampling (sampling.temperature 0, the "
                "rollout default) makes every sample of a prompt the same trajectory, so a group has nothing to compare: "
                "set sampling.temperature > 0 ('sampling: {temperature: 1.0}' or --sampling.temperature 1.0)"
            )
        try:
            from twinkle_agentic.actors.modes import check_mode_options

            self.engine.validate()
            self.rollout_spec().validate()
            self.rollout.sampling.check_vllm_fields()
            check_mode_options(self.engine.mode, self.rollout.mode_options)
            self.farm.validate()
            self.groups.validate()
        except BaseConfigError as exc:
            raise (exc if isinstance(exc, ConfigError) else ConfigError(str(exc))) from exc
        try:  # the template section, once here rather than on every worker
            from twinkle_agentic.template.options import check_template_options

            check_template_options(self.rollout.template)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        names = [s.name for s in self.tools] + [s.name for s in self.envs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"tool and env server names must be unique, {duplicates} repeat; rename one")
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
        """The YAML-shaped view (what ``config_from_mapping`` reads back)."""
        return to_mapping(self)


def reward_identity(spec: Any) -> dict[str, Any]:
    """A reward function's settings as JSON: a function given as an object (not an import path) by its
    ``module:qualname``."""
    function = spec.function
    if not isinstance(function, str):
        function = f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', type(function).__name__)}"
    return {**to_mapping(spec), "function": function}


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


# -- YAML and flags ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = ConfigArgumentParser(
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
    return _load_yaml(path, error=ConfigError)


def config_from_mapping(data: dict[str, Any], where: str = "config") -> RolloutJobConfig:
    """Build the tree (not yet validated) from a YAML-shaped mapping; ``model`` null or absent is the
    bundled tiny model."""
    data = dict(data)
    if "model" in data and data["model"] is None:
        del data["model"]
    try:
        return build(RolloutJobConfig, data, where, ConfigError)
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from exc


def resolve_config(args: argparse.Namespace) -> RolloutJobConfig:
    """Defaults < YAML < command-line flags, validated. YAML paths are relative to the YAML file,
    flag paths to the working directory."""
    path = getattr(args, "config", None)
    data = resolve_paths(load_yaml(path), os.path.dirname(os.path.abspath(path))) if path else {}
    data = merge(data, flag_values(args, RolloutJobConfig))
    return config_from_mapping(data, path or "command line").validate()


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; nested mappings (``engine``, ``sampling``) are merged key by key."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


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
