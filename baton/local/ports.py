"""Free loopback ports for the processes a local cluster starts, and whether one listens."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Ports handed out are taken from below the kernel's ephemeral range: a port taken from inside
# it (``bind(0)``) was free a moment ago, but until the process it is meant for listens, any
# outgoing connection on the host may get it as its local port, and the listener's bind then
# fails with "address already in use" (seen in CI: a node agent exited at start while another
# test made thousands of connections). Below the range only another listener can take it.
_LOWEST = 10_000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[tuple[str, int]] = set()
_rng = random.SystemRandom()


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now and that the kernel does not give to outgoing
    connections; never the same one twice in a process."""
    top = _ephemeral_start()
    if top - _LOWEST >= 1_000:
        for _ in range(200):
            port = _rng.randrange(_LOWEST, top)
            if (host, port) not in _handed_out and _bindable(host, port):
                _handed_out.add((host, port))
                return port
    # No room below the ephemeral range (or none free in it): the kernel's choice.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    _handed_out.add((host, port))
    return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port`` now."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False
