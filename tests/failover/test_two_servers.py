"""Two configuration servers under repeated master kills, and a round whose server dies in the
middle (issue 27), with real Redis servers and real ``baton redis-failover`` processes."""

from __future__ import annotations

import signal
from pathlib import Path

from baton.local.processes import Proc
from baton.store.master_file import Address
from baton.testing import wait_for
from baton.testing.failover import (
    FAST,
    ClientRole,
    IncrWorker,
    RedisGroup,
    ServerRole,
    baton_exe,
    failover_client,
    failover_server,
)


def _one_master_in_every_file(clients: list[ClientRole], old: Address) -> bool:
    named = {c.master() for c in clients}
    return len(named) == 1 and None not in named and old not in named


def test_twenty_kills_with_two_servers_each_end_with_the_old_master_a_replica(
    tmp_path: Path, procs: list[ClientRole | ServerRole]
) -> None:
    """The loop of issue 27: SIGKILL the master, wait until every file moved, start it again
    on its port with its data, and it must become a replica. Before the fix, a server that
    had found no master answering gave the returning old master a token above every round;
    the other server adopted it: it stayed a second master, and the next kill got no
    failover (seen at the 18th kill with these timings)."""
    with RedisGroup(tmp_path / "redis", 3, persist=True) as group:
        clients = [failover_client(tmp_path, cid) for cid in "abcde"]
        procs += clients
        servers = [
            failover_server(tmp_path, group, clients, "s1", via_config=True),
            failover_server(tmp_path, group, clients, "s2"),
        ]
        procs += servers
        wait_for(
            lambda: all(c.master() == group.addresses[0] for c in clients),
            timeout=20,
            what="every file names the first master",
        )
        workers = [IncrWorker(c.master_file, pace=0.001) for c in clients[:2]]
        for w in workers:
            w.start()
        try:
            for kill in range(20):
                old = clients[0].master()
                assert old is not None, f"kill {kill}: a file is empty before the kill"
                i = group.addresses.index(old)
                group.servers[i].kill()
                wait_for(
                    lambda old=old: _one_master_in_every_file(clients, old),  # type: ignore[misc]
                    timeout=20,
                    what=f"kill {kill}: every file on one new master",
                )
                group.servers[i].start()  # with its data (append-only file)
                wait_for(
                    lambda i=i: group.role(i) == "slave",  # type: ignore[misc]
                    timeout=20,
                    what=f"kill {kill}: the old master {old} made a replica",
                )
                assert len(group.masters()) == 1, f"kill {kill}: {group.masters()}"
        finally:
            for w in workers:
                w.stop()
        assert all(w.acked > 0 for w in workers)
        master = str(group.masters()[0])
        wait_for(
            lambda: all((s.status() or {}).get("master") == master for s in servers),
            timeout=20,
            what="both servers hold the master every file names",
        )


def test_a_round_whose_server_dies_midway_is_taken_over(
    tmp_path: Path, procs: list[ClientRole | ServerRole]
) -> None:
    """A planned switch is killed (SIGKILL) while it waits for its new master to catch up:
    every client has emptied its file and the old master has its writes paused. The running
    server takes the round over once the clients say it went quiet: every file names the
    master again, writes are accepted again, and nothing waits 20 reconfigure intervals."""
    with RedisGroup(tmp_path / "redis", 3) as group:
        clients = [failover_client(tmp_path, cid) for cid in "abc"]
        procs += clients
        server = failover_server(tmp_path, group, clients, "s1")
        procs.append(server)
        old, target = group.addresses[0], group.addresses[2]
        wait_for(lambda: all(c.master() == old for c in clients), timeout=20, what="files name m")
        config = tmp_path / "switch.toml"
        keys = [k.removeprefix("--").replace("-", "_") for k in FAST[::2]]
        lines = [f"{k} = {v}\n" for k, v in zip(keys, FAST[1::2], strict=True)]
        config.write_text("[redis_failover]\n" + "".join(lines))
        # The new master can never catch up: its replication link is down for good (it cannot
        # authenticate) while the old master's offset moves on.
        with group.client(2) as r:
            r.config_set("masterauth", "wrong")
            r.client_kill_filter(_type="master")
        with group.client(0) as r:
            r.set("moved-on", 1)
        switch = Proc(
            "switch",
            [
                baton_exe(), "redis-failover", "switch", str(target), "--config", str(config),
                "--redis-servers", group.spec, "--client-ids", ",".join(c.spec for c in clients),
                "--timeout", "120",
            ],
            tmp_path / "switch.out",
        )  # fmt: skip
        try:
            wait_for(
                lambda: all(
                    (st := c.state()) is not None and st.get("invalidated_in") for c in clients
                ),
                timeout=30,
                what="every client invalidated in the switch's round",
            )
            held = [c.state() for c in clients]
            switch.popen.send_signal(signal.SIGKILL)
            switch.popen.wait()
        finally:
            switch.stop()
        assert all(c.master() is None for c in clients)
        assert all(st is not None and st["quiet"] < 5 for st in held)  # the switch held them
        wait_for(
            lambda: all(c.master() == old for c in clients),
            timeout=30,
            what="the running server took the round over",
        )
        assert server.said("whose server went quiet: taking it over")
        with group.client(0, timeout=2) as r:
            assert r.incr("after-takeover") == 1  # writes are not paused any more
        with group.client(2) as r:
            r.config_set("masterauth", "")
        wait_for(lambda: group.link_up(2), timeout=20, what="the cut-off replica follows again")
        assert group.masters() == [old]
