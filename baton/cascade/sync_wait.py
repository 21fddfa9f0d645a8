"""Synchronous mode's wait (issue 30, step 3): after a writer committed at the root, find the
first root tick that includes the transaction and wait until K branches applied it.

**Which tick includes a transaction** is what the root's batches already say (see
:mod:`baton.cascade.db.sqlite` and :mod:`baton.cascade.db.postgres`):

- SQLite: an event belongs to the first tick whose ``ev_high`` is at or above its id. A writer
  holds the database's write lock for its whole transaction (``BEGIN IMMEDIATE``), so the
  highest event id it sees just before its commit is at or above its own events' ids
  (:func:`mark`), and no tick made before the commit can reach it.
- PostgreSQL: an event belongs to the first tick made here whose snapshot sees its transaction
  (``pg_visible_in_snapshot``); the writer notes its transaction id before committing.

After the commit, :func:`covering_tick` reads, in one statement, that tick if it was made
already, else the next tick's id (any tick made from then on includes the transaction).

**Waiting** (:func:`wait_confirmed`) holds no lock and no transaction at the root: the commit
is done, the tick is read in autocommit, and the branches are read through read-only
connections, polled with a short interval that grows to :data:`MAX_INTERVAL`. When the tick is
not made within ``force_after`` (the root's ticker makes one within its ``max_lag``, 50 ms by
default, when it runs), the writer makes it as the ticker would (:func:`baton.cascade.ticker
.tick_once`, which checks under the root's write lock that the node is still the root).

A branch counts when it is a branch of this set whose position (its last applied tick) is at
or past the tick and whose node list does not tag the writer's root dead: after a failover the
new root's ticks reuse the ids after the fork, and a position past the tick on the new line
says nothing of a transaction of the old one.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from baton.cascade import sync_mode, ticker
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.errors import CascadeError, SyncTimeout

#: How long a writer waits for K branches before it raises SyncTimeout (seconds).
SYNC_TIMEOUT = 5.0
#: How long the writer leaves the root's ticker to make the tick before making it itself.
FORCE_AFTER = 0.005
#: How often the writer makes the tick again while it is still missing.
REFORCE = 0.25
#: The first and the longest pause between two reads of the branches' positions.
FIRST_INTERVAL = 0.002
MAX_INTERVAL = 0.02


@dataclass(frozen=True, slots=True)
class Mark:
    """What tells a transaction's tick, read in the transaction just before its commit: the
    highest event id it sees (SQLite) or its transaction id (PostgreSQL)."""

    ev_high: int | None = None
    txid: int | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    """A commit confirmed in sync mode."""

    #: The first root tick that includes the transaction.
    tick: int
    #: The branches at or past it when the writer stopped waiting (at least K).
    branches: tuple[str, ...]
    #: Seconds from the commit to the confirmation.
    waited: float


def mark(conn: Any, changes_before: int = -1) -> Mark | None:
    """Read in the writer's open transaction on ``conn`` (a :mod:`sqlite3` or psycopg
    connection to the root), just before its commit. None: the transaction wrote nothing
    (PostgreSQL: no transaction id was assigned; SQLite: the connection's
    ``total_changes`` is still ``changes_before``), so there is nothing to wait for."""
    if isinstance(conn, sqlite3.Connection):
        if conn.total_changes == changes_before:
            return None
        row = conn.execute("SELECT coalesce(max(ev_id), 0) FROM baton_event").fetchone()
        return Mark(ev_high=int(row[0]))
    row = conn.execute("SELECT pg_current_xact_id_if_assigned()::text::bigint").fetchone()
    return None if row[0] is None else Mark(txid=int(row[0]))


def covering_tick(conn: Any, m: Mark) -> int:
    """After the commit: the first root tick that includes the transaction ``m`` marks, or,
    when none does yet, the id the next tick will have. Read in one statement and, on
    PostgreSQL, its transaction ended at once (no transaction stays open at the root)."""
    if isinstance(conn, sqlite3.Connection):
        row = conn.execute(
            "SELECT coalesce((SELECT min(tick_id) FROM baton_tick WHERE ev_high >= ?), "
            "(SELECT coalesce(max(tick_id), 0) + 1 FROM baton_tick))",
            (m.ev_high,),
        ).fetchone()
        return int(row[0])
    try:
        row = conn.execute(
            "SELECT coalesce((SELECT min(tick_id) FROM baton_tick WHERE tick_local "
            "AND snapshot IS NOT NULL "
            "AND pg_visible_in_snapshot(%s::text::xid8, snapshot::pg_snapshot)), "
            "(SELECT coalesce(max(tick_id), 0) + 1 FROM baton_tick))",
            (m.txid,),
        ).fetchone()
    finally:
        conn.rollback()  # a read: ends the transaction the driver opened for it
    return int(row[0])


@dataclass(frozen=True, slots=True)
class _Branch:
    name: str
    location: str


def _branches(root_location: str) -> tuple[list[_Branch], str]:
    """The set's members but the root, from the root's node list, and the set's name."""
    with open_node_db(root_location, readonly=True) as db:
        st = db.state()
        nodes = db.nodes()
    found = [
        _Branch(name, loc)
        for name, (loc, dead) in sorted(nodes.items())
        if not dead and name != st.name
    ]
    return found, st.set_name


def _holds(b: _Branch, set_name: str, root: str, tick: int) -> bool | None:
    """Whether branch ``b`` is at or past ``tick`` on ``root``'s line of ticks; None when it
    is not a branch of the set (a leaf, another set now, unreachable)."""
    try:
        with open_node_db(b.location, readonly=True) as db:
            st = db.state()
            if st.set_name != set_name or st.role is not Role.BRANCH:
                return None
            if db.nodes().get(root, ("", False))[1]:
                return False  # it tags the root dead: a failover began a new line of ticks
            return st.position >= tick
    except (CascadeError, OSError):
        return None


def _force_tick(root_location: str) -> None:
    """Make the root's next tick now if events wait for one (as its ticker would)."""
    try:
        with open_node_db(root_location) as db:
            ticker.tick_once(db, ticker.TickerConfig(max_lag=0.0), time.time())
    except (CascadeError, OSError):
        pass  # busy, gone, or no longer the root: the ticker, or the timeout, decides


def wait_confirmed(
    root: str,
    root_location: str,
    tick: int,
    k: int,
    *,
    timeout: float = SYNC_TIMEOUT,
    force_after: float = FORCE_AFTER,
    recorder: sync_mode.AckRecorder | None = None,
) -> Ack:
    """Wait until ``k`` branches of ``root``'s set are at or past ``tick`` (see the module
    docstring); then have ``recorder`` record ``tick`` as acknowledged on the live branches
    not there yet (see :mod:`baton.cascade.sync_mode`). Raises
    :class:`~baton.errors.SyncTimeout` after ``timeout`` seconds: the transaction is committed
    at the root, only not confirmed."""
    start = time.monotonic()
    deadline = start + timeout
    branches, set_name = _branches(root_location)
    forced_at: float | None = None
    interval = FIRST_INTERVAL
    while True:
        held = {b.name: _holds(b, set_name, root, tick) for b in branches}
        confirmed = tuple(name for name, yes in held.items() if yes)
        if len(confirmed) >= k:
            behind = [b.location for b in branches if held[b.name] is False]
            if behind and recorder is not None:
                recorder.submit(behind, tick)
            return Ack(tick, confirmed, time.monotonic() - start)
        now = time.monotonic()
        if now >= deadline:
            raise SyncTimeout(
                f"committed at root {root} (in its tick {tick}), but {len(confirmed)} of {k} "
                f"branch(es) confirmed it within {timeout:g} s "
                f"(confirmed: {', '.join(confirmed) or 'none'}): the transaction is not lost "
                "and not rolled back; it reaches the branches when they apply that tick (see "
                "'baton cascade status' for their workers)",
                root,
                tick,
                k,
                confirmed,
            )
        force_at = start + force_after if forced_at is None else forced_at + REFORCE
        if now >= force_at:
            # Again now and then: a forced tick can lose to a busy root, and the ticker may
            # not run (a root served by no worker).
            forced_at = now
            _force_tick(root_location)
            interval = FIRST_INTERVAL  # the branches apply it soon: look again soon
            continue
        time.sleep(max(0.0, min(interval, deadline - now, force_at - now)))
        interval = min(interval * 2, MAX_INTERVAL)


__all__ = [
    "FORCE_AFTER",
    "SYNC_TIMEOUT",
    "Ack",
    "Mark",
    "covering_tick",
    "mark",
    "wait_confirmed",
]
