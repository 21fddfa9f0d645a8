"""Ports for local processes come from below the kernel's ephemeral range, so an outgoing
connection cannot take one between the choice and the listener's bind."""

from __future__ import annotations

import socket
from pathlib import Path

from baton.local.ports import free_port, port_open


def test_ports_are_outside_the_ephemeral_range_never_repeat_and_can_be_listened_on() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(p < low for p in ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", ports[0]))
        s.listen()
        assert port_open(ports[0])
