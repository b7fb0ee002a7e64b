"""Free TCP ports on this machine, for servers the project starts (Ray heads, Serve, test servers).

One helper for every caller: ports picked one at a time may come back equal, so asking for several
at once keeps every socket bound until all are picked.
"""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int, host: str = "127.0.0.1", exclude: tuple[int, ...] = ()) -> list[int]:
    """``count`` distinct free ports on ``host``, none in ``exclude``. Every socket stays bound until
    all are picked: ports picked one at a time may come back equal (a Ray head once failed to start
    because its dashboard and runtime-env agent were given the same port)."""
    if count < 0:
        raise ValueError(f"free_ports(count={count}): count must be >= 0")
    ports: list[int] = []
    with contextlib.ExitStack() as bound:
        while len(ports) < count:
            s = bound.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in exclude:
                ports.append(port)
    return ports


def free_port(host: str = "127.0.0.1") -> int:
    """One free port on ``host`` (free when picked; a server should bind it soon after)."""
    return free_ports(1, host)[0]
