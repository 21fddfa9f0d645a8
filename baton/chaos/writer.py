"""The application of the campaign: a writer at the cascade's root that records every
transaction it makes, and its outcome, in the history (what the checker holds the replicas to)."""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

from baton.chaos.history import History


class Writer(threading.Thread):
    """Steady transactions at the root: inserts of new ids, updates that bump ``n``, deletes.
    Each is recorded with its outcome (``ok`` true only once COMMIT returned).

    When the root is lost, the application is held (:meth:`hold`), then pointed at the new
    root (:meth:`move_to`): it reads its rows there again, as an application that failed over
    would, so it never builds on a write that was stranded on the old root."""

    def __init__(self, root_db: Path, history_dir: Path, seed: int, interval: float = 0.02):
        super().__init__(daemon=True, name="chaos-writer")
        self.root_db = root_db
        self.history = History(history_dir, "writer")
        self.rng = random.Random(seed)
        self.interval = interval
        self.halt = threading.Event()
        self.live: dict[int, int] = {}
        self.next_id = 1
        self.acked = 0
        self._lock = threading.Lock()
        self._held = False
        self._target = root_db

    def hold(self) -> None:
        """Stop writing; returns once no write is under way."""
        with self._lock:
            self._held = True

    def move_to(self, root_db: Path) -> None:
        """Write at ``root_db`` from now on (and no longer held)."""
        with self._lock:
            self._target = root_db
            self._held = False

    def run(self) -> None:
        db = sqlite3.connect(self.root_db, timeout=5, isolation_level=None)
        try:
            while not self.halt.wait(self.interval):
                with self._lock:
                    if self._held:
                        continue
                    if self._target != self.root_db:
                        db.close()
                        db = self._reopen(self._target)
                    self._one(db)
        finally:
            db.close()
            self.history.close()

    def _reopen(self, root_db: Path) -> sqlite3.Connection:
        self.root_db = root_db
        db = sqlite3.connect(root_db, timeout=5, isolation_level=None)
        self.live = dict(db.execute("SELECT id, n FROM items WHERE writer = 'w'").fetchall())
        self.history.record("writer-moved", root=str(root_db), live=len(self.live))
        return db

    def _one(self, db: sqlite3.Connection) -> None:
        r = self.rng.random()
        if r < 0.6 or not self.live:
            op, id_, n = "insert", self.next_id, 0
            self.next_id += 1
            sql = "INSERT INTO items VALUES (?, ?, 'w')"
            args: tuple[int, ...] = (id_, n)
        elif r < 0.9:
            op = "update"
            id_ = self.rng.choice(list(self.live))
            n = self.live[id_] + 1
            sql, args = "UPDATE items SET n = ? WHERE id = ?", (n, id_)
        else:
            op = "delete"
            id_ = self.rng.choice(list(self.live))
            n = self.live[id_]
            sql, args = "DELETE FROM items WHERE id = ?", (id_,)
        self.history.record("write", op=op, id=id_, n=n, state="invoke")
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute(sql, args)
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            # Refused before COMMIT returned: SQLite rolled it back, so it did not happen.
            self.history.record("write", op=op, id=id_, n=n, state="fail", error=type(exc).__name__)
            return
        self.acked += 1
        if op == "delete":
            self.live.pop(id_, None)
        else:
            self.live[id_] = n
        self.history.record("write", op=op, id=id_, n=n, state="ok")
