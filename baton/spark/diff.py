"""``compare``'s Spark job: the candidate rows of two nodes' tables.

Both tables are read by the copy's source (:class:`baton.spark.copy.TableSource`): a table
whose key is one integer column in key ranges, in parallel (SQLite by rowid, PostgreSQL by its
key's index); others whole. Each row is one JSON array in the table's column order, encoded by
the one codec (:mod:`baton.cascade.codec`), so equal values encode alike on both sides. The key
is taken from the array in the JVM (``get_json_object``, no Python worker per row), the two
sides are joined on it (a full outer join: Spark hash partitions both by the key) and only the
pairs whose encodings differ, or that have one side, come back to the driver, where
:func:`baton.cascade.table_diff.decide` judges them by value.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from baton.cascade.table_diff import Candidate, Differ, Report
from baton.spark.progress import tracked

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: ``afterTick`` for the source: above every tick, so that no partition reads events (the
#: copy's marker is not needed here).
NO_EVENTS = 2**62
#: Rows per partition a table is read in (SQLite and PostgreSQL tables with one integer key).
ROWS_PER_PARTITION = 250_000
#: Joins the key's parts (a character no JSON text holds unescaped).
SEP = "\u0001"


def _keyed(
    spark: SparkSession,
    location: str,
    table: str,
    positions: Sequence[int],
    *,
    per: int,
    ranges: Sequence[tuple[int, int]] | None,
) -> DataFrame:
    from pyspark.sql import functions as F

    reader = (
        spark.read.format("batontable")
        .option("location", location)
        .option("table", table)
        .option("afterTick", str(NO_EVENTS))
        .option("keyRanges", "true")
        .option("rowsPerPartition", str(per))
    )
    if ranges is not None:
        reader = reader.option("ranges", json.dumps([list(r) for r in ranges]))
    rows = reader.load()
    rows = rows.where(~F.col("row").startswith("{"))  # a partition's marker, not a row
    parts = [F.coalesce(F.get_json_object("row", f"$[{i}]"), F.lit("null")) for i in positions]
    return rows.select(F.concat_ws(SEP, *parts).alias("k"), F.col("row"))


def spark_differ(spark: SparkSession, rows_per_partition: int = ROWS_PER_PARTITION) -> Differ:
    """A :data:`~baton.cascade.table_diff.Differ` that runs on ``spark``, reading tables in
    partitions of about ``rows_per_partition`` rows."""
    from baton.spark.copy import TableSource  # pyspark's data source API: not at import

    spark.dataSource.register(TableSource)

    def differ(
        node: str,
        provider: str,
        table: str,
        positions: Sequence[int],
        *,
        progress: Report | None = None,
        ranges: Sequence[tuple[int, int]] | None = None,
    ) -> Iterator[Candidate]:
        from pyspark.sql import functions as F

        rows = rows_per_partition
        n = _keyed(spark, node, table, positions, per=rows, ranges=ranges)
        p = _keyed(spark, provider, table, positions, per=rows, ranges=ranges)
        n, p = n.withColumnRenamed("row", "n"), p.withColumnRenamed("row", "p")
        joined = n.join(p, "k", "full_outer")
        differ = joined.where(
            F.col("n").isNull() | F.col("p").isNull() | (F.col("n") != F.col("p"))
        ).select("n", "p")
        with tracked(spark, progress):
            for row in differ.toLocalIterator():
                yield Candidate(row["n"], row["p"])

    return differ


def session_differ() -> Differ:
    """A differ on the process's Spark session (``BATON_SPARK_MASTER`` or
    ``BATON_SPARK_REMOTE`` say where it runs): what the command line and the node's API give
    :func:`baton.cascade.table_diff.use_differ`."""
    from baton.spark.lifecycle import shared_session

    return spark_differ(shared_session(quiet=True))


__all__ = ["NO_EVENTS", "session_differ", "spark_differ"]
