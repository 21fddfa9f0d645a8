"""A table copy's progress, kept in the copying node's database: the worker's Spark copy
writes how many of its tasks are done (at most every :data:`EVERY` seconds, and at the end),
``cascade status`` shows it beside the table (``items (copying 3/8 tasks)``), and ``resync``
draws it as a progress bar while it waits. One mark per table being copied; the worker
clears it when the copy ends, whatever the outcome."""

from __future__ import annotations

import json
import time

from baton.cascade.db import NodeDB, open_node_db

#: The node-local key of a table's mark: ``copy:<table>``.
PREFIX = "copy:"
#: Seconds between two writes of the progress into the node's database.
EVERY = 1.0


class CopyProgress:
    """The progress callback of ``table``'s copy to the node at ``location`` by the worker of
    ``epoch``: (tasks done, tasks in all). Fenced like the copy itself: once a newer worker
    has applied at the node, a stale one's progress (and its clearing) writes nothing."""

    def __init__(self, location: str, table: str, epoch: int = 0) -> None:
        self.location, self.table, self.epoch = location, table, epoch
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last < EVERY and done < total:
            return
        self._last = now
        self._write(json.dumps({"done": done, "total": total, "at": time.time()}))

    def clear(self) -> None:
        """The copy ended (copied, refused or failed): no progress to show."""
        self._write(None)

    def _write(self, body: str | None) -> None:
        with open_node_db(self.location) as db, db.transaction() as cur:
            if db.state().epoch > self.epoch:
                return  # a newer worker copies here now: its progress, not this one's
            db.set_local(cur, PREFIX + self.table, body)


def of(db: NodeDB, table: str) -> tuple[int, int] | None:
    """(tasks done, tasks in all) of ``table``'s copy running at ``db``'s node (None: none
    reported)."""
    raw = db.get_local(PREFIX + table)
    if raw is None:
        return None
    try:
        body = json.loads(raw)
        return int(body["done"]), int(body["total"])
    except (ValueError, KeyError, TypeError):
        return None  # not a mark baton wrote: nothing to show


__all__ = ["EVERY", "PREFIX", "CopyProgress", "of"]
