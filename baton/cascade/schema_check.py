"""What in a node's own schema would get in the way of applying batches (Londiste's ``fkeys``
and ``triggers``): foreign keys that a batch can break, and user triggers that fire for every
row a batch writes. Pure reads: nothing is changed.

A batch is applied set-wise, one table after another (for each table one delete statement, then
one upsert), not in event order. So a foreign key between two replicated tables can see a child
row before its parent, or a parent deleted before its children, within one transaction: only a
constraint checked at commit (``DEFERRABLE INITIALLY DEFERRED``) is safe. A foreign key between a
replicated table and one that is not replicated on the node is unsafe whatever its timing: the
other side's rows are the node's own.

SQLite checks foreign keys only on connections that turn ``PRAGMA foreign_keys`` on, which
baton's do not: there, the constraints never stop an apply, but the node's data can break them
(and a connection of yours that checks them then fails).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from baton.cascade.model import Role
from baton.cascade.set_ops import CascadeSet


@dataclass(frozen=True, slots=True)
class ForeignKey:
    """A foreign key that applying batches on the node can break, and what to do about it."""

    name: str
    table: str
    columns: list[str]
    references: str
    ref_columns: list[str]
    problem: str
    fix: str


@dataclass(frozen=True, slots=True)
class Trigger:
    """A user trigger that fires for the rows applying batches writes on the node."""

    table: str
    name: str
    fix: str


T = TypeVar("T", "ForeignKey", "Trigger")


@dataclass(frozen=True, slots=True)
class Found(Generic[T]):
    """What :func:`fkeys` or :func:`triggers` found on ``node``. ``applies`` is False for the
    root (it applies no batch: nothing of its schema gets in the way); ``note`` says so."""

    node: str
    role: str
    applies: bool
    note: str
    items: list[T]


def _sqlite(c: CascadeSet, node: str) -> bool:
    return c.location(node).startswith("sqlite:")


def fkeys(c: CascadeSet, node: str) -> Found[ForeignKey]:
    """The foreign keys of ``node`` that applying batches there can break: between two
    replicated tables (unless checked at commit), or between a replicated table and one the
    node does not replicate (either way round)."""
    with c.db(node) as db:
        st = db.state()
        replicated = set(db.tables())
        keys = db.foreign_keys()
    sqlite = _sqlite(c, node)
    out: list[ForeignKey] = []
    for name, table, cols, ref, ref_cols, deferred in keys:
        child, parent = table in replicated, ref in replicated
        if child and parent:
            if deferred:
                continue  # checked at the batch's commit, when both tables are written
            problem = (
                "both tables are replicated and a batch writes them one after the other, not "
                f"in event order: a {table} row inserted with its {ref} row, or a {ref} row "
                "deleted with its children, is written in the wrong order"
            )
            fix = (
                f"make it DEFERRABLE INITIALLY DEFERRED on {node} (ALTER TABLE {table} ALTER "
                f"CONSTRAINT {name} DEFERRABLE INITIALLY DEFERRED): checked at each batch's commit"
            )
        elif child:
            problem = (
                f"{table} is replicated and {ref} is not on {node}: a {table} row can arrive "
                f"whose {ref} row does not exist here"
            )
            fix = f"replicate {ref} on {node} too (add-table), or drop the constraint on {node}"
        elif parent:
            problem = (
                f"{ref} is replicated and {table} is not on {node}: deleting (or changing the "
                f"key of) a {ref} row from the queue fails while {table} rows here refer to it"
            )
            fix = (
                f"replicate {table} on {node} too (add-table), or drop the constraint on {node} "
                "(or make it ON DELETE CASCADE if those rows may go with their parent)"
            )
        else:
            continue
        if sqlite:
            fix += (
                "; on SQLite baton's connections do not check foreign keys (PRAGMA foreign_keys "
                "is off), so the apply goes on but the data may break the constraint"
            )
        out.append(ForeignKey(name, table, cols, ref, ref_cols, problem, fix))
    applies = st.role is not Role.ROOT
    note = "" if applies else (
        f"{node} is the root: it applies no batch, so these matter only once it is a branch"
    )  # fmt: skip
    return Found(node, st.role.value, applies, note, out)


def triggers(c: CascadeSet, node: str) -> Found[Trigger]:
    """The user triggers on the tables ``node`` replicates: on a node that applies batches,
    each fires for every row a batch writes there (baton's own capture triggers are left out).
    Empty for the root, whose triggers fire only for its writers' changes."""
    with c.db(node) as db:
        st = db.state()
        replicated = set(db.tables())
        found = db.user_triggers()
    if st.role is Role.ROOT:
        note = f"{node} is the root: it applies no batch, its triggers see only your writes"
        return Found(node, st.role.value, False, note, [])
    sqlite = _sqlite(c, node)
    out: list[Trigger] = []
    for table, name in found:
        if table not in replicated:
            continue
        disable = (
            f"DROP TRIGGER {name}" if sqlite else f"ALTER TABLE {table} DISABLE TRIGGER {name}"
        )
        fix = (
            "it fires for each row applied (an upsert fires the insert or update triggers): "
            f"keep it if it should see every replicated change (an audit table), else {disable} "
            f"on {node}"
        )
        out.append(Trigger(table, name, fix))
    return Found(node, st.role.value, True, "", out)


__all__ = ["ForeignKey", "Found", "Trigger", "fkeys", "triggers"]
