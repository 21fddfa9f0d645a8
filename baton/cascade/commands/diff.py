"""``compare``, ``repair`` and ``resync`` (seed 004), on Spark: see
:mod:`baton.cascade.table_diff`. The Spark differ is the process's
(:func:`~baton.cascade.table_diff.use_differ`), given by the command line and the node's
API."""

from __future__ import annotations

from collections.abc import Sequence

from baton.cascade import table_diff
from baton.cascade.commands.sets import known, open_set
from baton.cascade.table_diff import Compared, Repaired, Resynced
from baton.errors import CascadeInputError


def compare(via: str, node: str, tables: Sequence[str] = ()) -> Compared:
    """``node``'s tables (or ``tables``) against its provider's at its position, row by row."""
    c = open_set(via)
    known(c, node)
    return table_diff.compare(c, node, tables, table_diff.process_differ())


def repair(via: str, node: str, table: str) -> Repaired:
    """Make ``node``'s ``table`` equal to its provider's at its position, changing only the
    rows that differ."""
    c = open_set(via)
    known(c, node)
    return table_diff.repair(c, node, table, table_diff.process_differ())


def resync(via: str, node: str, table: str, timeout: float = 60.0) -> Resynced:
    """Copy ``node``'s ``table`` again from its provider (the worker's Spark copy), waiting up
    to ``timeout`` seconds for it to be ok."""
    if not 0 <= timeout <= 3600:
        raise CascadeInputError(f"bad timeout {timeout!r}: give seconds from 0 to 3600")
    c = open_set(via)
    known(c, node)
    return table_diff.resync(c, node, table, timeout)


__all__ = ["compare", "repair", "resync"]
