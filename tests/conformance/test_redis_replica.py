"""Epochs stay monotonic across a Redis failover to a replica that lagged: the promoted replica
never saw the last grant, and only the clock term of the epoch protects the fencing order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis

from baton.store import open_store
from baton.testing import RedisServer, wait_for


def test_failover_to_lagging_replica_keeps_epochs_increasing(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "a") as master, RedisServer(tmp_path / "b") as replica:
        m = redis.Redis(port=master.port)
        m.config_set("repl-diskless-sync-delay", 0)  # replicas sync in ms, not 5 s
        m.close()
        r = redis.Redis(port=replica.port)
        r.replicaof("127.0.0.1", master.port)
        wait_for(lambda: r.info("replication").get("master_link_status") == "up", timeout=20)

        async def grant(url: str, holder: str) -> int:
            async with open_store(url) as store:
                lease = await store.acquire("controller", holder, 30)
                assert lease is not None
                return lease.epoch

        first = asyncio.run(grant(master.url, "n1"))
        # The replica falls behind: it is cut off, the master grants again, then dies.
        r.replicaof("no", "one")
        second = asyncio.run(_reacquire(master.url))
        assert second > first
        master.kill()
        # The promoted replica has at most the first grant, never the second.
        third = asyncio.run(_after_failover(replica.url))
        assert third > second > first
        r.close()


async def _reacquire(url: str) -> int:
    async with open_store(url) as store:
        old = await store.get_lease("controller")
        assert old is not None
        assert await store.release(old)
        new = await store.acquire("controller", "n2", 30)
        assert new is not None
        return new.epoch


async def _after_failover(url: str) -> int:
    async with open_store(url) as store:
        current = await store.get_lease("controller")
        if current is not None:  # the stale first grant, still held on the replica
            assert current.holder == "n1"
            assert await store.release(current)
        lease = await store.acquire("controller", "n3", 30)
        assert lease is not None
        return lease.epoch
