"""A fenced resource: an append-only log that refuses writes with an epoch lower than the
highest it has accepted. It stands for anything a leader changes (a table, a queue, a file) and
lets tests prove that a deposed leader never damaged it.

It is an SQLite file, so many processes on one host can write to it and a test can read it after
they are gone.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    epoch: int
    writer: str
    at: float
    """``time.monotonic()`` of the writing process (one clock for the whole host)."""


class FencedLog:
    """Append ``(epoch, writer)``; refused (returns False) if a higher epoch was accepted."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                "epoch INTEGER NOT NULL, writer TEXT NOT NULL, at REAL NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS refused (epoch INTEGER NOT NULL, writer TEXT NOT "
                "NULL, at REAL NOT NULL)"
            )

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def append(self, epoch: int, writer: str) -> bool:
        """Write one entry if ``epoch`` is not lower than every accepted one."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            (top,) = db.execute("SELECT coalesce(max(epoch), 0) FROM log").fetchone()
            now = time.monotonic()
            if epoch < top:
                db.execute("INSERT INTO refused VALUES (?, ?, ?)", (epoch, writer, now))
                db.execute("COMMIT")
                return False
            db.execute("INSERT INTO log (epoch, writer, at) VALUES (?, ?, ?)", (epoch, writer, now))
            db.execute("COMMIT")
            return True
        finally:
            db.close()

    def entries(self) -> list[Entry]:
        with self._connect() as db:
            rows = db.execute("SELECT seq, epoch, writer, at FROM log ORDER BY seq").fetchall()
        return [Entry(*row) for row in rows]

    def refused(self) -> list[tuple[int, str, float]]:
        with self._connect() as db:
            return [tuple(r) for r in db.execute("SELECT epoch, writer, at FROM refused")]

    def check(self) -> None:
        """Assert the invariant: accepted epochs never decrease, and two writers never share
        an epoch."""
        entries = self.entries()
        owner: dict[int, str] = {}
        for prev, cur in itertools.pairwise(entries):
            assert cur.epoch >= prev.epoch, f"epoch went down: {prev} then {cur}"
        for e in entries:
            assert owner.setdefault(e.epoch, e.writer) == e.writer, f"epoch {e.epoch} shared"
