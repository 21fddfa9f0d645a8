"""The ``batonapply`` streaming sink used directly, as a user's own job would."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from baton.cascade.db import open_node_db
from baton.local.waiting import wait_for
from baton.testing.cascade import LocalSet
from baton.testing.workload import run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _one_set(tmp_path: Path, spark: SparkSession) -> LocalSet:
    s = LocalSet(tmp_path / "set", spark)
    s.root("r")
    s.leaf("l", "r")
    s.add_table("accounts")
    run_workload(s.path("r"), 30, seed=21)
    with open_node_db(s.location("r")) as root:
        wait_for(lambda: root.pending()[0] == 0, timeout=30, what="the root to tick")
    return s


def test_the_sink_applies_a_user_query(tmp_path: Path, spark: SparkSession) -> None:
    with _one_set(tmp_path, spark) as s:
        with open_node_db(s.location("r")) as root:
            last = root.last_tick()
        assert last is not None
        query = (
            spark.readStream.format("baton")
            .option("provider", s.location("r"))
            .option("subscriber", s.location("l"))
            .load()
            .writeStream.format("batonapply")
            .option("subscriber", s.location("l"))
            .option("epoch", "7")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        try:
            wait_for(lambda: s.state("l").position >= last.tick_id, timeout=120)
        finally:
            query.stop()
        assert s.rows("l") == s.rows("r") and len(s.rows("r")) > 50
        assert s.state("l").epoch == 7


def test_a_micro_batch_split_across_partitions_is_refused(
    tmp_path: Path, spark: SparkSession
) -> None:
    # A repartitioned source hands the sink a micro-batch in parts: applying the part holding
    # the ticks would skip the other part's events. It is refused whole and nothing moves.
    with _one_set(tmp_path, spark) as s:
        before = s.state("l").position
        query = (
            spark.readStream.format("baton")
            .option("provider", s.location("r"))
            .option("subscriber", s.location("l"))
            .load()
            .repartition(2)
            .writeStream.format("batonapply")
            .option("subscriber", s.location("l"))
            .option("epoch", "1")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        try:
            wait_for(lambda: not query.isActive, timeout=120, what="the query to fail")
            assert "came in parts" in str(query.exception())
        finally:
            query.stop()
        assert s.state("l").position == before
        assert s.rows("l") == []
