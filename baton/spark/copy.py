"""The initial copy of a table to a new subscriber, as a Spark job.

``spark.read.format("batontable").option("location", L).option("table", T)
.option("afterTick", N).load()`` reads a node's table for a copy whose provider tick is N, in
partitions, one row per record as a JSON array in the table's column order. Each partition reads
its rows in one snapshot of the node database, and so do the ids of the table's events after
tick N that those rows already show (:meth:`baton.cascade.db.NodeDB.read_copy`): it ends with
one record that is a JSON object, ``{"reflected": [ids], "upto": tick}``.

Partitions are ranges of the key only when the table's key is a single ``INTEGER PRIMARY KEY``
of SQLite (the rowid itself, so a key never moves between ranges), of about ``rowsPerPartition``
rows each (counted, not a rowid span: :func:`row_ranges`), and a range names only the events of
its own keys: each event is then judged by the snapshot that read its key's row. Any other table
is read whole in one partition (PostgreSQL; and SQLite tables whose rowid is not the key, where
a ``REPLACE`` gives a row a new rowid, which could move it between ranges read at different
moments and lose it or copy it twice). :func:`spark_rows` turns this into the row reader
:func:`baton.cascade.node_ops.copy_table` takes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from baton.cascade.codec import decode, encode_row
from baton.cascade.model import TableCopy
from baton.spark.progress import Report, tracked

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from baton.cascade.node_ops import RowReader

#: Rows per partition aimed at on SQLite (by rowid range).
ROWS_PER_PARTITION = 200_000


class RangeList(InputPartition):
    """A partition: the rows whose key (one integer column) is in any of ``ranges``."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.ranges = ranges


class RowRange(InputPartition):
    """A partition: the keys (rowids) from ``low`` to ``high``, or the whole table (None)."""

    def __init__(self, low: int | None, high: int | None) -> None:
        self.low = low
        self.high = high


def rowid_key(conn: Any, table: str) -> bool:
    """Whether ``table``'s primary key is one column that is its rowid (``INTEGER PRIMARY
    KEY``): SQLite gives every other primary key an index of its own (origin ``pk``), a
    ``WITHOUT ROWID`` table's too."""
    from baton.cascade.db import ident

    keys = [r for r in conn.execute(f"PRAGMA table_info({ident(table)})") if r[5]]
    indexes = conn.execute(f"PRAGMA index_list({ident(table)})").fetchall()
    return len(keys) == 1 and not any(r[3] == "pk" for r in indexes)


def row_ranges(conn: Any, table: str, rows: int) -> list[RowRange]:
    """Rowid ranges of about ``rows`` rows each, cut by row count, not by rowid span.

    Rowids can be sparse (an application's own integer keys, a negative probe key beside small
    ones): ranges of a fixed rowid width then number in the millions and their partition
    descriptions alone filled the driver's heap (``OutOfMemoryError`` in the copy). SQLite
    numbers the rows in one pass over the rowid index and keeps every ``rows``-th rowid.
    """
    from baton.cascade.db import ident

    starts = [
        rowid
        for (rowid,) in conn.execute(
            f"SELECT rowid FROM (SELECT rowid, row_number() OVER (ORDER BY rowid) AS k "
            f"FROM {ident(table)}) WHERE (k - 1) % ? = 0 ORDER BY rowid",
            (rows,),
        )
    ]
    if not starts:
        return [RowRange(None, None)]
    (high,) = conn.execute(f"SELECT max(rowid) FROM {ident(table)}").fetchone()
    ends = [b - 1 for b in starts[1:]] + [high]
    return [RowRange(low, end) for low, end in zip(starts, ends, strict=True)]


class TableSource(DataSource):
    """Batch read of one replicated table of a node database."""

    @classmethod
    def name(cls) -> str:
        return "batontable"

    def schema(self) -> str:
        return "row string"

    def reader(self, schema: StructType) -> DataSourceReader:
        return TableReader(dict(self.options))


class TableReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        # Spark hands the options over with their names in lower case (``rowsPerPartition``
        # arrives as ``rowsperpartition``): look them up the same way, whoever calls.
        opts = {k.lower(): v for k, v in options.items()}
        self.location = opts["location"]
        self.table = opts["table"]
        self.after_tick = int(opts.get("aftertick", "0"))
        self.rows_per_partition = int(opts.get("rowsperpartition", ROWS_PER_PARTITION))
        #: Read a PostgreSQL table in key ranges too (``compare``, which does not need one
        #: snapshot per key's events: see :meth:`PostgresNodeDB.key_ranges`).
        self.key_ranges = opts.get("keyranges", "false") == "true"
        #: Only these key ranges (``compare``'s suspect buckets), as JSON [[low, high], ...].
        self.ranges = [(int(a), int(b)) for a, b in json.loads(opts.get("ranges") or "[]")]
        self.only = "ranges" in opts

    def partitions(self) -> Sequence[InputPartition]:
        if self.only:
            # About rowsPerPartition keys per partition (a bucket's span bounds its rows).
            out: list[InputPartition] = []
            chunk: list[tuple[int, int]] = []
            span = 0
            for low, high in self.ranges:
                chunk.append((low, high))
                span += high - low + 1
                if span >= self.rows_per_partition:
                    out.append(RangeList(chunk))
                    chunk, span = [], 0
            if chunk or not out:
                out.append(RangeList(chunk))
            return out
        if not self.location.startswith("sqlite:"):
            if self.key_ranges:
                from baton.cascade.db import open_node_db
                from baton.cascade.db.postgres import PostgresNodeDB

                with open_node_db(self.location, readonly=True) as db:
                    assert isinstance(db, PostgresNodeDB)
                    ranges = db.key_ranges(self.table, self.rows_per_partition)
                if ranges:
                    return [RowRange(low, high) for low, high in ranges]
            return [RowRange(None, None)]

        from baton.cascade.db.sqlite import connect_readonly
        from baton.store import sqlite_path

        # Any spelling, as the store; read-only: the provider is another node.
        conn = connect_readonly(Path(sqlite_path(self.location)))
        try:
            if not rowid_key(conn, self.table):
                return [RowRange(None, None)]  # see the module docstring
            return row_ranges(conn, self.table, self.rows_per_partition)
        finally:
            conn.close()

    def read(self, partition: InputPartition) -> Iterator[tuple[str]]:
        from baton.cascade.db import open_node_db

        if isinstance(partition, RangeList):
            with open_node_db(self.location, readonly=True) as db:
                for span in partition.ranges:
                    for found in db.read_rows(self.table, span):
                        yield (encode_row(found),)
            return
        assert isinstance(partition, RowRange)

        low, high = partition.low, partition.high
        key_range = None if low is None or high is None else (low, high)
        with open_node_db(self.location, readonly=True) as db:
            copy = db.read_copy(self.table, self.after_tick, key_range)
        for row in copy.rows:
            yield (encode_row(row),)
        marker = {"reflected": sorted(copy.reflected), "upto": copy.upto}
        yield (json.dumps(marker),)


def spark_rows(
    spark: SparkSession,
    rows_per_partition: int = ROWS_PER_PARTITION,
    progress: Report | None = None,
) -> RowReader:
    """A row reader for :func:`baton.cascade.node_ops.copy_table` that reads with Spark, in
    partitions of about ``rows_per_partition`` rows on SQLite; an event is reflected when the
    partition that read its key says so (see the module docstring). ``progress``: told the
    read's Spark tasks done and in all while it runs."""
    spark.dataSource.register(TableSource)

    def read(location: str, table: str, tick: int) -> TableCopy:
        from baton.cascade.db import open_node_db

        with open_node_db(location, readonly=True) as db:
            cols, _ = db.columns(table)
            exact = db.exact_numbers(table)
        df = (
            spark.read.format("batontable")
            .option("location", location)
            .option("table", table)
            .option("afterTick", str(tick))
            .option("rowsPerPartition", str(rows_per_partition))
            .load()
        )
        with tracked(spark, progress):
            records = df.toArrow().column("row").to_pylist()
        return table_copy(cols, records, exact)

    return read


def table_copy(columns: list[str], records: Iterable[str], exact: bool = False) -> TableCopy:
    """The copy the source's records (of every partition, in any order) make: their rows, and
    the events the partitions say their rows show (each names only its own keys' events)."""
    rows: list[Sequence[Any]] = []
    reflected: set[int] = set()
    upto = 0
    for text in records:
        if text.startswith("{"):  # a partition's last record (a row is a JSON array)
            marker = json.loads(text)
            reflected.update(marker["reflected"])
            upto = max(upto, int(marker["upto"]))
        else:
            rows.append(decode(text, exact))
    return TableCopy(columns, rows, frozenset(reflected), upto)
