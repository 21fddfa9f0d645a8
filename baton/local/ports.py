"""Free loopback ports for the processes a local cluster starts, and whether one listens."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

# A port is handed out from below the kernel's ephemeral range: a port from inside it
# (``bind(0)``) was free a moment ago, but until the process it is meant for listens, any
# outgoing connection on the host may get it as its local port, and the listener's bind then
# fails with "address already in use" (a node agent exited at start that way while another
# test made thousands of connections). Below the range, only another chooser can take it: each
# choice is therefore left reserved (see _reserve) for the minute the process needs to start.
_LOWEST = 10_000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[tuple[str, int]] = set()
_rng = random.SystemRandom()


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _reserve(host: str, port: int) -> int | None:
    """Take ``host:port`` (0: the kernel's choice) if nobody holds it, and leave it in
    TIME_WAIT: for the next minute a bind without ``SO_REUSEADDR`` (another process choosing
    a port here) is refused, while a server's bind, which sets it (uvicorn, Redis, PostgreSQL,
    etcd, Spark's Netty all do), succeeds. Returns the port, or None if it was taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        try:
            listener.bind((host, port))
        except OSError:
            return None
        # Set after the bind, so the bind above still refused a port held by anyone: the
        # accepted end inherits it, and a waiting end with it lets a server's bind through.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.listen(1)
        chosen = int(listener.getsockname()[1])
        with socket.create_connection((host, chosen), timeout=5) as client:
            accepted, _ = listener.accept()
            # The port's own side closes first, so its end is the one left waiting.
            accepted.close()
            with contextlib.suppress(OSError):
                client.recv(1)  # the FIN: the close has gone out before ours
    return chosen


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now, that the kernel does not give to outgoing
    connections, and that no other caller (in any process) is handed for the next minute."""
    top = _ephemeral_start()
    if top - _LOWEST >= 1_000:
        for _ in range(200):
            port = _rng.randrange(_LOWEST, top)
            if (host, port) not in _handed_out and _reserve(host, port) is not None:
                _handed_out.add((host, port))
                return port
    # No room below the ephemeral range (or none free in it): the kernel's choice.
    for _ in range(200):
        given = _reserve(host, 0)
        if given is not None and (host, given) not in _handed_out:
            _handed_out.add((host, given))
            return given
    raise OSError(f"no free TCP port on {host}")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
