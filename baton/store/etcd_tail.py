"""The change log's tail as the etcd store's watches deliver it (:mod:`baton.store.etcd`).

Every watcher of a store watches the log's keys (``log/``), and etcd sends each new entry, with
its value, to every watch. :class:`LogTail` keeps the last :data:`KEEP` entries that arrived, so
that a watcher woken by an entry reads it from here instead of asking etcd again: a follower
learns of a release one round trip sooner.

It serves a watcher at revision ``r`` only when every entry after ``r`` is bound to arrive on a
live watch: ``r`` is at or above :attr:`LogTail.covered_from`, the counter seen by a complete
read of the log made while a watch was already open. Then the entries after ``r`` it holds, in
a row, are the next changes; none held after ``r`` means none committed yet that a watch has
delivered, and a later one will wake the watcher. Anything else (a watcher behind the tail, a gap,
another incarnation, no live watch, a watch that broke, a log entry deleted that is not older
than the tail: the data was reset) sends the watcher to read etcd as before, which also reports
compaction.

It keeps the newest entry with the etcd revision that wrote it (:attr:`LogTail.newest`): when
that entry is a release, an acquire of the lease can write at once, comparing what the release
left, instead of reading first (:mod:`baton.store.etcd_acquire`).

It also tells whether a lease may have been acquired since a revision (:meth:`acquired_after`):
only an acquisition can bring a lease expiry earlier than the soonest one seen, so a watcher
that saw nothing acquired need not look for due expiries again before that soonest one. An
``acquired`` entry carries the lease's expiry (``x``, microseconds), so a watcher that saw
acquisitions takes the soonest of their expiries from here (:meth:`acquired_expiries`) instead of
looking again.
"""

from __future__ import annotations

import json
import time
from typing import Final

from baton.store.base import ChangeKind
from baton.store.etcd_gateway import JSON, unb64

#: Entries kept (the newest).
KEEP: Final = 4096
#: Seconds the tail answers for after the last complete read: then one read again, a safety
#: net should a watch ever miss an entry without breaking.
TRUST_FOR: Final = 10.0


class LogTail:
    """The newest log entries watches delivered, and what they prove (see the module
    docstring)."""

    def __init__(self) -> None:
        self.entries: dict[int, bytes] = {}
        self.high = 0
        #: Every entry above this revision reaches a live watch (None: not known).
        self.covered_from: int | None = None
        self.incarnation: str | None = None
        #: Highest revision of an ``acquired`` entry delivered.
        self.last_acquired = 0
        self.watches = 0
        #: Bumped by every reset: a read counts only when no reset happened while it ran.
        self.generation = 0
        self.verified_at = 0.0
        #: ``(revision, etcd mod_revision, entry)`` of the newest entry delivered.
        self.newest: tuple[int, int, JSON] | None = None
        #: Expiry (us) of the lease each ``acquired`` entry kept gave, None when it has none.
        self.acquired: dict[int, int | None] = {}
        #: Entries below this revision were dropped (:data:`KEEP`).
        self.dropped_below = 0

    def reset(self) -> None:
        self.entries.clear()
        self.high = 0
        self.newest = None
        self.acquired.clear()
        self.dropped_below = 0
        self.covered_from = None
        self.incarnation = None
        self.generation += 1

    def opened(self) -> None:
        self.watches += 1

    def events(self, log_prefix: str, events: list[JSON] | None) -> None:
        """Events a watch of the log delivered (None: it broke, or etcd cancelled it)."""
        if events is None:
            self.reset()
            return
        for event in events:
            kv = event.get("kv", {})
            key = unb64(kv.get("key")).decode(errors="replace")
            if not key.startswith(log_prefix) or not key[len(log_prefix) :].isdigit():
                continue
            revision = int(key[len(log_prefix) :])
            if event.get("type") == "DELETE":
                self.deleted(revision)
            else:
                self.put(revision, unb64(kv.get("value")), int(kv.get("mod_revision", 0)))

    def closed(self) -> None:
        """A watch ended (stopped or broken): entries in flight to it alone may never arrive,
        so the tail starts over."""
        self.watches -= 1
        self.reset()

    def put(self, revision: int, value: bytes, mod: int = 0) -> None:
        """Entry ``revision`` arrived, written at etcd revision ``mod`` (0: not known)."""
        if revision in self.entries:
            return  # delivered by another watch too
        self.entries[revision] = value
        self.high = max(self.high, revision)
        try:
            entry = json.loads(value)
        except ValueError:
            self.reset()
            return
        if self.newest is None or revision > self.newest[0]:
            self.newest = (revision, mod, entry)
        if entry.get("k") == ChangeKind.ACQUIRED.value:
            self.last_acquired = max(self.last_acquired, revision)
            expiry = entry.get("x")
            self.acquired[revision] = expiry if isinstance(expiry, int) else None
        if len(self.entries) > KEEP:
            for old in sorted(self.entries)[: len(self.entries) - KEEP]:
                del self.entries[old]
                self.acquired.pop(old, None)
                self.dropped_below = max(self.dropped_below, old + 1)

    def deleted(self, revision: int) -> None:
        """A log entry was deleted: a trim of old entries, or the data being reset."""
        lowest = min(self.entries, default=self.high + 1)
        if revision >= lowest or (self.covered_from is not None and revision > self.covered_from):
            self.reset()
        else:
            self.entries.pop(revision, None)

    def read_complete(self, incarnation: str, counter: int, generation: int, live: bool) -> None:
        """A read of the log returned every entry up to ``counter``; it started when the tail
        was at ``generation``, ``live`` if a watch was open then."""
        if not live or generation != self.generation or self.watches <= 0:
            return
        if self.incarnation not in (None, incarnation):
            self.reset()
            return
        self.incarnation = incarnation
        if self.covered_from is None or counter < self.covered_from:
            self.covered_from = counter
        self.high = max(self.high, counter)
        self.verified_at = time.monotonic()

    def trusted(self, incarnation: str) -> bool:
        return (
            self.covered_from is not None
            and self.incarnation == incarnation
            and self.watches > 0
            and time.monotonic() - self.verified_at < TRUST_FOR
        )

    def after(self, incarnation: str, revision: int, limit: int) -> list[tuple[int, bytes]] | None:
        """The entries after ``revision``, in a row, up to ``limit``: [] when none arrived yet,
        None when the tail cannot tell (the caller reads etcd)."""
        if not self.trusted(incarnation) or revision > self.high:
            return None
        assert self.covered_from is not None
        if revision < self.covered_from:
            return None
        out: list[tuple[int, bytes]] = []
        nxt = revision + 1
        while nxt in self.entries and len(out) < limit:
            out.append((nxt, self.entries[nxt]))
            nxt += 1
        if not out and revision < self.high:
            return None  # a gap: entries dropped, or not kept
        return out

    def acquired_expiries(self, incarnation: str, revision: int) -> tuple[int, int | None] | None:
        """The acquisitions delivered after ``revision``: the last one's revision (``revision``
        when none) and the soonest expiry they gave (None when none); None when the tail cannot
        tell (as :meth:`acquired_after`, or an entry dropped or without its expiry).
        Acquisitions not delivered yet come later, and wake the watcher when they do."""
        if not self.acquired_after(incarnation, revision):
            return revision, None
        if not self.trusted(incarnation) or revision < (self.covered_from or 0):
            return None
        if revision + 1 < self.dropped_below:
            return None
        found = [(r, x) for r, x in self.acquired.items() if r > revision]
        if not found or any(x is None for _, x in found):
            return None
        return max(r for r, _ in found), min(x for _, x in found if x is not None)

    def acquired_after(self, incarnation: str, revision: int) -> bool:
        """Whether an acquisition may have been logged after ``revision`` (True when the tail
        cannot tell)."""
        if not self.trusted(incarnation) or revision < (self.covered_from or 0):
            return True
        return self.last_acquired > revision


__all__ = ["KEEP", "TRUST_FOR", "LogTail"]
