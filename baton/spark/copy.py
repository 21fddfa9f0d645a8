"""The initial copy of a table to a new subscriber, as a Spark job.

``spark.read.format("batontable").option("location", L).option("table", T).load()`` reads a
node's table in parallel partitions (rowid ranges on SQLite; one partition on PostgreSQL), one
row per record as a JSON array in the table's column order. :func:`spark_rows` turns that into
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

    def partitions(self) -> Sequence[InputPartition]:
        if not self.location.startswith("sqlite:"):
            return [RowRange(None, None)]
        import sqlite3

        from baton.cascade.db import ident
        from baton.cascade.db.sqlite import connect_readonly
        from baton.store import sqlite_path

        # Any spelling, as the store; read-only: the provider is another node.
        conn = connect_readonly(Path(sqlite_path(self.location)))
        try:
            low, high = conn.execute(
                f"SELECT min(rowid), max(rowid) FROM {ident(self.table)}"
            ).fetchone()
        except sqlite3.OperationalError:  # a WITHOUT ROWID table: read it whole
            return [RowRange(None, None)]
        finally:
            conn.close()
        if low is None:
            return [RowRange(None, None)]
        step = ROWS_PER_PARTITION
        return [RowRange(a, min(a + step - 1, high)) for a in range(low, high + 1, step)]

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


def spark_rows(spark: SparkSession) -> RowReader:
    """A row reader for :func:`baton.cascade.node_ops.copy_table` that reads with Spark."""
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
            .load()
        )
        rows = [decode(r, exact) for r in df.toArrow().column("row").to_pylist()]
        return cols, rows

    return read
