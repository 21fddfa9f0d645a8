"""Store failover with real Redis servers (a master and replicas) and real ``baton
redis-failover`` client and server processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from baton.testing import wait_for
from baton.testing.failover import (
    ClientRole,
    RedisGroup,
    ServerRole,
    failover_client,
    failover_server,
)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[RedisGroup]:
    with RedisGroup(tmp_path / "redis", 3) as g:
        yield g


@pytest.fixture
def procs() -> Iterator[list[ClientRole | ServerRole]]:
    started: list[ClientRole | ServerRole] = []
    yield started
    for p in started:
        p.proc.stop()


def _settled(group: RedisGroup, clients: list[ClientRole]) -> bool:
    """One master among the servers that answer, every replica following it, every client's
    file naming it."""
    masters = group.masters()
    return len(masters) == 1 and all(c.master() == masters[0] for c in clients)


def test_master_killed_switches_once_and_every_client_follows(
    tmp_path: Path, group: RedisGroup, procs: list[ClientRole | ServerRole]
) -> None:
    clients = [failover_client(tmp_path, cid) for cid in ("a", "b")]
    procs += clients
    server = failover_server(tmp_path, group, clients, "s1")
    procs.append(server)
    old = group.addresses[0]
    wait_for(lambda: all(c.master() == old for c in clients), timeout=20, what="files name m")

    group.servers[0].kill()
    wait_for(lambda: server.switches() >= 1, timeout=20, what="a switch")
    wait_for(lambda: _settled(group, clients), timeout=20, what="one master everywhere")
    new = clients[0].master()
    assert new is not None and new != old
    assert server.switches() == 1
    st = server.status()
    assert st is not None and st["last_round"]["outcome"] == "switched"
