"""Store failover with real Redis servers (a master and replicas) and real ``baton
redis-failover`` client and server processes."""

from __future__ import annotations

import datetime
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from baton.errors import NoMaster
from baton.failover import master_client
from baton.testing import wait_for
from baton.testing.failover import (
    ClientRole,
    IncrWorker,
    RedisGroup,
    ServerRole,
    baton_exe,
    failover_client,
    failover_server,
)
from baton.testing.servers import RedisServer


@pytest.fixture
def group(tmp_path: Path) -> Iterator[RedisGroup]:
    with RedisGroup(tmp_path / "redis", 3) as g:
        yield g


def _settled(group: RedisGroup, clients: list[ClientRole]) -> bool:
    """One master among the servers that answer, every replica following it, every client's
    file naming it."""
    masters = group.masters()
    return len(masters) == 1 and all(c.master() == masters[0] for c in clients)


def test_master_killed_switches_once_and_every_client_follows(
    tmp_path: Path, group: RedisGroup, procs: list[ClientRole | ServerRole]
) -> None:
    # Both ways of configuring: options (a) and TOML files (b, the server).
    clients = [failover_client(tmp_path, "a"), failover_client(tmp_path, "b", via_config=True)]
    procs += clients
    server = failover_server(tmp_path, group, clients, "s1", via_config=True)
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
    # The old master returns (empty, a master of nothing): it becomes a replica.
    group.servers[0].start()
    wait_for(lambda: group.role(0) == "slave", what="the old master is a replica")
    assert group.masters() == [new]
    assert server.switches() == 1


class Writer(threading.Thread):
    """A worker on a client's host: RPUSHes ``name:seq`` through :func:`master_client` as fast
    as it can, remembering when each attempt started, which were acknowledged, and when the
    master file first refused (it was emptied)."""

    def __init__(self, master_file: Path, name: str) -> None:
        super().__init__(daemon=True)
        self.name = name
        self.client = master_client(master_file, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.started_at: dict[int, float] = {}
        self.acked: list[int] = []
        self.first_refused: float | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        seq = 0
        while not self.stopping.is_set():
            seq += 1
            self.started_at[seq] = time.time()
            try:
                self.client.rpush("writes", f"{self.name}:{seq}")
                self.acked.append(seq)
            except NoMaster:
                if self.first_refused is None:
                    self.first_refused = self.started_at[seq]
                self.stopping.wait(0.002)
            except (redis.RedisError, OSError):
                self.stopping.wait(0.002)

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)
        self.client.close()

    def acked_after(self, count: int) -> bool:
        return len(self.acked) > count


def _items(group: RedisGroup, i: int) -> list[str]:
    with group.client(i) as r:
        return [x.decode() for x in r.lrange("writes", 0, -1)]


def test_paused_master_gets_no_write_after_its_clients_invalidated(
    tmp_path: Path, group: RedisGroup, procs: list[ClientRole | ServerRole]
) -> None:
    clients = [failover_client(tmp_path, cid) for cid in ("a", "b")]
    procs += clients
    server = failover_server(tmp_path, group, clients, "s1")
    procs.append(server)
    old = group.addresses[0]
    wait_for(lambda: all(c.master() == old for c in clients), timeout=20, what="files name m")
    writers = [Writer(c.master_file, c.id) for c in clients]
    for w in writers:
        w.start()
    try:
        wait_for(lambda: all(w.acked_after(50) for w in writers), what="writes to the master")
        group.servers[0].pause()  # SIGSTOP: writes already sent wait in its socket buffer
        wait_for(lambda: _settled(group, clients), timeout=20, what="a new master everywhere")
        counts = [len(w.acked) for w in writers]
        wait_for(
            lambda: all(w.acked_after(n + 50) for w, n in zip(writers, counts, strict=True)),
            what="writes to the new master",
        )
    finally:
        for w in writers:
            w.stop()
    # Nothing may demote the old master now: its data is what reached it.
    server.proc.stop()
    group.servers[0].resume()
    on_old = _items(group, 0)
    assert on_old, "the old master should hold the writes made before the pause"
    for c, w in zip(clients, writers, strict=True):
        answered = _invalidated_at(c)
        late = [
            item
            for item in on_old
            if item.startswith(f"{w.name}:") and w.started_at[int(item.split(":")[1])] >= answered
        ]
        assert late == [], f"writes of {w.name} reached the old master after invalidation"
        assert max(w.started_at.values()) > answered  # it did keep writing after


def _invalidated_at(client: ClientRole) -> float:
    """When ``client`` answered ``invalidated`` (wall clock; its log line's time, which has
    millisecond precision, rounded up)."""
    line = next(x for x in client.proc.lines() if "invalidate -> invalidated" in x)
    stamp = line.split()[0].removeprefix("ts=").removesuffix("Z")
    when = datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.UTC)
    return when.timestamp() + 0.001


def test_one_client_missing_or_misconfigured_holds_the_switch_back(
    tmp_path: Path, group: RedisGroup, procs: list[ClientRole | ServerRole]
) -> None:
    a = failover_client(tmp_path, "a")
    b = failover_client(tmp_path, "b")
    c = failover_client(tmp_path, "c", answer_as="x")  # the host runs id x, the server wants c
    procs += [a, b, c]
    server = failover_server(tmp_path, group, [a, b, c], "s1")
    procs.append(server)
    wait_for(lambda: a.master() == group.addresses[0], timeout=20, what="a's file names m")
    b.proc.kill()  # b is unreachable from now on
    group.servers[0].kill()
    line = wait_for(lambda: server.said("switch held back"), timeout=20)
    assert "b: no answer" in line and "not reached" in line
    assert "answered as client 'x'" in line or "this is client 'x'" in line
    wait_for(lambda: "baton_failover_held_back 1.0" in server.metrics(), what="the metric")
    res = subprocess.run(
        [
            baton_exe(), "redis-failover", "status", "--redis-servers", group.spec,
            "--client-ids", ",".join(x.spec for x in (a, b, c)),
            "--server", f"http://127.0.0.1:{server.port}",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "ALERT: switch held back" in res.stdout
    # Nothing switched: no replica was promoted, a's file still names the dead master.
    assert group.masters() == []
    assert a.master() == group.addresses[0]
    assert server.switches() == 0


def test_two_servers_racing_end_with_one_master(
    tmp_path: Path, group: RedisGroup, procs: list[ClientRole | ServerRole]
) -> None:
    clients = [failover_client(tmp_path, cid) for cid in ("a", "b")]
    procs += clients
    servers = [failover_server(tmp_path, group, clients, sid) for sid in ("s1", "s2")]
    procs += servers
    old = group.addresses[0]
    wait_for(lambda: all(c.master() == old for c in clients), timeout=20, what="files name m")
    group.servers[0].kill()

    def agreed() -> bool:
        if not _settled(group, clients):
            return False
        views = [s.status() for s in servers]
        master = str(group.masters()[0])
        return all(v is not None and v["master"] == master for v in views)

    wait_for(agreed, timeout=30, what="both servers and every client on one master")
    master = group.masters()[0]
    replicas = [i for i, a in enumerate(group.addresses) if a not in (master, old)]
    wait_for(lambda: all(group.role(i) == "slave" for i in replicas), what="replicas follow")
    assert sum(s.switches() for s in servers) >= 1


def test_planned_switch_loses_no_acknowledged_write(
    tmp_path: Path, group: RedisGroup, procs: list[ClientRole | ServerRole]
) -> None:
    clients = [failover_client(tmp_path, cid) for cid in ("a", "b")]
    procs += clients
    server = failover_server(tmp_path, group, clients, "s1")  # a running server adopts it
    procs.append(server)
    old, new = group.addresses[0], group.addresses[2]
    wait_for(lambda: all(c.master() == old for c in clients), timeout=20, what="files name m")
    counters = [IncrWorker(c.master_file) for c in clients]
    for w in counters:
        w.start()
    try:
        wait_for(lambda: all(w.acked > 100 for w in counters), what="writes to the master")
        res = subprocess.run(
            [
                baton_exe(), "redis-failover", "switch", str(new), "--redis-servers",
                group.spec, "--client-ids", ",".join(c.spec for c in clients),
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert f"to {new}" in res.stdout
        before = [w.acked for w in counters]
        wait_for(
            lambda: all(w.acked > n + 100 for w, n in zip(counters, before, strict=True)),
            what="writes to the new master",
        )
    finally:
        for w in counters:
            w.stop()
    assert all(c.master() == new for c in clients)
    # Every acknowledged INCR is there; beyond them, at most those that got no answer.
    with group.client(2) as r:
        have = int(r.get("acked") or 0)
    acked = sum(w.acked for w in counters)
    assert acked <= have <= acked + sum(w.unsure for w in counters)
    # The old master follows the new one; the running server adopted the switch.
    wait_for(lambda: group.role(0) == "slave", what="the old master is a replica")
    wait_for(lambda: (server.status() or {}).get("master") == str(new), what="server adopted")
    assert group.masters() == [new]


def test_bad_config_is_one_line_and_switches_nothing(tmp_path: Path, group: RedisGroup) -> None:
    clients = "a@127.0.0.1:1,b@127.0.0.1:2"
    cases = [
        (["server", "--redis-servers", "", "--client-ids", clients], "no Redis servers given"),
        (
            ["server", "--redis-servers", "127.0.0.1:1,127.0.0.1:2", "--client-ids", clients],
            "none of the Redis servers answers",
        ),
        (["server", "--redis-servers", group.spec, "--client-ids", "a,b"], "bad client 'a'"),
        (
            ["client", "--client-id", "no such id!", "--master-file", str(tmp_path / "m"),
             "--listen", "127.0.0.1:1"],
            "bad client id",
        ),
        (
            ["client", "--client-id", "a", "--master-file", str(tmp_path / "nope" / "m"),
             "--listen", "127.0.0.1:1"],
            "does not exist",
        ),
        (
            ["switch", "127.0.0.1:1", "--redis-servers", group.spec, "--client-ids", clients],
            "is not one of the Redis servers",
        ),
        (
            ["switch", str(group.addresses[1]), "--redis-servers", group.spec, "--client-ids",
             clients],
            "switch held back",
        ),
    ]  # fmt: skip
    for args, expected in cases:
        res = subprocess.run(
            [baton_exe(), "redis-failover", *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        lines = res.stderr.strip().splitlines()
        assert res.returncode != 0, args
        assert len(lines) == 1 and lines[0].startswith("baton: error:"), (args, res.stderr)
        assert expected in lines[0], (args, lines[0])
    assert group.masters() == [group.addresses[0]]
    assert all(group.role(i) == "slave" for i in (1, 2))


def test_server_killed_and_client_restarted_mid_round_end_with_one_master(
    tmp_path: Path, group: RedisGroup, procs: list[ClientRole | ServerRole]
) -> None:
    a, b = (failover_client(tmp_path, cid) for cid in ("a", "b"))
    procs += [a, b]
    s1 = failover_server(tmp_path, group, [a, b], "s1")
    procs.append(s1)
    old = group.addresses[0]
    wait_for(lambda: a.master() == old and b.master() == old, timeout=20, what="files name m")
    # The round stops between invalidate and promote: no replica answers.
    group.servers[1].pause()
    group.servers[2].pause()
    group.servers[0].kill()
    wait_for(lambda: s1.said("at promote: no replica answers"), timeout=20, what="held back")
    assert a.master() is None and b.master() is None  # both invalidated
    s1.proc.kill()
    b.proc.stop()
    b2 = failover_client(tmp_path, "b", port=b.port, run=2)  # remembers its round
    procs.append(b2)
    stuck = b2.state()
    assert stuck is not None and stuck["invalidated_in"] is not None
    group.servers[1].resume()
    group.servers[2].resume()
    s2 = failover_server(tmp_path, group, [a, b2], "s2")
    procs.append(s2)
    wait_for(lambda: _settled(group, [a, b2]), timeout=30, what="one master everywhere")
    wait_for(lambda: s2.switches() == 1, what="s2's switch logged")
    after = b2.state()
    assert after is not None and after["invalidated_in"] is None
    assert after["highest"] > stuck["invalidated_in"]


def test_master_back_with_its_data_after_a_round_that_promoted_nobody(
    tmp_path: Path, group: RedisGroup, procs: list[ClientRole | ServerRole]
) -> None:
    """Found by the fault campaign: the master and every replica down at once, so the round
    invalidates every client and then finds no replica to promote; the master comes back with
    its data (and so its old round's token). The server kept adopting that master, the clients
    kept answering that its round is older than the one they invalidated in, and their files
    stayed empty for good. A round above theirs now names the master that answers."""
    a, b = (failover_client(tmp_path, cid) for cid in ("a", "b"))
    procs += [a, b]
    server = failover_server(tmp_path, group, [a, b], "s1")
    procs.append(server)
    old = group.addresses[0]
    wait_for(lambda: a.master() == old and b.master() == old, timeout=20, what="files name m")
    # Paused, not killed: a paused server keeps its data, as one restarted from disk does.
    for s in group.servers:
        s.pause()
    wait_for(lambda: server.said("at promote: no replica answers"), timeout=20, what="held back")
    assert a.master() is None and b.master() is None  # both invalidated
    for s in group.servers:
        s.resume()
    wait_for(lambda: _settled(group, [a, b]), timeout=30, what="one master everywhere")
    assert a.master() == old  # the only master there is, with everything it had
    assert server.said("whose server went quiet: taking it over")


def test_a_replica_back_empty_is_never_promoted_over_its_masters_data(
    tmp_path: Path, procs: list[ClientRole | ServerRole]
) -> None:
    """Found by the fault campaign (seed 1, run M6, defect 17): a replica restarted without its
    data and the master lost before it could sync; the server promoted the empty replica and
    the store lost everything (every lease, record and placed object). The switch is now held
    back, with a line naming the empty server, until the master returns with its data."""
    with RedisGroup(tmp_path / "redis", 2) as group:
        with group.client(0) as r:
            r.mset({f"k{i}": i for i in range(10)})
        a, b = (failover_client(tmp_path, cid) for cid in ("a", "b"))
        procs += [a, b]
        server = failover_server(tmp_path, group, [a, b], "s1")
        procs.append(server)
        old, replica = group.addresses
        wait_for(lambda: a.master() == old and b.master() == old, timeout=20, what="files name m")
        group.servers[1].restart()  # back empty...
        group.servers[0].pause()  # ...and the master stops before it can sync (keeping its data)
        wait_for(
            lambda: server.said(f"no replica holds the master's data ({replica}: empty"),
            timeout=30,
            what="the switch held back",
        )
        assert replica not in (a.master(), b.master())
        group.servers[0].resume()
        wait_for(lambda: _settled(group, [a, b]), timeout=30, what="one master everywhere")
        assert a.master() == old  # named again by a later round; the replica never was
        assert server.said(f"new={replica}") is None

        def replica_keys() -> int:
            with group.client(1) as r:
                return int(r.dbsize())

        wait_for(lambda: replica_keys() >= 10, timeout=30, what="the replica fed by the master")


def test_plain_masters_at_the_first_start_end_with_one_master_and_its_replicas(
    tmp_path: Path, procs: list[ClientRole | ServerRole]
) -> None:
    """docs/failover.md, setting up: every Redis server started as a plain master (no
    replication set up by hand), the clients' files empty. The server takes the one holding
    the most (here the only one with data), the clients confirm it, the others follow it."""
    servers = [RedisServer(tmp_path / f"r{i}") for i in range(3)]
    for s in servers:
        s.start()
    try:
        with redis.Redis(port=servers[1].port) as r:
            r.set("data", "here")
        group = RedisGroup.__new__(RedisGroup)
        group.servers = servers
        clients = [failover_client(tmp_path, cid) for cid in ("a", "b")]
        procs += clients
        procs.append(failover_server(tmp_path, group, clients, "s1"))
        wait_for(lambda: _settled(group, clients), timeout=30, what="one master everywhere")
        assert group.masters() == [group.addresses[1]]
        wait_for(lambda: all(group.role(i) == "slave" for i in (0, 2)), what="the replicas")
        assert all((c.state() or {}).get("confirmed") for c in clients)
    finally:
        for s in servers:
            s.stop()
