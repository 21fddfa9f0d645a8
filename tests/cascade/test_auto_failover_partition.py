"""Automatic failover through real processes and real partitions (issue 30): three node agents
(``baton node``) on loopback addresses of their own, a Redis store, nftables rules. The root s1
is pinned to n0 and the branch s2 to n1 (``cascade-worker`` objects, one replica each, a
low-latency worker on local Spark); n2 starts first and leads the ``auto-failover`` election.
Automatic failover is on, with sync 1, and a writer commits at the root through
:class:`~baton.cascade.writer.RootWriter`.

1. The actor's host cut off from the root's host: pass after pass, nothing happens (its members
   still reach the root, and the root still holds its membership).
2. The root's host frozen (SIGSTOP: to the others, as gone as a host cut off from the network;
   the agents here share 127.0.0.1 for the store, so a rule cannot cut one of them off from it
   alone, which the fault campaign's network namespaces do): its leases lapse, the members
   agree, and the actor promotes s2. No acknowledged commit is lost, and none is acknowledged
   at s1 after the failover. Thawed, n0 finds its leases gone and serves nothing.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from baton.cascade import beat
from baton.cascade.beat import ServiceState
from baton.cascade.db import open_node_db
from baton.cascade.writer import RootWriter
from baton.errors import BatonError
from baton.keys import AUTO_FAILOVER
from baton.local.cluster import LocalCluster
from baton.local.waiting import wait_for
from baton.placement.model import make_object
from baton.placement.records import create_object
from baton.store import open_store
from baton.testing.cascade import root_and_branch
from baton.testing.network import Firewall
from baton.testing.servers import RedisServer
from tests.test_cli import BATON

TTL = 2.0


async def _declare(url: str, loc: dict[str, str]) -> None:
    async with open_store(url) as store:
        for host, name in (("n0", "s1"), ("n1", "s2")):
            spec = {"location": loc[name], "mode": "low-latency", "standby": "cold"}
            obj = make_object("cascade-worker", name, 1, 1, spec=spec, selector={"host": host})
            await create_object(store, obj)


async def _holder(url: str, name: str) -> str | None:
    async with open_store(url) as store:
        lease = await store.get_lease(name)
        return None if lease is None else lease.holder


def _decisions(c: LocalCluster, node: str, action: str) -> float:
    text = c.node(node).get("/metrics").text
    pattern = (
        r'baton_cascade_auto_failover_decisions_total\{[^}]*action="' + action + r'"[^}]*\} (\S+)'
    )
    found = re.search(pattern, text)
    return float(found[1]) if found else 0.0


def _s1_stopped(location: str) -> bool:
    with open_node_db(location, readonly=True) as db:
        served = beat.read(db)
    return served is not None and served.state(time.time()) is not ServiceState.RUNNING


def cascade(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BATON, "cascade", *args], capture_output=True, text=True, timeout=60, check=False
    )


class Writer(threading.Thread):
    """Commits a row every 20 ms through a RootWriter in sync mode; records each acknowledged
    one (id, root, when) and counts the rest."""

    def __init__(self, via: list[str]) -> None:
        super().__init__(daemon=True)
        self.via = via
        self.acked: list[tuple[int, str, float]] = []
        self.unconfirmed = 0
        self.halt = threading.Event()

    def run(self) -> None:
        with RootWriter("S", self.via, recheck=0.1, sync_timeout=1.0) as w:
            n = 10_000
            while not self.halt.wait(0.02):
                n += 1
                try:
                    with w.transaction() as cur:
                        cur.execute("INSERT INTO accounts VALUES (?, 0, 'w', 0)", (n,))
                    self.acked.append((n, w.root.node or "?", time.monotonic()))
                except BatonError:
                    self.unconfirmed += 1  # SyncTimeout, or no writable root for a moment


@pytest.mark.long
def test_a_partition_and_a_frozen_root_decide_and_nothing_acknowledged_is_lost(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    loc = root_and_branch(tmp_path)
    store = f"{redis_server.url}?namespace=af{uuid.uuid4().hex[:10]}"
    c = LocalCluster(3, store, tmp_path / "cluster", ttl=TTL, reconcile_interval=0.3,
                     distinct_hosts=True)  # fmt: skip
    for i, node in enumerate(c.nodes.values()):
        node.env |= {"BATON_LABELS": f"host=n{i}", "BATON_SPARK_MASTER": "local[2]"}
    writer = Writer(list(loc.values()))
    with Firewall() as fw:
        try:
            c.node("n2").start()
            wait_for(lambda: asyncio.run(_holder(store, AUTO_FAILOVER)) == "n2", timeout=30)
            c.node("n0").start()
            c.node("n1").start()
            c.wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
            asyncio.run(_declare(store, loc))
            for args in (("auto-failover", "S", "on"), ("sync", "S", "1")):
                assert cascade(*args, "--via", loc["s1"]).returncode == 0
            writer.start()
            wait_for(lambda: any(a[1] == "s1" for a in writer.acked), timeout=240,
                     what="a commit acknowledged by s2")  # fmt: skip

            # 1. The actor cannot reach the root's host: no failover, pass after pass.
            n0, n2 = c.node("n0"), c.node("n2")
            fw.block(n2.host, n0.host, n0.port)
            before = _decisions(c, "n2", "nothing")
            wait_for(lambda: _decisions(c, "n2", "nothing") >= before + 6, timeout=30)
            assert _decisions(c, "n2", "failover") == 0
            acked = len(writer.acked)
            wait_for(lambda: len(writer.acked) > acked + 10, timeout=30)
            assert {a[1] for a in writer.acked} == {"s1"}
            fw.heal()

            # 2. The root's host frozen: the set fails over to s2.
            c.pause("n0")
            cut = time.monotonic()
            wait_for(lambda: _decisions(c, "n2", "failover") >= 1, timeout=60,
                     what="the automatic failover")  # fmt: skip
            failed_over = time.monotonic()
            with open_node_db(loc["s2"], readonly=True) as db:
                assert db.state().role.value == "root"
            # The writer moves to s2 (no branch holds its commits there now: unconfirmed).
            wait_for(lambda: writer.unconfirmed > 0 and time.monotonic() > failed_over + 2,
                     timeout=30)  # fmt: skip
            c.resume("n0")
            # n0 thawed: its leader roles are gone, it serves s1 no more (its beat says so).
            wait_for(lambda: _s1_stopped(loc["s1"]), timeout=30, what="n0 to stop serving s1")
        finally:
            writer.halt.set()
            writer.join(10)
            c.stop()
    # Nothing acknowledged is lost: every acknowledged commit is at the new root.
    with open_node_db(loc["s2"], readonly=True) as db:
        have = {r[0] for r in db.read_rows("accounts")}
    assert {a[0] for a in writer.acked} <= have
    # None was acknowledged at the partitioned root once the set had failed over.
    assert not [a for a in writer.acked if a[1] == "s1" and a[2] > failed_over]
    assert failed_over - cut < TTL + 10
