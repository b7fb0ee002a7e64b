"""``RemoteTool``: a tool served by deployments/tool_server.py, registered in a ``ToolManager`` like a local one.

::

    tools = RemoteTool.from_server("http://127.0.0.1:8000/tools", token=os.environ.get("TOOL_TOKEN"))
    manager = ToolManager(tools)      # names, schemas and Error: strings as if the tools were local

A call never raises into the rollout: transport failures, HTTP errors and timeouts come back as
``Error: ...`` strings. Connection errors and 5xx answers (a replica restarting, Serve shedding load)
are retried with exponential backoff and jitter. A read timeout is not retried: the tool may
have run, and tools need not be idempotent. 4xx answers are not retried either.

All RemoteTools of a process share one ``httpx.Client`` (connection reuse, thread-safe, rebuilt
after a fork). A RemoteTool pickles as its configuration only, so a copy shipped into a Ray actor
opens its own connections lazily on first use.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from twinkle_agentic.data_format import ToolInfo
from twinkle_agentic.retry import RetryPolicy

from .base import Tool

RETRY_STATUS = frozenset({500, 502, 503, 504})
DEFAULT_TIMEOUT_S = 60.0  # per HTTP attempt; the tool server specs of the farm and the job default to it
DEFAULT_CONNECT_TIMEOUT_S = 5.0
DEFAULT_RETRIES = 3
MAX_CONNECTIONS = 256
MAX_KEEPALIVE_CONNECTIONS = 64

_client_lock = threading.Lock()
_client: Any = None
_client_pid: int | None = None


def shared_client() -> Any:
    """This process's ``httpx.Client`` (created on first use, recreated in a forked child)."""
    global _client, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            import httpx

            _client = httpx.Client(
                limits=httpx.Limits(
                    max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS
                ),
                trust_env=False,  # tool servers are internal: never route them through an HTTP proxy
            )
            _client_pid = os.getpid()
        return _client


class ToolServerError(RuntimeError):
    """``from_server`` could not list the server's tools (setup time, so it raises)."""

    def __init__(self, url: str, message: str, status: int | None = None):
        super().__init__(f"{url}: {message}")
        self.url = url
        self.status = status


@dataclass(frozen=True)
class HttpPolicy:
    """How to talk to a tool server: token, per-attempt timeouts, retries with exponential backoff.

    ``timeout_s`` bounds each attempt (keep it above the server's ``call_timeout_s`` so the
    server's own timeout string comes back); ``retries`` counts extra attempts after the first;
    the k-th retry waits ``min(backoff_max_s, backoff_s * 2**k)`` with ±20 % jitter.
    """

    token: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    backoff_s: float = 0.25
    backoff_max_s: float = 4.0

    def __post_init__(self) -> None:
        if not self.timeout_s > 0 or not self.connect_timeout_s > 0:
            raise ValueError(
                f"timeout_s and connect_timeout_s must be > 0, got {self.timeout_s!r} and {self.connect_timeout_s!r}"
            )
        if self.retries < 0 or self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ValueError("retries and backoff must be >= 0")

    @property
    def backoff(self) -> RetryPolicy:
        """The pause rule between attempts, the project's one ``RetryPolicy`` (jitter ±20 %)."""
        return RetryPolicy(attempts=self.retries + 1, base_s=self.backoff_s, max_s=self.backoff_max_s)

    def request(self, method: str, url: str, body: Any = None) -> tuple[Any, str | None]:
        """``(response, None)`` on a 2xx answer, else ``(response or None, problem text)``; never raises."""
        import httpx

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        timeout = httpx.Timeout(self.timeout_s, connect=min(self.connect_timeout_s, self.timeout_s))
        attempts = self.retries + 1
        problem = "was not attempted"
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.backoff.delay_s(attempt - 1))
            try:
                response = shared_client().request(method, url, json=body, headers=headers, timeout=timeout)
            except (httpx.ConnectTimeout, httpx.PoolTimeout):
                problem = f"could not connect to {url} within {self.connect_timeout_s:g}s"
                continue
            except httpx.TimeoutException:  # the request was sent: the tool may have run, do not repeat it
                return None, f"timed out after {self.timeout_s:g}s waiting for {url}"
            except httpx.TransportError as exc:  # refused, reset, dropped: the server was not reached or died
                problem = f"could not reach {url}: {type(exc).__name__}: {exc}"
                continue
            except Exception as exc:  # a bad URL or an unserialisable body: report, do not retry
                return None, f"request to {url} failed: {type(exc).__name__}: {exc}"
            if response.status_code < 300:
                return response, None
            detail = response.text[:200]
            if response.status_code in RETRY_STATUS:
                problem = f"got HTTP {response.status_code} from {url}: {detail}"
                continue
            if response.status_code == 401:
                return response, f"was refused by {url} (HTTP 401: missing or wrong bearer token)"
            return response, f"got HTTP {response.status_code} from {url}: {detail}"
        return None, f"{problem} (gave up after {attempts} attempts)"


class RemoteTool(Tool):
    """One function served by a tool server; ``__call__`` POSTs ``{name, arguments}`` to ``<base_url>/call``."""

    timeout_s = None  # HttpPolicy bounds the call; a ToolManager timeout would only add a thread

    def __init__(self, base_url: str, schema: ToolInfo, policy: HttpPolicy | None = None):
        name = (schema.get("function") or {}).get("name") if isinstance(schema, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"RemoteTool schema needs function.name, got {schema!r}")
        self.base_url = base_url.rstrip("/")
        self.name = name
        self.schema = schema
        self.policy = policy or HttpPolicy()

    def __repr__(self) -> str:
        return f"RemoteTool({self.name!r} at {self.base_url})"

    def tool_info(self) -> ToolInfo:
        return self.schema

    @classmethod
    def from_server(
        cls, url: str, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, **policy: Any
    ) -> list[RemoteTool]:
        """One RemoteTool per schema the server lists; raises ``ToolServerError`` if it cannot list them.

        ``timeout_s`` bounds each HTTP attempt; ``policy`` takes the other ``HttpPolicy`` fields.
        """
        base_url = url.rstrip("/")
        http = HttpPolicy(token=token, timeout_s=timeout_s, **policy)
        response, problem = http.request("GET", base_url + "/tools")
        if problem is not None:
            raise ToolServerError(base_url, f"cannot list tools: {problem}", getattr(response, "status_code", None))
        try:
            schemas = response.json()["tools"]
            return [cls(base_url, schema, http) for schema in schemas]
        except (ValueError, KeyError, TypeError) as exc:
            raise ToolServerError(base_url, f"GET /tools did not answer {{'tools': [schema, ...]}}: {exc}") from exc

    def __call__(self, tool_name: str, arguments: dict[str, Any]) -> str:
        """Run the served tool (always under its served name); any failure is an ``Error:`` string."""
        response, problem = self.policy.request("POST", self.base_url + "/call", {"name": self.name, "arguments": arguments})
        if problem is not None:
            return f"Error: tool '{self.name}' {problem}"
        try:
            result = response.json()["result"]
        except (ValueError, KeyError, TypeError):
            return f"Error: tool '{self.name}' got a malformed answer from {self.base_url}: {response.text[:200]!r}"
        return result if isinstance(result, str) else str(result)
