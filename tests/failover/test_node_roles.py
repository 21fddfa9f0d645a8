"""The roles inside a node agent (``[redis_failover]`` in its config)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from baton.errors import ConfigError
from baton.local.ports import free_port
from baton.node.agent import NodeAgent
from baton.node.config import load
from baton.store.master_file import read_master
from baton.testing import await_for
from baton.testing.failover import RedisGroup
from baton.testing.servers import RedisServer
from tests.node.test_api import sample
from tests.node.test_start_waits import node_agent

TOKEN = "cluster-token-0123456789"


def _config(tmp_path: Path, table: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(
        f'node_id = "n1"\nstore = "sqlite://{tmp_path}/store.db"\ntoken = "{TOKEN}"\n'
        f'data_dir = "{tmp_path}"\nlisten = "127.0.0.1:{free_port()}"\n'
        f"[timings]\nttl = 2\n{table}"
    )
    return path


async def test_a_node_runs_both_roles_and_follows_a_switch(tmp_path: Path) -> None:
    with RedisGroup(tmp_path / "redis", 2) as group:
        port = free_port()
        master_file = tmp_path / "redis-master"
        table = (
            f'[redis_failover]\nclient_id = "n1"\nmaster_file = "{master_file}"\n'
            f'listen = "127.0.0.1:{port}"\n'
            f"[redis_failover.server]\n"
            f'redis_servers = ["{group.addresses[0]}", "{group.addresses[1]}"]\n'
            f'clients = {{ n1 = "127.0.0.1:{port}" }}\nserver_id = "n1"\n'
            "check_interval = 0.1\nretries = 2\nrequest_timeout = 0.3\n"
            "reconfigure_interval = 0.3\n"
        )
        agent = NodeAgent(load(_config(tmp_path, table), env={}))
        await agent.start()
        try:
            await await_for(lambda: read_master(master_file) == group.addresses[0], timeout=20)
            group.servers[0].kill()
            await await_for(lambda: read_master(master_file) == group.addresses[1], timeout=20)
            assert group.masters() == [group.addresses[1]]

            # The server role's series are on the node's /metrics, with the node's label (the
            # round and the new master's check are counted after the master file changed).
            def switched() -> bool:
                text = agent.metrics.render().decode()
                labels = {"node": "n1", "outcome": "switched"}
                up = sample(text, "baton_failover_master_up", node="n1") == 1.0
                return up and sample(text, "baton_failover_rounds_total", **labels) == 1.0

            await await_for(switched, timeout=10)
        finally:
            await agent.stop()


def test_a_bad_table_is_one_line_naming_it(tmp_path: Path) -> None:
    for table, expected in (
        ('[redis_failover]\nclient_id = "n1"\ncolour = "red"\n', "unknown client setting"),
        ("[redis_failover]\n[redis_failover.server]\nclients = {}\n", "no Redis servers"),
        ("[redis_failover]\n", "is empty"),
    ):
        with pytest.raises(ConfigError) as info:
            load(_config(tmp_path, table), env={})
        msg = str(info.value)
        assert "\n" not in msg and "redis_failover" in msg and expected in msg, msg


@pytest.mark.parametrize("during", ["empty", "dead master"])
async def test_a_node_started_while_the_master_file_is_empty_waits_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, during: str
) -> None:
    """Found by the fault campaign: an agent restarted during a store switch exited at once
    ("master file ... is empty") and stayed down. It now waits for the file to name a master.
    The same when the file still names the old master, already gone (the switch has not
    reached this host: the campaign's seed 1 lost an agent that way, "unreachable during
    connect")."""
    with RedisServer(tmp_path / "redis") as server:
        master_file = tmp_path / "redis-master"
        # A switch under way: the file emptied, or still naming a master that is gone.
        master_file.write_text("" if during == "empty" else f"127.0.0.1:{free_port()}\n")
        store = f"redis+masterfile://{master_file}?db=0"
        agent = node_agent(tmp_path / "node.toml", store, tmp_path, ttl=2)
        with caplog.at_level(logging.WARNING, logger="baton"):
            starting = asyncio.create_task(agent.start())
            await await_for(
                lambda: any(r.getMessage() == "waiting for the store" for r in caplog.records),
                timeout=20,
            )
            assert not starting.done()
            master_file.write_text(f"127.0.0.1:{server.port}\n")  # the switch ends
            await asyncio.wait_for(starting, 30)
        try:
            assert agent.membership.is_leader
        finally:
            await agent.stop()
