"""The initial copy's Spark read cuts a SQLite table into partitions by row count, so sparse
keys (a negative probe key beside small ones) give a few partitions, not millions: a copy with
such keys filled the driver's heap and hung in the fault campaign (issue 12)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from baton.cascade.db import open_node_db
from baton.spark.copy import TableReader, row_ranges

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

KEYS = [-1_795_588_721_811, -3, 1, 2, 3, 4, 5, 6, 7, 10**12]


def table(path: Path) -> str:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(k, k % 7) for k in KEYS])
    conn.close()
    return f"sqlite:///{path}"


def test_ranges_follow_row_count_and_cover_every_row(tmp_path: Path) -> None:
    conn = sqlite3.connect(table(tmp_path / "n.db").removeprefix("sqlite:///"))
    ranges = row_ranges(conn, "items", 4)
    assert [(r.low, r.high) for r in ranges] == [(KEYS[0], 2), (3, 6), (7, KEYS[-1])]
    assert len(row_ranges(conn, "items", 200_000)) == 1
    conn.execute("DELETE FROM items")
    assert [(r.low, r.high) for r in row_ranges(conn, "items", 4)] == [(None, None)]


def test_sparse_keys_copy_whole(tmp_path: Path, spark: SparkSession) -> None:
    from baton.spark.copy import spark_rows

    location = table(tmp_path / "n.db")
    with open_node_db(location) as db:
        db.install()  # each partition also reads the node's events (none here)
    reader = TableReader({"location": location, "table": "items", "rowsPerPartition": "4"})
    assert len(reader.partitions()) == 3
    copy = spark_rows(spark, rows_per_partition=4)(location, "items", 0)
    assert copy.columns == ["id", "n"]
    assert sorted(tuple(r) for r in copy.rows) == [(k, k % 7) for k in KEYS]
    assert (copy.reflected, copy.upto) == (frozenset(), 0)
