"""``cascade:<node>/<table>`` on a real node process with a Redis store: a subscriber sees the
row changes of a replicated table as the root captures and ticks them, as a PostgreSQL branch
applies them (read from the branch's own queue) and as a leaf applies them (read from its
provider's queue, since a leaf keeps none), read from the node databases (no Spark); a table the
node does not replicate is refused."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from baton.cascade import commands, node_ops
from baton.cascade.apply import apply_batch
from baton.cascade.batches import reduce_events
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.ticker import TickerConfig, tick_once
from baton.errors import ChannelRefused
from baton.local.cluster import LocalCluster
from baton.local.waiting import wait_for
from baton.testing.channels import Subscriber
from baton.testing.servers import PostgresServer, RedisServer
from baton.testing.workload import create_accounts

pytestmark = pytest.mark.cluster


@pytest.fixture
def pg_branch(postgres_server: PostgresServer) -> Iterator[str]:
    with postgres_server.databases("branch") as (url,):
        yield url


def _apply(subscriber: str, provider: str, provider_name: str) -> None:
    """What a worker does for one step, with the library's apply instead of Spark."""
    with open_node_db(provider, readonly=True) as src, open_node_db(subscriber) as db:
        position, last = db.state().position, src.last_tick()
        assert last is not None
        ticks = src.ticks(position, last.tick_id)
        events = list(src.batch_events(position, last.tick_id))
        apply_batch(db, ticks, reduce_events(events), events, 1, provider=provider_name)


def test_cascade_channel_streams_the_root_changes(
    tmp_path: Path, redis_server: RedisServer, pg_branch: str
) -> None:
    loc = f"sqlite://{tmp_path / 's1.db'}"
    branch = pg_branch
    leaf = f"sqlite://{tmp_path / 's3.db'}"
    create_accounts(tmp_path / "s1.db")
    create_accounts(branch)
    create_accounts(tmp_path / "s3.db")
    commands.create_root("s1", loc, "S")
    commands.add_table(loc, "accounts", "s1")
    commands.create_subscriber(Role.BRANCH, "s2", branch, "s1", loc)
    commands.add_table(loc, "accounts", "s2")
    node_ops.copy_table(branch, "accounts")  # the copy without Spark (direct rows)
    # A leaf keeps no queue: its channel reads the batches it applied from its provider.
    commands.create_subscriber(Role.LEAF, "s3", leaf, "s2", branch)
    commands.add_table(loc, "accounts", "s3")
    node_ops.copy_table(leaf, "accounts")
    settings = {"settings": {"cascade": {"nodes": {"s1": loc, "s2": branch, "s3": leaf}}}}
    store = f"{redis_server.url}?namespace=t{uuid.uuid4().hex[:10]}"
    with LocalCluster(
        1, store, tmp_path / "c", ttl=2, env={"BATON_CHANNELS": json.dumps(settings)}
    ) as c:
        wait_for(lambda: c.states() == {"n0": "live"}, timeout=30)
        url = c.node("n0").url
        with (
            Subscriber([url], c.token, "cascade:s1/accounts") as sub,
            Subscriber([url], c.token, "cascade:s2/accounts") as at_branch,
            Subscriber([url], c.token, "cascade:s3/accounts") as at_leaf,
        ):
            wait_for(lambda: at_leaf.kinds("subscribed"), what="the leaf's initial data")
            assert at_leaf.kinds("subscribed")[0].data["role"] == "leaf"
            wait_for(lambda: at_branch.kinds("subscribed"), what="the branch's initial data")
            assert at_branch.kinds("subscribed")[0].data["role"] == "branch"
            first = wait_for(lambda: sub.kinds("subscribed"), what="the initial data")[0]
            assert first.data["node"] == "s1" and first.data["role"] == "root"
            assert first.data["key"] == ["id"] and "balance" in first.data["columns"]
            # Changes at the root: captured by its triggers, then a tick closes the batch.
            conn = sqlite3.connect(tmp_path / "s1.db", isolation_level=None)
            conn.execute("INSERT INTO accounts VALUES (1, 10, 'a', 0), (2, 20, 'b', 0)")
            conn.execute("UPDATE accounts SET balance = 11 WHERE id = 1")
            conn.execute("DELETE FROM accounts WHERE id = 2")
            conn.close()
            with open_node_db(loc) as db:
                cfg = TickerConfig(period=0.01, max_count=1, max_lag=0, idle=0)
                assert tick_once(db, cfg, time.time()) is not None
            pubs = wait_for(sub.pubs, what="the batch's changes")
            changes = [ch for m in pubs for ch in m.data["changes"]]
            assert [(ch["op"], ch["key"]) for ch in changes] == [
                ("I", {"id": 1}), ("I", {"id": 2}), ("U", {"id": 1}), ("D", {"id": 2}),
            ]  # fmt: skip
            assert changes[2]["data"]["balance"] == 11
            assert pubs[0].data["tick"] >= 1
            # Nothing downstream until a node applies the batch (what its worker does, here
            # with the library's apply step instead of Spark): the branch first, then the leaf
            # from the branch's queue.
            assert not at_branch.pubs() and not at_leaf.pubs()
            _apply(branch, loc, "s1")
            applied = wait_for(at_branch.pubs, what="the branch's applied changes")
            ops = [(ch["op"], ch["key"]) for m in applied for ch in m.data["changes"]]
            assert ops == [(ch["op"], ch["key"]) for ch in changes]
            assert not at_leaf.pubs()
            _apply(leaf, branch, "s2")
            applied = wait_for(at_leaf.pubs, what="the leaf's applied changes")
            ops = [(ch["op"], ch["key"]) for m in applied for ch in m.data["changes"]]
            assert ops == [(ch["op"], ch["key"]) for ch in changes]
        with Subscriber([url], c.token, "cascade:s1/nothing") as refused:
            assert refused.finished.wait(10)
            assert isinstance(refused.error, ChannelRefused)
            assert "does not replicate table 'nothing'" in refused.error.reason
        with Subscriber([url], c.token, "cascade:s9/accounts") as unknown:
            assert unknown.finished.wait(10)
            assert isinstance(unknown.error, ChannelRefused)
            assert "cascade node 's9' is unknown" in unknown.error.reason
