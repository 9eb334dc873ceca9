"""Free TCP ports on 127.0.0.1 for the servers the tests start."""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports. NOTE: every socket stays bound until all are chosen: ports
    picked one after another may repeat, and a server given the same port twice fails to start
    or, with ``SO_REUSEPORT`` (grpc sets it), shares it with another listener."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def free_port() -> int:
    return free_ports(1)[0]
