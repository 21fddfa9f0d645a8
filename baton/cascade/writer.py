"""Writers always find the root: a connection to a set's current root (:func:`connect_root`)
and a writer that follows the root when a switchover or failover moves it
(:class:`RootWriter`).

A node that is not the root refuses a direct write of a replicated table (the guard triggers
of :meth:`baton.cascade.db.NodeDB.guard`): a write there would never be captured. A writer
still connected to a demoted root therefore gets an error, never a lost write. The writer
tells that refusal from any other error by its code alone (SQLite: a trigger's ``RAISE``,
``SQLITE_CONSTRAINT_TRIGGER``; PostgreSQL: SQLSTATE :data:`~baton.cascade.db.base.DENY_SQLSTATE`),
finds the root again and, in :meth:`RootWriter.run`, runs the transaction once more there.

::

    from baton.cascade.writer import RootWriter

    with RootWriter("S", via=["sqlite:///srv/s1.db", "sqlite:///srv/s2.db"]) as writer:
        writer.run(lambda cur: cur.execute("UPDATE accounts SET balance = 0 WHERE id = 1"))

**Synchronous mode** (``baton cascade sync SET K``, see :mod:`baton.cascade.sync_mode`): a
:class:`RootWriter`'s commit returns only once K branches hold the transaction (their position
at or past the first root tick that includes it, :mod:`baton.cascade.sync_wait`), or raises
:class:`~baton.errors.SyncTimeout` after ``sync_timeout`` seconds, the transaction committed
at the root but not yet confirmed. :func:`connect_root`'s plain connection commits as the
driver does, without that wait.

Connections are the drivers' own (:mod:`sqlite3`, psycopg 3): a location's password goes to
the driver and nowhere else (errors show it as ``***``).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, NoReturn, Self, TypeVar

from baton.cascade import sync_mode
from baton.cascade.db.base import DENY_SQLSTATE
from baton.cascade.root import Root, RootState, locate_root
from baton.cascade.sync_wait import SYNC_TIMEOUT, Ack, Mark, covering_tick, mark, wait_confirmed
from baton.errors import (
    CascadeError,
    CascadeInputError,
    NodeUnreachable,
    NoWritableRoot,
    Refused,
    RootMoved,
    SyncTimeout,
    redact_url,
)
from baton.store import sqlite_path

T = TypeVar("T")

#: How long a writer trusts the root it found before it looks again (seconds), so that a
#: writer connected to a root that a failover replaced but that still runs moves on.
RECHECK = 10.0


def refused_here(exc: BaseException) -> bool:
    """Whether ``exc`` (a driver's error) is the guard triggers refusing a write at a node that
    does not capture the table: by its code, never its message."""
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_CONSTRAINT_TRIGGER
    # Any driver's error with a SQLSTATE (psycopg's carry ``sqlstate``), without importing
    # psycopg in a process that writes to SQLite only.
    return getattr(exc, "sqlstate", None) == DENY_SQLSTATE


def _one_line(exc: BaseException) -> str:
    """A driver's message on one line, passwords in URLs shown as ``***``."""
    return redact_url(" ".join(str(exc).split()))


def _driver_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from the database driver (the connection may be unusable)."""
    return isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith("psycopg")


def connect(location: str, timeout: float = 5.0) -> Any:
    """A driver connection to the node database at ``location`` (``sqlite:///path`` or
    ``postgresql://...``): :class:`sqlite3.Connection` waiting up to ``timeout`` seconds for
    a lock, or ``psycopg.Connection``."""
    if location.startswith("sqlite:"):
        try:
            return sqlite3.connect(sqlite_path(location), timeout=timeout)
        except sqlite3.Error as exc:
            raise NodeUnreachable(f"{location}: cannot open: {_one_line(exc)}") from exc
    if location.startswith(("postgresql:", "postgres:")):
        import psycopg

        try:
            return psycopg.connect(location, connect_timeout=max(1, round(timeout)))
        except psycopg.Error as exc:
            # The DSN's password stays with the driver: the message shows it as ***.
            raise NodeUnreachable(
                f"{redact_url(location)}: cannot connect: {_one_line(exc)}"
            ) from exc
    raise CascadeInputError(
        f"bad node location {redact_url(location)!r}: use sqlite:///path or postgresql://..."
    )


def _required(root: Root) -> Root:
    """``root`` when writers can write there; else the error that says why."""
    if root.state is RootState.NO_SET:
        raise CascadeInputError(root.reason)
    if not root.writable:
        raise NoWritableRoot(root.reason)
    return root


def connect_root(set_name: str, via: str | Sequence[str], timeout: float = 5.0) -> Any:
    """A driver connection (``sqlite3`` or psycopg 3) to the current root of ``set_name``,
    found through the members at ``via`` (one location or several, tried in order).

    Raises :class:`~baton.errors.NoWritableRoot` when the set has no root that takes writes
    now (a failover or switchover under way), :class:`~baton.errors.CascadeInputError` when
    the members belong to another set, :class:`~baton.errors.NodeUnreachable` when none can be
    reached. Writing through it after the root moved is refused by the old root (see the
    module docstring); :class:`RootWriter` follows the root instead.

    ::

        conn = connect_root("S", "sqlite:///srv/s2.db")
        with conn:
            conn.execute("INSERT INTO accounts VALUES (1, 100, 'a', 0)")
    """
    root = _required(locate_root(set_name, via))
    assert root.location is not None
    return connect(root.location, timeout)


class RootWriter:
    """Writes to the current root of ``set_name``, following it when it moves.

    :meth:`transaction` is one transaction at the root: committed when the block ends, rolled
    back when it raises. When the database refuses it because the node is no longer the root,
    the writer finds the root again and raises :class:`~baton.errors.RootMoved` (nothing was
    written): the next transaction goes to the new root. A ``with`` block cannot run its body
    twice, so :meth:`run` is the one that retries: it runs a function in a transaction, and
    once more at the new root when the root moved.

    ::

        with RootWriter("S", via="sqlite:///srv/s1.db") as writer:
            with writer.transaction() as cur:
                cur.execute("INSERT INTO accounts VALUES (2, 5, 'b', 0)")
            writer.run(lambda cur: cur.execute("DELETE FROM accounts WHERE id = 2"))

    Not thread-safe: one writer per thread. ``recheck``: seconds after which the root is looked
    up again before a transaction (a failover's new root is found even while the old one still
    runs); None: only when a write is refused or the connection fails.

    In synchronous mode (the set's ``sync = K``, read with the root and again at each
    ``recheck``; ``sync`` given here overrides it) a transaction that wrote something returns
    from its commit only once K branches hold it, or raises :class:`~baton.errors.SyncTimeout`
    after ``sync_timeout`` seconds (committed at the root, not confirmed). :attr:`last_ack`
    says which tick and branches confirmed the last commit.
    """

    def __init__(
        self,
        set_name: str,
        via: str | Sequence[str],
        timeout: float = 5.0,
        recheck: float | None = RECHECK,
        *,
        sync: int | None = None,
        sync_timeout: float = SYNC_TIMEOUT,
    ) -> None:
        if sync is not None and sync < 0:
            raise CascadeInputError(f"sync {sync}: give a number of branches, 0 or more")
        self.set_name = set_name
        self._via = [via] if isinstance(via, str) else list(via)
        self._timeout = timeout
        self._recheck = recheck
        self._root: Root | None = None
        self._found_at = 0.0
        self._conn: Any = None
        self._sync_given = sync
        self._sync = 0 if sync is None else sync
        self._sync_timeout = sync_timeout
        self._recorder = sync_mode.AckRecorder()
        #: The confirmation of the last commit in sync mode (None: none yet, or asynchronous).
        self.last_ack: Ack | None = None

    # -- the root ------------------------------------------------------------------------------

    def locate(self) -> Root:
        """Look for the root now (through the locations given, then every member last seen):
        what was found, writable or not."""
        known = list(self._via)
        if self._root is not None:
            known += [m for m in self._root.members if m not in known]
        found = locate_root(self.set_name, known)
        if found.state is not RootState.NO_SET:
            self._root, self._found_at = found, time.monotonic()
            if self._sync_given is None:
                self._sync = sync_mode.sync_at(found.members)
        return found

    @property
    def sync(self) -> int:
        """How many branches a commit waits for (0: asynchronous), as last read."""
        return self._sync

    @property
    def root(self) -> Root:
        """The root this writer writes to (found on first use)."""
        return self._root if self._root is not None else self.locate()

    def connection(self) -> Any:
        """The driver connection to the current root (opened, or re-opened after the root
        moved, on demand)."""
        stale = self._recheck is not None and time.monotonic() - self._found_at > self._recheck
        if self._conn is not None and stale:
            before = self._root
            now = self.locate()
            if before is None or (now.node, now.location) != (before.node, before.location):
                self._drop()
        if self._conn is None:
            root = _required(self.locate())
            assert root.location is not None
            self._conn = connect(root.location, self._timeout)
        return self._conn

    # -- writing -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """A cursor in one transaction at the root (see the class docstring)."""
        conn = self.connection()
        cur = conn.cursor()
        marked: Mark | None = None
        changes = -1
        try:
            if isinstance(conn, sqlite3.Connection):
                cur.execute("BEGIN IMMEDIATE")  # the write lock now, not at the first write
                changes = conn.total_changes
            yield cur
            if self._sync > 0:
                marked = mark(conn, changes)
            conn.commit()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                conn.rollback()
            if refused_here(exc):
                raise self._moved() from exc
            if _driver_error(exc):
                self._drop()  # perhaps the root is gone: the next transaction looks again
            raise
        finally:
            with contextlib.suppress(Exception):
                cur.close()
        if marked is not None:
            self._confirm(conn, marked)

    def _confirm(self, conn: Any, marked: Mark) -> None:
        """Sync mode, after the commit: wait until K branches hold the transaction. The
        commit is done; nothing here holds a lock or a transaction at the root."""
        root = self.root
        assert root.node is not None and root.location is not None
        tick = 0
        try:
            tick = covering_tick(conn, marked)
            self.last_ack = wait_confirmed(
                root.node,
                root.location,
                tick,
                self._sync,
                timeout=self._sync_timeout,
                recorder=self._recorder,
            )
        except Exception as exc:
            lost_sight = isinstance(exc, CascadeError) or _driver_error(exc)
            if isinstance(exc, SyncTimeout) or not lost_sight:
                raise
            self._unconfirmed(root.node, tick, exc)

    def _unconfirmed(self, root: str, tick: int, exc: BaseException) -> NoReturn:
        """After the commit, the root or the branches could not be read: the commit must not
        look failed. The connection is dropped (the next transaction looks for the root)."""
        self._drop()
        at = f" (in its tick {tick})" if tick else ""
        raise SyncTimeout(
            f"committed at root {root}{at}, but it could not be confirmed on {self._sync} "
            f"branch(es): {_one_line(exc)}; the transaction is not lost and not rolled back",
            root,
            tick,
            self._sync,
            (),
        ) from exc

    def run(self, fn: Callable[[Any], T]) -> T:
        """``fn(cursor)`` in one transaction at the root; when the root moved (the old one
        refused the write, nothing was written), once more at the new root. Its result."""
        try:
            with self.transaction() as cur:
                return fn(cur)
        except RootMoved:
            with self.transaction() as cur:
                return fn(cur)

    def _moved(self) -> Refused:
        """The error for a write refused at ``self._root``: the root moved (and where), or no
        root takes writes now."""
        old = self._root
        self._drop()
        self._found_at = 0.0
        now = self.locate()
        name = old.node if old is not None and old.node else "?"
        if not now.writable:
            return NoWritableRoot(f"{name} refused the write (nothing was written); {now.reason}")
        if now.node == name:
            # Refused by the root itself: a table it does not capture (or a guard left behind),
            # not a move. Running it again would be refused again.
            return Refused(
                f"{name} refused the write, but it is the root of set {self.set_name}: is the "
                "table replicated there? (see 'baton cascade tables'; nothing was written)"
            )
        return RootMoved(
            f"{name} is no longer the root of set {self.set_name}: it refused the write "
            f"(nothing was written); the root is {now.node}: run the transaction again",
            name,
            now.node,
        )

    # -- closing -------------------------------------------------------------------------------

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close the connection; in sync mode, first finish recording the acknowledged ticks
        on the branches that were behind (up to 5 s)."""
        self._drop()
        self._recorder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["RECHECK", "RootWriter", "connect", "connect_root", "refused_here"]
