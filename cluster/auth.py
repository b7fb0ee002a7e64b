"""One authentication mode for every Ray process this project starts or talks to.

Ray 2.60 decides token authentication per process: ``ray.init()`` on a fresh local cluster turns it
on (and writes ``~/.ray/auth_token``), while ``ray start`` and ``ray job submit`` turn it on only
when a token file already exists. Mixing them (a head started before the first ``ray.init()``, a
submit after it) makes the Jobs API refuse requests. We therefore always set ``RAY_AUTH_MODE``
explicitly, make sure a token exists when the mode is ``token``, and pass the same environment to
every child process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from twinkle_agentic.errors import ConfigError

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
AUTH_MODES = ("token", "disabled")
DEFAULT_AUTH_MODE = "token"


class ClusterConfigError(ConfigError):
    """A cluster setting is invalid; the message says which and how to fix it."""


def resolve_auth_mode(auth_mode: str | None = None) -> str:
    mode = (auth_mode or os.environ.get(AUTH_MODE_ENV) or DEFAULT_AUTH_MODE).strip().lower()
    if mode not in AUTH_MODES:
        raise ClusterConfigError(
            f"{AUTH_MODE_ENV}={mode!r} is not supported; use one of {', '.join(AUTH_MODES)}"
        )
    return mode


def token_path() -> Path:
    return Path(os.environ.get(TOKEN_PATH_ENV) or Path.home() / ".ray" / "auth_token")


def ensure_token() -> Path:
    """Create the cluster token with Ray's own CLI when it does not exist yet."""
    path = token_path()
    if not path.exists() and not os.environ.get("RAY_AUTH_TOKEN"):
        ray_cli = Path(sys.executable).with_name("ray")
        cmd = [str(ray_cli)] if ray_cli.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
        subprocess.run([*cmd, "get-auth-token", "--generate"], check=True, capture_output=True)
    return path


def apply_auth_mode(auth_mode: str | None = None) -> str:
    """Fix the auth mode for this process and its children; returns the mode."""
    mode = resolve_auth_mode(auth_mode)
    if mode == "token":
        ensure_token()
    if os.environ.get(AUTH_MODE_ENV) != mode:
        os.environ[AUTH_MODE_ENV] = mode
        _refresh_ray_config()
    return mode


def _refresh_ray_config() -> None:
    """Ray caches its C++ config (auth mode included) once imported; make it re-read the environment."""
    import sys

    if "ray" not in sys.modules:
        return
    try:
        from ray._raylet import Config
    except ImportError:  # pragma: no cover - other Ray versions
        return
    Config.initialize("")


def ray_environment(auth_mode: str | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a Ray child process (``ray start``, ``ray job submit``, a job driver)."""
    env = dict(os.environ if base is None else base)
    env[AUTH_MODE_ENV] = apply_auth_mode(auth_mode)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Child processes must find this interpreter's console scripts (ray, twinkle-agentic).
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in env.get("PATH", "").split(os.pathsep):
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def auth_headers(env: dict[str, str] | None = None) -> dict[str, str]:
    """HTTP headers for the dashboard / Jobs API under the given environment's auth mode."""
    env = os.environ if env is None else env
    if env.get(AUTH_MODE_ENV, "").lower() != "token":
        return {}
    token = env.get("RAY_AUTH_TOKEN") or token_path().read_text().strip()
    return {"Authorization": f"Bearer {token}"}
