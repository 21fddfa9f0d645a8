"""``compare`` and ``repair`` (seed 004), on Spark: see :mod:`baton.cascade.table_diff`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from baton.cascade import table_diff
from baton.cascade.commands.sets import known, open_set
from baton.cascade.table_diff import Candidate, Compared, Differ, Repaired


def _lazy_differ() -> Differ:
    """The Spark differ, its session built on first use: bad input is refused before a JVM
    starts (``BATON_SPARK_MASTER`` or ``BATON_SPARK_REMOTE`` say where Spark runs)."""
    built: list[Differ] = []

    def differ(
        node: str, provider: str, table: str, positions: Sequence[int]
    ) -> Iterable[Candidate]:
        if not built:
            from baton.spark.diff import spark_differ
            from baton.spark.lifecycle import shared_session

            built.append(spark_differ(shared_session(quiet=True)))
        return built[0](node, provider, table, positions)

    return differ


def compare(via: str, node: str, tables: Sequence[str] = ()) -> Compared:
    """``node``'s tables (or ``tables``) against its provider's at its position, row by row."""
    c = open_set(via)
    known(c, node)
    return table_diff.compare(c, node, tables, _lazy_differ())


def repair(via: str, node: str, table: str) -> Repaired:
    """Make ``node``'s ``table`` equal to its provider's at its position, changing only the
    rows that differ."""
    c = open_set(via)
    known(c, node)
    return table_diff.repair(c, node, table, _lazy_differ())


__all__ = ["compare", "repair"]
