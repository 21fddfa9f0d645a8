"""A node agent started while its store is silent waits for it, however the silence falls.

Found by the fault campaign (seed 1, `--per-round 12`, round 10): an agent restarted by the
nemesis, just as its host was cut off from the store, connected and then could not take its
membership lease; after 3 ttl ``baton node`` exited with ``internal error: TimeoutError`` and
the cluster never had five agents again. Both phases of a start now wait the outage out
(up to :data:`baton.store.START_WAIT`), like a client of etcd or ZooKeeper does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from baton.errors import LeaseError
from baton.keys import node_record
from baton.local.ports import free_port
from baton.node.agent import NodeAgent
from baton.node.config import load
from baton.store import open_store
from baton.store.redis import SOCKET_TIMEOUT
from baton.testing import await_for
from baton.testing.servers import RedisServer

TOKEN = "cluster-token-0123456789"
TTL = 1.0
#: Well past where a start used to give up: 3 ttl, or the first store call's own timeout.
SILENT = SOCKET_TIMEOUT + 3 * TTL + 1


def node_agent(path: Path, store: str, data_dir: Path, ttl: float = TTL) -> NodeAgent:
    """An agent ``n1`` on ``store``, its config written to ``path`` (a free API port)."""
    path.write_text(
        f'node_id = "n1"\nstore = "{store}"\ntoken = "{TOKEN}"\ndata_dir = "{data_dir}"\n'
        f'listen = "127.0.0.1:{free_port()}"\n[timings]\nttl = {ttl:g}\n'
    )
    return NodeAgent(load(path, env={}))


class _PauseOn(logging.Handler):
    """Pauses ``server`` when the agent logs ``message``: in the same step of the event loop,
    so no store call of the next phase has run yet."""

    def __init__(self, server: RedisServer, message: str) -> None:
        super().__init__()
        self.server = server
        self.message = message
        self.paused_at: float | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.paused_at is None and record.getMessage() == self.message:
            self.server.pause()
            self.paused_at = time.monotonic()


#: Where the store goes silent: before the start; just after the membership election started
#: (no store call of it made yet); just after the lease was taken (the node record unwritten).
PHASES = {
    "connect": None,
    "membership": ("baton.node", "waiting for membership lease"),
    "record": ("baton.election", "leader"),  # the election logger keeps its old name
}


@pytest.mark.parametrize("phase", sorted(PHASES))
async def test_a_node_started_while_its_store_is_silent_waits_for_it(
    tmp_path: Path, phase: str
) -> None:
    with RedisServer(tmp_path / "redis") as server:
        agent = node_agent(tmp_path / "node.toml", f"redis://127.0.0.1:{server.port}/0", tmp_path)
        logger_name, message = PHASES[phase] or ("baton.node", "")
        pauser = _PauseOn(server, message)
        node_log = logging.getLogger(logger_name)
        level = node_log.level
        node_log.setLevel(logging.INFO)  # the line the pause waits for is at INFO
        if PHASES[phase] is None:
            server.pause()
            pauser.paused_at = time.monotonic()
        else:
            node_log.addHandler(pauser)
        try:
            starting = asyncio.create_task(agent.start())
            await await_for(
                lambda: (
                    starting.done()
                    or (
                        pauser.paused_at is not None
                        and time.monotonic() - pauser.paused_at > SILENT
                    )
                ),
                timeout=60,
            )
            assert not starting.done(), starting.exception()
            server.resume()
            await asyncio.wait_for(starting, 30)
        finally:
            server.resume()
            node_log.removeHandler(pauser)
            node_log.setLevel(level)
        try:
            assert agent.membership.is_leader
        finally:
            await agent.stop()


async def test_a_second_node_with_the_same_id_is_one_line_after_3_ttl(tmp_path: Path) -> None:
    """The store answers, but the lease stays another process's: that is no outage to wait
    out, and the start ends in one line that says what to look at."""
    with RedisServer(tmp_path / "redis") as server:
        agents = []
        for i in range(2):
            store = f"redis://127.0.0.1:{server.port}/0"
            agents.append(node_agent(tmp_path / f"node{i}.toml", store, tmp_path / str(i)))
        await agents[0].start()
        try:
            with pytest.raises(LeaseError) as info:
                await asyncio.wait_for(agents[1].start(), 30)
            assert "another node running as 'n1'" in str(info.value)
            await agents[1].stop()
            assert agents[0].membership.is_leader
        finally:
            await agents[0].stop()


class _EmptyOn(logging.Handler):
    """Empties the master file the moment the membership election takes a new lease, and
    names the master again ``gap`` seconds later: a store switch reaching the host in between,
    so the node record's write right after the lease is refused."""

    def __init__(self, master_file: Path, master: str, gap: float) -> None:
        super().__init__()
        self.master_file, self.master, self.gap = master_file, master, gap
        self.fired = False
        self.restored = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.fired or record.getMessage() != "leader":
            return
        if getattr(record, "election", "") != "members/n1":
            return
        self.fired = True
        self.master_file.write_text("")
        asyncio.get_running_loop().call_later(self.gap, self._restore)

    def _restore(self) -> None:
        self.master_file.write_text(self.master)
        self.restored = True


async def test_a_record_refused_after_membership_returns_is_published_again(
    tmp_path: Path,
) -> None:
    """Fault campaign, run M5 (defect 16): an agent took its membership lease again after the
    store lost its data, its node record's write was refused once (a store switch under way),
    and the lease then held: no record for the rest of the term, so the controller saw no node
    there and left the cascade's groups one member short for good."""
    with RedisServer(tmp_path / "redis") as server:
        master = f"127.0.0.1:{server.port}\n"
        master_file = tmp_path / "redis-master"
        master_file.write_text(master)
        url = f"redis+masterfile://{master_file}?db=0"
        agent = node_agent(tmp_path / "node.toml", url, tmp_path)
        election_log = logging.getLogger("baton.election")
        level = election_log.level
        election_log.setLevel(logging.INFO)  # the "leader" line is at INFO
        handler = _EmptyOn(master_file, master, gap=0.3)
        await agent.start()
        try:
            async with open_store(f"redis://127.0.0.1:{server.port}/0") as store:

                async def record() -> bool:
                    return await store.get(node_record("n1")) is not None

                assert await record()
                # The store loses its data (its master replaced by an empty one): the lease and
                # the record are gone, and the lease is taken again...
                election_log.addHandler(handler)
                server.restart()
                await await_for(lambda: handler.restored, timeout=30)  # ...its record refused
                await await_for(record, timeout=10, what="the record published again")
                assert agent.membership.is_leader
        finally:
            election_log.removeHandler(handler)
            election_log.setLevel(level)
            await agent.stop()
