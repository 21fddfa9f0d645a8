"""Watermarks, pulled: a provider reads how far each of its subscribers (and their subtrees)
have applied, and keeps its queue down to the lowest (seed 004's "watermark upwards").

The provider pulls rather than each subscriber writing into the provider's database: a
subscriber process can be paused (SIGSTOP, a VM freeze) at any moment, and a write it had
started on another node's database would hold that database's write lock for as long as the
pause lasts, stopping the provider's own apply. Pulling touches a subscriber's database only
through a read-only connection, which takes no lock a writer waits for; an unreachable or busy
subscriber simply keeps its last mark (retention is held, never released early).
"""

from __future__ import annotations

import logging
import time

from baton.cascade.db import NodeDB, open_node_db
from baton.errors import CascadeError
from baton.logs import describe

log = logging.getLogger("baton.cascade")

#: How often a node service pulls its subscribers' watermarks (retention needs no more).
PULL_INTERVAL = 0.5


def subscriber_mark(location: str, provider: str) -> int | None:
    """The lowest tick the node at ``location`` and its own subscribers have applied, or None
    when it no longer follows ``provider`` (it moved; its entry is the set operations' to
    keep or drop)."""
    with open_node_db(location, readonly=True) as db:
        st = db.state()
        if st.provider != provider:
            return None
        return min([st.position, *db.watermarks().values()])


def pull_watermarks(db: NodeDB) -> dict[str, int]:
    """Refresh the watermark of every live subscriber of ``db``'s node from the subscriber's
    own database; the marks that changed."""
    me = db.state().name
    nodes = db.nodes()
    changed: dict[str, int] = {}
    for name, mark in db.watermarks().items():
        if name not in nodes or nodes[name][1]:
            continue  # not a node (a held entry) or tagged dead: keep what it holds
        try:
            fresh = subscriber_mark(nodes[name][0], me)
        except CascadeError as exc:  # unreachable, busy, not yet created: keep its last mark
            log.debug("watermark not read", extra={"subscriber": name, "error": describe(exc)})
            continue
        if fresh is not None and fresh != mark:
            changed[name] = fresh
    if changed:
        with db.transaction() as cur:
            for name, mark in changed.items():
                db.set_watermark(cur, name, mark)
    return changed


class Every:
    """True at most once per ``interval`` seconds (a cheap throttle for a step loop)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.interval
        return True


__all__ = ["PULL_INTERVAL", "Every", "pull_watermarks", "subscriber_mark"]
