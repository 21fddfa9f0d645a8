"""The fenced resource the elected jobs change: per lease, an append-only log that refuses a
write whose epoch is lower than the highest it has accepted for that lease.

It stands for what a user's leader changes (a table, a file, a remote API) and is what the
checker reads afterwards. It is an SQLite file on the shared disk, so it stays reachable from a
host cut off from the store: the dangerous case, where only fencing keeps a deposed leader out.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Write:
    seq: int
    lease: str
    epoch: int
    writer: str


class FencedResource:
    def __init__(self, path: Path) -> None:
        self.path = str(path)
        db = self._connect()
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                "lease TEXT NOT NULL, epoch INTEGER NOT NULL, writer TEXT NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS refused (lease TEXT NOT NULL, epoch INTEGER NOT "
                "NULL, writer TEXT NOT NULL)"
            )
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def append(self, lease: str, epoch: int, writer: str) -> int | None:
        """The write's sequence number, or None if refused (a higher epoch was accepted)."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            (top,) = db.execute(
                "SELECT coalesce(max(epoch), 0) FROM writes WHERE lease = ?", (lease,)
            ).fetchone()
            if epoch < top:
                db.execute("INSERT INTO refused VALUES (?, ?, ?)", (lease, epoch, writer))
                db.execute("COMMIT")
                return None
            cur = db.execute(
                "INSERT INTO writes (lease, epoch, writer) VALUES (?, ?, ?)", (lease, epoch, writer)
            )
            db.execute("COMMIT")
            return cur.lastrowid
        finally:
            db.close()

    def writes(self) -> list[Write]:
        db = self._connect()
        try:
            rows = db.execute("SELECT seq, lease, epoch, writer FROM writes ORDER BY seq")
            return [Write(*r) for r in rows]
        finally:
            db.close()

    def refused(self) -> int:
        db = self._connect()
        try:
            (n,) = db.execute("SELECT count(*) FROM refused").fetchone()
            return int(n)
        finally:
            db.close()
