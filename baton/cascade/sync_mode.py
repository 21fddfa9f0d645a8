"""Synchronous mode's per-set setting (``baton cascade sync SET K``) and the record of the
highest tick a writer was acknowledged at.

**K** is how many branches (members that carry the queue and could be promoted) must hold a
transaction before :class:`~baton.cascade.writer.RootWriter` reports its commit; 0 (the
default) is asynchronous replication. The setting lives where automatic failover's switch
lives, and for the same reasons (see :mod:`baton.cascade.member_setting`): in the members'
node databases, local key ``sync`` = ``{"k": K, "at": wall time}``, the newest copy among the
reachable members not tagged dead winning.

**The acknowledged tick.** When a writer's commit returns in sync mode, K branches are at or
past tick T (the first root tick that includes the transaction). The writer then records T
(local key ``sync_acked``, raised, never lowered) on every reachable live branch that is *not*
yet at T, from a thread of its own (:class:`AckRecorder`) right after the commit returned.
The branches that are at T need no record: their position says it. A failover reads the
highest record among the members it reaches (:func:`acked_of`) and refuses to promote when
no live branch is at or past it (:func:`baton.cascade.auto_failover.decide_failover`,
:func:`baton.cascade.takeover.failover`).

**The guarantee**: with K branches confirming every acknowledged commit, the set keeps every
acknowledged transaction through the loss of the root plus K - 1 branches: one of the K
confirming branches survives, and a failover promotes the live branch with the highest tick
(catching it up from the furthest one), which is at or past it. Losing more than that is
refused, not silently accepted, whenever a surviving branch holds the record (it does when it
was reachable just after the commit).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.member_setting import MemberSetting, check_set_name
from baton.cascade.model import Role
from baton.cascade.set_ops import CascadeSet, seen_of
from baton.errors import CascadeError, CascadeInputError, Refused

_KEY = "sync"
ACKED = "sync_acked"


def _k(value: Any) -> int | None:
    k = int(value)
    return k if k >= 0 else None


#: K: how many branches confirm a commit (0: asynchronous).
SYNC: MemberSetting[int] = MemberSetting(_KEY, "k", _k, 0)


def sync_at(locations: Iterable[str]) -> int:
    """K for the members at ``locations``: the newest copy among those reachable (0 when none
    has one). The caller passes the members not tagged dead."""
    return SYNC.newest_at(locations)


def sync_of(c: CascadeSet) -> int:
    """K for the set at ``c`` (0: asynchronous)."""
    return SYNC.of(c)


def branches(c: CascadeSet) -> list[str]:
    """The set's branches a failover could promote: reachable members not tagged dead that
    carry the queue and follow a provider (not the root)."""
    out = []
    for name, (_, dead) in sorted(c.nodes.items()):
        if dead:
            continue
        st = seen_of(c, name).state
        if st is not None and st.provider is not None and st.role is Role.BRANCH:
            out.append(name)
    return out


def set_sync(c: CascadeSet, set_name: str, k: int) -> list[str]:
    """Set K for the set at ``c``; the members not reached (they keep their old copy, which
    the newer one outweighs). Bad input changes nothing: a set of another name or a negative
    K (:class:`CascadeInputError`), K larger than the set's branches (:class:`Refused`: no
    commit could ever be confirmed)."""
    check_set_name(c, set_name)
    if k < 0:
        raise CascadeInputError(f"sync {k}: give a number of branches, 0 (asynchronous) or more")
    found = branches(c)
    if k > len(found):
        raise Refused(
            f"set {set_name} has {len(found)} branch(es) that could confirm a commit "
            f"({', '.join(found) or 'none'}), fewer than sync {k}: every commit would time out; "
            "add branches with create-branch first, or give a smaller K"
        )
    return SYNC.write(c, k)


def read_acked(db: NodeDB) -> int:
    """The highest acknowledged tick recorded at this member (0: none)."""
    try:
        return int(db.get_local(ACKED) or 0)
    except ValueError:
        return 0


def record_acked(location: str, tick: int) -> bool:
    """Raise the acknowledged tick recorded at the member at ``location`` to ``tick`` (never
    lower it); whether it was reached."""
    try:
        with open_node_db(location) as db:
            if read_acked(db) >= tick:
                return True
            with db.transaction() as cur:
                if read_acked(db) < tick:
                    db.set_local(cur, ACKED, str(tick))
    except (CascadeError, OSError):
        return False
    return True


def forget_above(c: CascadeSet, fork: int) -> None:
    """After a failover that forked the set at ``fork``: lower every record above it to it.
    Ticks after the fork are new ones; a record of an old one (the acknowledged transactions
    a failover with ``accept_loss`` gave up) would refuse, or allow, the next failover for the
    wrong reason."""

    def lower(db: NodeDB) -> None:
        if read_acked(db) > fork:
            with db.transaction() as cur:
                db.set_local(cur, ACKED, str(fork))

    c._for_each_live(lower)


class AckRecorder:
    """Records acknowledged ticks on the branches that were behind them, in a thread of its
    own: a branch whose database is locked (its worker paused in the middle of an apply) must
    never delay a writer's commit. Ticks waiting for the same branch are merged (the highest
    is written). :meth:`close` waits for what is pending."""

    def __init__(self) -> None:
        self._pending: dict[str, int] = {}
        self._busy = False
        self._closed = False
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None

    def submit(self, locations: Iterable[str], tick: int) -> None:
        """Record ``tick`` at every member at ``locations`` (soon, not before returning)."""
        with self._cv:
            for location in locations:
                self._pending[location] = max(self._pending.get(location, 0), tick)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="baton-sync-acked"
                )
                self._thread.start()
            self._cv.notify_all()

    def _run(self) -> None:
        while True:
            with self._cv:
                self._busy = False
                self._cv.notify_all()
                while not self._pending and not self._closed:
                    self._cv.wait()
                if not self._pending:
                    return
                batch, self._pending, self._busy = self._pending, {}, True
            for location, tick in batch.items():
                record_acked(location, tick)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is pending (waiting up to ``timeout`` seconds), then stop the thread."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        with self._cv:
            if thread is None or not thread.is_alive():
                # Reusable: a writer closed and used again records again.
                self._thread, self._closed = None, False


def acked_of(c: CascadeSet, exclude: str | None = None) -> int:
    """The highest acknowledged tick recorded among the reachable members not tagged dead
    (``exclude``: the dead root, whatever it still says); 0: none."""
    high = 0
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == exclude:
            continue
        try:
            with open_node_db(loc, readonly=True) as db:
                high = max(high, read_acked(db))
        except (CascadeError, OSError):
            continue
    return high


__all__ = [
    "ACKED",
    "SYNC",
    "AckRecorder",
    "acked_of",
    "branches",
    "forget_above",
    "read_acked",
    "record_acked",
    "set_sync",
    "sync_at",
    "sync_of",
]
