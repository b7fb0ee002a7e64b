"""The tools and environments a rollout worker may offer, and one tool manager per trajectory.

A ``ToolCatalog`` holds named **toolsets** (a ``ToolServerEndpoint``, whose ``RemoteTool`` clients each
worker lists from the server on first use, or a plain list of picklable ``Tool`` objects) and named
**environments** (an ``EnvEndpoint`` per OpenEnv-protocol server). It is only addresses, so the driver
can ship it to the workers inside ``RolloutSpec`` while the services are still starting.

A trajectory chooses with two optional keys: ``toolsets`` (names; default: every toolset) and
``envs`` (names; default: none). For each environment it names, the worker opens **one OpenEnv
session for that trajectory**, resets it with the trajectory's context (so e.g. the guessing game
takes its target from ``user_data``) and registers the environment's tools. Resets are timed as tool
calls named ``<env>.reset``. The model is offered
the environment tools first, then the toolsets', in catalog order.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twinkle_agentic.data_format import ToolInfo, Trajectory
from twinkle_agentic.envs.openenv import DEFAULT_RETRY_ATTEMPTS
from twinkle_agentic.errors import ConfigError
from twinkle_agentic.tools.remote import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S
from twinkle_agentic.tools.tool_manager import ToolManager

from .activity import ActivityRecorder

TOOLSETS_KEY = "toolsets"
ENVS_KEY = "envs"


class SelectionError(ConfigError):
    """A trajectory names a toolset or environment the catalog does not have (its ``toolsets`` or ``envs``)."""


class EnvOpenError(RuntimeError):
    """An environment session could not be opened or reset for a trajectory."""


_listed: dict[tuple[Any, ...], list[Any]] = {}
_listed_lock = threading.Lock()


@dataclass(frozen=True)
class ToolServerEndpoint:
    """A tool server (``deployments/tool_server.py``); ``tools()`` lists it once per process.

    ``timeout_s`` bounds each HTTP attempt of a call, ``retries`` counts extra attempts on connection
    errors and 5xx answers (``twinkle_agentic.tools.remote.HttpPolicy``).
    """

    name: str
    url: str
    token: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES

    def tools(self) -> list[Any]:
        """The server's tools as ``RemoteTool`` clients; raises ``ToolServerError`` if it cannot list them."""
        from twinkle_agentic.tools.remote import RemoteTool

        key = (self.url, self.token, self.timeout_s, self.retries)
        with _listed_lock:
            if key not in _listed:
                _listed[key] = RemoteTool.from_server(self.url, token=self.token, timeout_s=self.timeout_s, retries=self.retries)
            return _listed[key]


@dataclass(frozen=True)
class EnvEndpoint:
    """An OpenEnv-protocol server (``deployments/env_server.py`` or any openenv server).

    ``tools`` are the schemas the environment serves (None: read from its ``/metadata`` once per
    process, see ``tool_schemas``); ``client`` (an ``envs`` entry's ``client`` in the job) goes to
    ``OpenEnv(env_kwargs=...)`` (``message_timeout_s``, ``connect_timeout_s``, ``headers``);
    ``reset_kwargs`` are sent with every reset, next to ``episode_id`` and the ``trajectory``
    context (its ``trajectory_id``, ``prompt_id`` and ``user_data``). The server passes on only the
    keys its environment's ``reset`` accepts.
    """

    name: str
    url: str
    tools: tuple[ToolInfo, ...] | None = None
    client: Mapping[str, Any] = field(default_factory=dict)
    reset_kwargs: Mapping[str, Any] = field(default_factory=dict)
    retry_attempts: int = DEFAULT_RETRY_ATTEMPTS

    def open(self, trajectory: Trajectory) -> Any:
        """A reset OpenEnv session for ``trajectory``; raises ``EnvOpenError`` when it cannot be had."""
        from twinkle_agentic.envs.openenv import OpenEnv

        context = {key: trajectory[key] for key in ("trajectory_id", "prompt_id", "user_data") if key in trajectory}
        reset = {**self.reset_kwargs, "trajectory": context}
        if "trajectory_id" in trajectory:
            reset.setdefault("episode_id", str(trajectory["trajectory_id"]))
        env = OpenEnv(
            self.url,
            env_kwargs=dict(self.client),
            tool_schema=self.tool_schemas(),
            reset_kwargs=reset,
            retry_attempts=self.retry_attempts,
        )
        result = env.reset()
        error = (result.info or {}).get("error_code")
        if error is not None:
            env.close()
            raise EnvOpenError(f"environment {self.name!r} at {self.url}: reset failed ({error}): {result.observation}")
        return env

    def tool_schemas(self) -> list[ToolInfo]:
        """``tools``, else the server's ``/metadata`` tools (read once per process; raises ``EnvOpenError``)."""
        if self.tools is not None:
            return list(self.tools)
        key = ("env", self.url, repr(sorted(dict(self.client.get("headers") or {}).items())))
        with _listed_lock:
            if key not in _listed:
                _listed[key] = _env_metadata_tools(self.url, dict(self.client.get("headers") or {}))
            return list(_listed[key])


def _env_metadata_tools(url: str, headers: dict[str, str]) -> list[ToolInfo]:
    import httpx

    try:
        response = httpx.get(f"{url}/metadata", headers=headers, timeout=30, trust_env=False)
        response.raise_for_status()
        return list(response.json().get("tools") or [])
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise EnvOpenError(f"cannot read the tools of {url} from /metadata: {exc}") from exc


class TimedToolManager(ToolManager):
    """A ``ToolManager`` whose every dispatch is timed as one tool interval of the worker."""

    def __init__(self, recorder: ActivityRecorder, tools: Sequence[Any] = ()):
        super().__init__(list(tools))
        self.recorder = recorder
        self.envs: dict[str, Any] = {}

    def __call__(self, tool_call: Any) -> str:
        function = tool_call.get("function") if isinstance(tool_call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        return self.recorder.tool_call(str(name), lambda: ToolManager.__call__(self, tool_call))

    def env_rewards(self) -> dict[str, float]:
        """Episode reward of each environment session this trajectory held."""
        return {name: float(getattr(env, "episode_reward", 0.0) or 0.0) for name, env in self.envs.items()}


@dataclass
class ToolCatalog:
    """Named toolsets and environments; ``manager_for`` builds a trajectory's tool manager."""

    toolsets: dict[str, ToolServerEndpoint | list[Any]] = field(default_factory=dict)
    envs: dict[str, EnvEndpoint] = field(default_factory=dict)

    def tools_of(self, toolset: str) -> list[Any]:
        entry = self.toolsets[toolset]
        return entry.tools() if isinstance(entry, ToolServerEndpoint) else list(entry)

    def selection(self, trajectory: Trajectory) -> tuple[list[str], list[str]]:
        """``(toolset names, env names)`` a trajectory asks for; ``SelectionError`` names unknown ones."""
        toolsets = _names(trajectory, TOOLSETS_KEY, default=list(self.toolsets))
        envs = _names(trajectory, ENVS_KEY, default=[])
        for kind, names, known in (("toolset", toolsets, self.toolsets), ("environment", envs, self.envs)):
            unknown = [n for n in names if n not in known]
            if unknown:
                raise SelectionError(
                    f"unknown {kind}(s) {unknown}; this run serves {sorted(known) or 'none'}: fix the prompt's "
                    f"'{TOOLSETS_KEY if kind == 'toolset' else ENVS_KEY}' or add a server of that name to the config"
                )
        return toolsets, envs

    def manager_for(self, trajectory: Trajectory, recorder: ActivityRecorder) -> TimedToolManager:
        """The trajectory's tools: its environments' sessions (opened and reset here), then its toolsets."""
        from twinkle_agentic.envs.env_tool import EnvTool

        toolsets, envs = self.selection(trajectory)
        manager = TimedToolManager(recorder)
        try:
            for name in envs:
                endpoint = self.envs[name]
                env = recorder.tool_call(f"{name}.reset", lambda endpoint=endpoint: endpoint.open(trajectory))
                manager.envs[name] = env
                for tool in EnvTool.from_env(env):
                    manager.register(tool)
            for name in toolsets:
                for tool in self.tools_of(name):
                    manager.register(tool)
        except BaseException:
            manager.close()
            raise
        return manager


def _names(trajectory: Trajectory, key: str, default: list[str]) -> list[str]:
    value = trajectory.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise SelectionError(f"'{key}' must be a name or a list of names, got {value!r}")
    return list(value)
