"""Comparing a node's tables with its provider's without moving rows: a row count and an
order-free checksum per table (``baton cascade check``), and the tick a node's tables reflect.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from baton.cascade.db import NodeDB
from baton.cascade.model import NodeState, Role


def _plain(value: Any) -> Any:
    """A value as JSON can carry it the same way from either backend."""
    if isinstance(value, bool):
        return int(value)  # SQLite has no booleans: PostgreSQL's true is SQLite's 1
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return value


def digest(db: NodeDB, table: str) -> tuple[int, int]:
    """(rows, checksum) of ``table``: the sum modulo 2**64 of a hash of each row as JSON with
    its column names, so the order of rows and of columns does not matter."""
    cols, _ = db.columns(table)
    total = 0
    rows = db.read_rows(table)
    for row in rows:
        record = {c: _plain(v) for c, v in zip(cols, row, strict=True)}
        text = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
        h = hashlib.blake2b(text.encode(), digest_size=8).digest()
        total = (total + int.from_bytes(h, "big")) % 2**64
    return len(rows), total


def position(db: NodeDB, st: NodeState) -> int:
    """The tick a node's tables reflect: a root's are current up to its last tick."""
    if st.role is Role.ROOT:
        last = db.last_tick()
        return last.tick_id if last else 0
    return st.position


__all__ = ["digest", "position"]
