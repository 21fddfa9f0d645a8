"""The worker library and the store over a master file, against real Redis servers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from baton.errors import ConfigError, NoMaster, StoreUnavailable
from baton.failover import async_master_client, master_client
from baton.store import open_store
from baton.store.master_file import Address, read_master, write_master
from baton.testing import RedisServer, await_for
from baton.testing.failover import RedisGroup


def test_master_client_follows_the_file(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "a") as a, RedisServer(tmp_path / "b") as b:
        path = tmp_path / "redis-master"
        client = master_client(path, socket_timeout=2)
        with pytest.raises(NoMaster, match="redis-master"):
            client.set("k", "before any master")  # no file yet
        write_master(path, Address("127.0.0.1", a.port))
        client.set("k", "1")
        write_master(path, Address("127.0.0.1", b.port))
        client.set("k", "2")
        pipe = client.pipeline()
        pipe.set("p", "x")
        write_master(path, Address("127.0.0.1", a.port))
        with pytest.raises(NoMaster, match="changed while this pipeline"):
            pipe.execute()
        write_master(path, None)
        with pytest.raises(NoMaster):
            client.set("k", "3")
        with redis.Redis(port=a.port) as ra, redis.Redis(port=b.port) as rb:
            assert ra.get("k") == b"1" and rb.get("k") == b"2"
            assert ra.get("p") is None and rb.get("p") is None

        async def async_side() -> bytes | None:
            aclient = async_master_client(path)
            with pytest.raises(NoMaster):
                await aclient.get("k")
            write_master(path, Address("127.0.0.1", b.port))
            value = await aclient.get("k")
            assert isinstance(value, bytes)
            await aclient.aclose()
            return value

        assert asyncio.run(async_side()) == b"2"
        client.close()


def test_bad_master_file_store_urls_are_refused(tmp_path: Path) -> None:
    for url in (
        "redis+masterfile:relative/file",
        f"redis+masterfile://{tmp_path}/missing-dir/file",
        f"redis+masterfile://{tmp_path}",  # a directory
        f"redis+masterfile://{tmp_path}/f?color=red",
    ):
        with pytest.raises(ConfigError):
            open_store(url)


def test_store_follows_a_switch_and_epochs_keep_growing(tmp_path: Path) -> None:
    """The store keeps working across a switch to a replica, refuses while the file is empty
    (StoreUnavailable, so leaders stand down), and an epoch granted after the switch is above
    every one granted before."""
    with RedisGroup(tmp_path / "redis", 2) as group:
        path = tmp_path / "redis-master"
        write_master(path, group.addresses[0])
        url = f"redis+masterfile://{path}?namespace=t"
        assert "secret" not in open_store(f"{url}&password=secret").url

        async def scenario() -> tuple[int, int]:
            async with open_store(url) as store:
                first = await store.acquire("controller", "n1", 1.0)
                assert first is not None
                wait_replicated = group.client(0)
                assert wait_replicated.wait(1, 2000) == 1  # the grant reached the replica
                wait_replicated.close()
                write_master(path, None)  # the client invalidated
                with pytest.raises(StoreUnavailable):
                    await store.get_lease("controller")
                group.servers[0].kill()
                with group.client(1) as r:
                    r.replicaof("no", "one")
                write_master(path, group.addresses[1])
                second = await await_for(lambda: store.acquire("controller", "n2", 1.0), timeout=10)
                return first.epoch, second.epoch

        first, second = asyncio.run(scenario())
        assert second > first


def test_a_client_starting_with_a_replica_in_its_file_empties_it(tmp_path: Path) -> None:
    """Seed 002: on start a client checks that its file still names a master."""
    from baton.failover.client import ConfigurationClient
    from baton.failover.config import client_config

    with RedisGroup(tmp_path / "redis", 2) as group:
        path = tmp_path / "redis-master"
        # A server that does not answer the check in time is kept (it cannot be told a
        # replica): give a loaded test machine time, this test is about the answer.
        cfg = client_config(
            {"client_id": "a", "master_file": str(path), "listen": "127.0.0.1:1"}
            | {"check_timeout": 10}
        )
        for named, kept in ((group.addresses[0], True), (group.addresses[1], False)):
            write_master(path, named)
            client = ConfigurationClient(cfg)
            client.load()
            asyncio.run(client.startup_check())
            assert (read_master(path) == named) is kept


def test_baton_elect_started_while_the_master_file_is_empty_waits_for_it(tmp_path: Path) -> None:
    """Like an agent (found by the fault campaign): a candidate started during a store switch
    waits for its master file instead of exiting, then leads and runs its command."""
    with RedisServer(tmp_path / "redis") as server:
        master_file = tmp_path / "redis-master"
        master_file.write_text("")
        done = tmp_path / "done"
        proc = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("baton")), "elect", "job",
                "--store", f"redis+masterfile://{master_file}", "--ttl", "2", "--",
                sys.executable, "-c", f"open({str(done)!r}, 'w').write('led')",
            ],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()  # it says why it waits, and goes on waiting
            assert "waiting for the store" in line and "is empty" in line, line
            assert proc.poll() is None
            master_file.write_text(f"127.0.0.1:{server.port}\n")  # the switch ends
            assert proc.wait(30) == 0, proc.stderr.read()
            assert done.read_text() == "led"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
