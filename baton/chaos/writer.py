"""The application of the campaign: a writer at the cascade's root that records every
transaction it makes, and its outcome, in the history (what the checker holds the replicas to).

In synchronous mode (the campaign's ``--sync K``) it writes through
:class:`~baton.cascade.writer.RootWriter`, whose commit returns only once K branches hold the
transaction: ``ok`` then means confirmed, and a commit that was not confirmed in time
(:class:`~baton.errors.SyncTimeout`: committed at the root, perhaps lost with it) is recorded
``unknown``, neither acknowledged nor failed."""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path
from typing import Any

from baton.cascade.writer import RootWriter
from baton.chaos.history import History
from baton.errors import CascadeError, SyncTimeout


class Writer(threading.Thread):
    """Steady transactions at the root: inserts of new ids, updates that bump ``n``, deletes.
    Each is recorded with its outcome (``ok`` true only once COMMIT returned).

    When the root is lost, the application is held (:meth:`hold`), then pointed at the new
    root (:meth:`move_to`): it reads its rows there again, as an application that failed over
    would, so it never builds on a write that was stranded on the old root."""

    def __init__(
        self,
        root_db: Path,
        history_dir: Path,
        seed: int,
        interval: float = 0.02,
        *,
        sync: int = 0,
        set_name: str = "",
    ) -> None:
        """``sync`` > 0: through a :class:`RootWriter` of set ``set_name`` that waits for
        ``sync`` branches (see the module docstring)."""
        super().__init__(daemon=True, name="chaos-writer")
        self.sync = sync
        self.set_name = set_name
        self.root_db = root_db
        self.history = History(history_dir, "writer")
        self.rng = random.Random(seed)
        self.interval = interval
        self.halt = threading.Event()
        self.live: dict[int, int] = {}
        self.next_id = 1
        self.acked = 0
        #: Writes committed at a root: acknowledged, or (sync mode) not confirmed in time.
        self.committed = 0
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
        rw = self._root_writer()
        try:
            while not self.halt.wait(self.interval):
                with self._lock:
                    if self._held:
                        continue
                    if self._target != self.root_db:
                        db.close()
                        db = self._reopen(self._target)
                        if rw is not None:
                            rw.close()
                            rw = self._root_writer()
                    self._one(db, rw)
        finally:
            db.close()
            if rw is not None:
                rw.close()
            self.history.close()

    def _root_writer(self) -> RootWriter | None:
        """Sync mode's writer, at the root the harness names (it re-resolves only when a write
        is refused: the harness moves it, as it moves the plain one)."""
        if self.sync <= 0:
            return None
        return RootWriter(self.set_name, f"sqlite://{self.root_db}", recheck=None, sync=self.sync)

    def _reopen(self, root_db: Path) -> sqlite3.Connection:
        self.root_db = root_db
        db = sqlite3.connect(root_db, timeout=5, isolation_level=None)
        self.live = dict(db.execute("SELECT id, n FROM items WHERE writer = 'w'").fetchall())
        self.history.record("writer-moved", root=str(root_db), live=len(self.live))
        return db

    def _commit(self, db: sqlite3.Connection, rw: RootWriter | None, sql: str, args: Any) -> None:
        """One transaction; raises when it did not happen (sqlite3 or cascade errors) and
        :class:`SyncTimeout` when it happened at the root but was not confirmed."""
        if rw is not None:
            with rw.transaction() as cur:
                cur.execute(sql, args)
            return
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute(sql, args)
            db.execute("COMMIT")
        except sqlite3.Error:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _one(self, db: sqlite3.Connection, rw: RootWriter | None = None) -> None:
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
            self._commit(db, rw, sql, args)
        except SyncTimeout:
            # Committed at the root, not confirmed: it may be lost with the root, and no one
            # was told it was safe. The writer builds on it (the root has it).
            self.history.record("write", op=op, id=id_, n=n, state="unknown")
            self.committed += 1
            self._done(op, id_, n)
            return
        except (sqlite3.Error, CascadeError) as exc:
            # Refused before COMMIT returned: rolled back (or refused by a node that is no
            # longer the root: nothing written), so it did not happen.
            self.history.record("write", op=op, id=id_, n=n, state="fail", error=type(exc).__name__)
            return
        self.acked += 1
        self.committed += 1
        self._done(op, id_, n)
        self.history.record("write", op=op, id=id_, n=n, state="ok")

    def _done(self, op: str, id_: int, n: int) -> None:
        if op == "delete":
            self.live.pop(id_, None)
        else:
            self.live[id_] = n
