"""Node databases, one module per backend (as :mod:`baton.store` does for the coordination
store): the contract in :mod:`~baton.cascade.db.base`, SQLite (the embedded default) in
:mod:`~baton.cascade.db.sqlite`, PostgreSQL in :mod:`~baton.cascade.db.postgres`, and
:func:`open_node_db` picking one by the location's scheme (the backend is imported on first use,
so SQLite-only processes never import psycopg)."""

from __future__ import annotations

from baton.cascade.db.base import NodeDB, ident
from baton.errors import CascadeInputError


def open_node_db(location: str, readonly: bool = False, existing: bool = False) -> NodeDB:
    """The node database at ``location`` (``sqlite:///path`` or ``postgresql://...``).

    ``readonly``: for reading *another* node's database (a provider's queue or tables, a
    subscriber's position). A process may be paused at any moment, and what it holds on another
    node's database must never stop that node: a read-only SQLite connection takes no write
    lock at all, not even the checkpoint a last connection makes when it closes.

    ``existing``: the node must already be there (Spark's tasks, which may run on another host:
    a SQLite file missing there is :class:`NodeUnreachable`, never a new empty database)."""
    if location.startswith("sqlite:"):
        from baton.cascade.db.sqlite import SQLiteNodeDB

        return SQLiteNodeDB(location, readonly=readonly, existing=existing)
    if location.startswith(("postgresql:", "postgres:")):
        from baton.cascade.db.postgres import PostgresNodeDB

        return PostgresNodeDB.open(location)
    raise CascadeInputError(
        f"bad node location {location.split('://', 1)[0]!r}: use sqlite:///path/node.db or "
        "postgresql://user@host/db"
    )


__all__ = ["NodeDB", "ident", "open_node_db"]
