"""root -> branch -> leaf on SQLite node databases with real Spark workers: a generated
workload of inserts, updates and deletes arrives exactly once at every node."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from baton.cascade import node_ops
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.ticker import TickerConfig, publish_watermark, tick_once
from baton.local.waiting import wait_for
from baton.service.mode import MODES
from baton.service.worker import Worker
from baton.testing.workload import create_accounts, run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class Ticker(threading.Thread):
    """The root's ticker and watermark publisher, in a thread for the test."""

    def __init__(self, location: str) -> None:
        super().__init__(daemon=True)
        self.location = location
        self.halt = threading.Event()

    def run(self) -> None:
        cfg = TickerConfig(period=0.02, max_lag=0.05, idle=0.5)
        with open_node_db(self.location) as db:
            while not self.halt.wait(cfg.period):
                tick_once(db, cfg, time.time())
                publish_watermark(db)


@pytest.fixture
def cascade(tmp_path: Path) -> Iterator[dict[str, str]]:
    loc = {n: f"sqlite://{tmp_path / n}.db" for n in ("s1", "s2", "s3")}
    for n in loc:
        create_accounts(tmp_path / f"{n}.db")
    node_ops.create_root("s1", loc["s1"], "S")
    ticker = Ticker(loc["s1"])
    ticker.start()
    node_ops.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    node_ops.create_subscriber(Role.LEAF, "s3", loc["s3"], "s2", loc["s2"])
    for n in ("s1", "s2", "s3"):
        node_ops.add_table(loc[n], "accounts")
    yield loc
    ticker.halt.set()
    ticker.join()


def rows(location: str) -> list[tuple[object, ...]]:
    with open_node_db(location) as db:
        return db.read_rows("accounts")


@pytest.mark.parametrize("mode", MODES)
def test_root_branch_leaf(
    spark: SparkSession, cascade: dict[str, str], tmp_path: Path, mode: str
) -> None:
    workers = [Worker(spark, cascade[n], epoch=1, mode=mode) for n in ("s2", "s3")]
    for w in workers:
        w.start()
    try:
        changes = run_workload(tmp_path / "s1.db", transactions=300, seed=7)
        assert changes > 1000
        with open_node_db(cascade["s1"]) as root:
            wait_for(lambda: root.pending()[0] == 0, timeout=30)
            last = root.last_tick()
            assert last is not None

        def caught_up() -> bool:
            for w in workers:
                w.check()
            for n in ("s2", "s3"):  # every table copied whole, the leaf at the last tick
                with open_node_db(cascade[n]) as db:
                    if set(db.tables().values()) != {"ok"}:
                        return False
            with open_node_db(cascade["s3"]) as leaf:
                return leaf.state().position >= last.tick_id

        wait_for(caught_up, timeout=120)
        expected = rows(cascade["s1"])
        assert len(expected) > 500
        assert rows(cascade["s2"]) == expected
        assert rows(cascade["s3"]) == expected
        # The branch carries the same ticks as the root (it can be anyone's provider).
        with open_node_db(cascade["s1"]) as root, open_node_db(cascade["s2"]) as branch:
            assert branch.last_tick() is not None
            for t in branch.ticks(0, last.tick_id):
                assert root.get_tick(t.tick_id) in (None, t)
    finally:
        for w in workers:
            w.stop()
