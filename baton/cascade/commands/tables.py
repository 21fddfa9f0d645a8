"""What a node replicates: tables (add, remove, list, missing), the sequences it keeps, and
SQL scripts run through the queue."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from baton.cascade import ddl, seqs, set_ops
from baton.cascade.commands.sets import known, open_set
from baton.errors import CascadeInputError

# -- tables ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TableState:
    node: str
    table: str
    #: ``ok`` (the root captures it), ``copying`` (its worker copies it), ``catching-up``.
    state: str


@dataclasses.dataclass(frozen=True, slots=True)
class TableAdded:
    table: str
    nodes: list[TableState]
    #: With ``everywhere``: the nodes skipped because they are tagged dead.
    skipped: list[str]
    #: With ``everywhere``: the live nodes skipped because they cannot replicate a table now
    #: (queue-only, or below a queue-only provider), and why.
    held: dict[str, str] = dataclasses.field(default_factory=dict)


def add_table(
    via: str, table: str, node: str | None = None, everywhere: bool = False
) -> TableAdded:
    """Replicate ``table`` on ``node``, or on every live node (root first, then each node after
    its provider). The root captures it; elsewhere it is registered as ``copying`` and the
    node's worker copies it from the provider with Spark, then catches up."""
    if (node is None) == (not everywhere):
        raise CascadeInputError(
            "give either a node (--node NODE, or node) or every node (--all, or all)"
        )
    c = open_set(via)
    held = set_ops.without_tables(c, set_ops.live_states(c)) if everywhere else {}
    done = [TableState(n, table, state) for n, state in set_ops.add_table(c, table, node)]
    skipped = sorted(n for n in c.nodes if c.dead(n)) if everywhere else []
    return TableAdded(table, done, skipped, held)


@dataclasses.dataclass(frozen=True, slots=True)
class TableRemoved:
    node: str
    table: str
    #: False: it was not replicated (nothing to do).
    removed: bool
    #: The node is the root: it no longer captures the table.
    uncaptured: bool


def remove_table(via: str, table: str, node: str) -> TableRemoved:
    """Stop replicating ``table`` on ``node`` (its rows stay). At the root, stop capturing it,
    which is refused while another live node replicates it."""
    removed, uncaptured = set_ops.remove_table(open_set(via), table, node)
    return TableRemoved(node, table, removed, uncaptured)


def tables(via: str, node: str) -> dict[str, str]:
    """The tables ``node`` replicates, with their state (copying, catching-up, ok)."""
    return set_ops.tables(open_set(via), node)


@dataclasses.dataclass(frozen=True, slots=True)
class Missing:
    node: str
    #: None: the node is the root (it has no provider).
    provider: str | None
    #: The tables the provider replicates and the node does not.
    tables: list[str]


def missing(via: str, node: str) -> Missing:
    """The tables ``node``'s provider replicates that ``node`` does not (for add-table)."""
    provider, tables = set_ops.missing(open_set(via), node)
    return Missing(node, provider, tables)


# -- sequences ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SeqAdded:
    seq: str
    #: Each node and whether it kept the sequence already.
    nodes: list[tuple[str, bool]]


def add_seq(via: str, seq: str, node: str | None = None, everywhere: bool = False) -> SeqAdded:
    """Keep sequence ``seq`` on ``node``, or on every live node with tables (the root first):
    at least as high as the root's (PostgreSQL only: SQLite has no sequences)."""
    if (node is None) == (not everywhere):
        raise CascadeInputError(
            "give either a node (--node NODE, or node) or every node (--all, or all)"
        )
    c = open_set(via)
    return SeqAdded(seq, seqs.add_seq(c, seq, node))


@dataclasses.dataclass(frozen=True, slots=True)
class SeqRemoved:
    node: str
    seq: str
    #: False: it was not kept there (nothing to do).
    removed: bool


def remove_seq(via: str, seq: str, node: str) -> SeqRemoved:
    """Stop keeping ``seq`` on ``node`` (the sequence stays); the root last."""
    c = open_set(via)
    known(c, node)
    return SeqRemoved(node, seq, seqs.remove_seq(c, seq, node))


def list_seqs(via: str, node: str) -> dict[str, int | None]:
    """The sequences ``node`` keeps and their last values there (None: never used)."""
    c = open_set(via)
    known(c, node)
    return seqs.seqs(c, node)


# -- scripts through the queue -------------------------------------------------------------------


def execute(via: str, name: str, sql: str) -> ddl.Executed:
    """Run the SQL script ``sql`` (named ``name``, a file's name) at the root and, through the
    queue, on every node at its place among the events (see :mod:`baton.cascade.ddl`). A
    script run before (same name and content) is not run again."""
    ddl.check_script(name, sql)
    c = open_set(via)
    return ddl.execute(c, name, sql)  # bad SQL stays bad input: not wrapped in refusing()


def read_script(path: Path) -> tuple[str, str]:
    """(name, text) of a script file of this host."""
    try:
        return path.name, path.read_text()
    except UnicodeDecodeError:
        raise CascadeInputError(f"{path}: not a text file") from None
    except FileNotFoundError:
        raise CascadeInputError(f"{path}: no such file") from None
