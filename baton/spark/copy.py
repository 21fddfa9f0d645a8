"""The initial copy of a table to a new subscriber, as a Spark job.

``spark.read.format("batontable").option("location", L).option("table", T).load()`` reads a
node's table in parallel partitions (rowid ranges on SQLite; one partition on PostgreSQL), one
row per record as a JSON array in the table's column order (option ``rowsPerPartition``, rows
per SQLite partition, counted, not a rowid span). :func:`spark_rows` turns that into
the row reader :func:`baton.cascade.node_ops.copy_table` takes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from baton.cascade.codec import decode, encode_row

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from baton.cascade.node_ops import RowReader

#: Rows per partition aimed at on SQLite (by rowid range).
ROWS_PER_PARTITION = 200_000


class RowRange(InputPartition):
    def __init__(self, low: int | None, high: int | None) -> None:
        self.low = low
        self.high = high


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
        self.location = options["location"]
        self.table = options["table"]
        self.rows_per_partition = int(options.get("rowsPerPartition", ROWS_PER_PARTITION))

    def partitions(self) -> Sequence[InputPartition]:
        if not self.location.startswith("sqlite:"):
            return [RowRange(None, None)]
        import sqlite3

        from baton.cascade.db.sqlite import connect_readonly
        from baton.store import sqlite_path

        # Any spelling, as the store; read-only: the provider is another node.
        conn = connect_readonly(Path(sqlite_path(self.location)))
        try:
            return row_ranges(conn, self.table, self.rows_per_partition)
        except sqlite3.OperationalError:  # a WITHOUT ROWID table: read it whole
            return [RowRange(None, None)]
        finally:
            conn.close()

    def read(self, partition: InputPartition) -> Iterator[tuple[str]]:
        assert isinstance(partition, RowRange)
        if partition.low is None:
            from baton.cascade.db import open_node_db

            with open_node_db(self.location, readonly=True) as db:
                for row in db.read_rows(self.table):
                    yield (encode_row(row),)
            return

        from baton.cascade.db import ident
        from baton.cascade.db.sqlite import connect_readonly
        from baton.store import sqlite_path

        # Any spelling, as the store; read-only: the provider is another node.
        conn = connect_readonly(Path(sqlite_path(self.location)))
        try:
            rows = conn.execute(
                f"SELECT * FROM {ident(self.table)} WHERE rowid BETWEEN ? AND ?",
                (partition.low, partition.high),
            )
            for row in rows:
                yield (encode_row(row),)
        finally:
            conn.close()


def spark_rows(spark: SparkSession, rows_per_partition: int = ROWS_PER_PARTITION) -> RowReader:
    """A row reader for :func:`baton.cascade.node_ops.copy_table` that reads with Spark, in
    partitions of about ``rows_per_partition`` rows on SQLite."""
    spark.dataSource.register(TableSource)

    def read(location: str, table: str) -> tuple[list[str], list[Sequence[Any]]]:
        from baton.cascade.db import open_node_db

        with open_node_db(location, readonly=True) as db:
            cols, _ = db.columns(table)
            exact = db.exact_numbers(table)
        df = (
            spark.read.format("batontable")
            .option("location", location)
            .option("table", table)
            .option("rowsPerPartition", str(rows_per_partition))
            .load()
        )
        rows = [decode(r, exact) for r in df.toArrow().column("row").to_pylist()]
        return cols, rows

    return read
