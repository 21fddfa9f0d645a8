"""root (PostgreSQL) -> branch (PostgreSQL) -> leaf (SQLite) with real Spark workers and
concurrent writers at the root (transactions that commit out of id order), then a switchover:
every node ends equal to the root, every event copied exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from baton.cascade import handover, node_ops, set_ops
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.ticker import TickerConfig, publish_watermark, tick_once
from baton.local.waiting import wait_for
from baton.service.worker import Worker
from baton.testing.cascade import served
from baton.testing.servers import PostgresServer
from baton.testing.workload import create_accounts, run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def pg_locations(postgres_server: PostgresServer) -> Iterator[list[str]]:
    with postgres_server.databases("c1", "c2") as urls:
        yield urls


def test_postgres_root_branch_sqlite_leaf(
    spark: SparkSession, pg_locations: list[str], tmp_path: Path
) -> None:
    loc = {"p1": pg_locations[0], "p2": pg_locations[1], "p3": f"sqlite://{tmp_path}/p3.db"}
    for location in loc.values():
        create_accounts(location)
    node_ops.create_root("p1", loc["p1"], "P")
    halt = threading.Event()
    root = ["p1"]

    def ticker() -> None:
        cfg = TickerConfig(period=0.02, max_lag=0.05, idle=0.5)
        while not halt.wait(cfg.period):
            try:
                with open_node_db(loc[root[0]]) as db:
                    if db.state().role is Role.ROOT:
                        tick_once(db, cfg, time.time())
                        publish_watermark(db)
            except Exception:
                continue

    tick_thread = threading.Thread(target=ticker, daemon=True)
    tick_thread.start()
    node_ops.create_subscriber(Role.BRANCH, "p2", loc["p2"], "p1", loc["p1"])
    node_ops.create_subscriber(Role.LEAF, "p3", loc["p3"], "p2", loc["p2"])
    for n in ("p1", "p2", "p3"):
        node_ops.add_table(loc[n], "accounts")
    workers = {n: Worker(spark, loc[n], epoch=1) for n in ("p2", "p3")}
    for w in workers.values():
        w.start()

    def synced(names: list[str]) -> int:
        with open_node_db(loc[root[0]]) as db:
            wait_for(lambda: db.pending()[0] == 0, timeout=60)
            last = db.last_tick()
        assert last is not None

        def done() -> bool:
            for w in workers.values():
                w.check()
            positions = []
            for n in names:
                with open_node_db(loc[n]) as db:
                    if any(s != "ok" for s in db.tables().values()):
                        return False  # a table still being copied is not in sync
                    positions.append(db.state().position)
            return min(positions) >= last.tick_id

        wait_for(done, timeout=120, what=f"{names} to apply tick {last.tick_id}")
        return last.tick_id

    def rows(name: str) -> list[tuple[object, ...]]:
        with open_node_db(loc[name]) as db:
            return [tuple(r) for r in db.read_rows("accounts")]

    try:
        # Three writers at once: ids are taken in one order and committed in another.
        threads = [
            threading.Thread(
                target=run_workload, args=(loc["p1"], 60), kwargs={"seed": s, "id_base": s * 10**9}
            )
            for s in (1, 2, 3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        synced(["p2", "p3"])
        expected = rows("p1")
        assert len(expected) > 300
        assert rows("p2") == expected
        assert rows("p3") == expected

        # Switchover: p2 becomes the root, p1 its branch; writes go on at p2.
        c = set_ops.CascadeSet(loc["p2"])

        def wait(cond: object, timeout: float) -> None:
            def checked() -> bool:
                for w in workers.values():
                    w.check()
                return bool(cond())  # type: ignore[operator]

            wait_for(checked, timeout=timeout)

        with served(loc["p2"]):  # the worker above, as its node service says
            handover.switchover(c, "p2", wait, 60)
        root[0] = "p2"
        workers["p1"] = Worker(spark, loc["p1"], epoch=1)
        workers["p1"].start()
        run_workload(loc["p2"], 60, seed=9)
        last = synced(["p1", "p3"])
        expected = rows("p2")
        assert rows("p1") == expected and rows("p3") == expected
        with open_node_db(loc["p1"]) as p1:
            start = p1.state().global_watermark
            ids = [e.ev_id for e in p1.batch_events(start, last)]
        assert ids == sorted(set(ids))  # no event twice in the copy
    finally:
        for w in workers.values():
            w.stop()
        halt.set()
        tick_thread.join()
