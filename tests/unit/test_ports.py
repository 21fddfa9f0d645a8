"""Ports for local processes come from below the kernel's ephemeral range, so an outgoing
connection cannot take one between the choice and the listener's bind, and each is left
reserved, so another process choosing at the same moment cannot take it either."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from baton.local.ports import free_port, port_open


def test_ports_are_outside_the_ephemeral_range_never_repeat_and_can_be_listened_on() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(p < low for p in ports)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as every server does
        s.bind(("127.0.0.1", ports[0]))
        s.listen()
        assert port_open(ports[0])


def test_a_chosen_port_is_refused_to_another_chooser() -> None:
    """Another process's choice binds without SO_REUSEADDR: it must find the port taken."""
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, pytest.raises(OSError):
        s.bind(("127.0.0.1", port))
