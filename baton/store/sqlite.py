"""SQLite backend: the embedded default. One file, many processes on one host.

Each store object owns one ``sqlite3`` connection driven by a single-thread executor: every
operation is one synchronous function run there, so a transaction is never interleaved with
another task's statements and the event loop never blocks on disk. Writers use
``BEGIN IMMEDIATE`` (WAL mode), which serialises them across processes: revisions are therefore
assigned and committed in the same order, so a watcher reading ``rev > last`` misses nothing.

The store clock is the host clock (every process of an SQLite store shares one host). Watchers
poll ``PRAGMA data_version`` on their own connection every few milliseconds: it changes when any
other connection commits and costs no table read, so "polling" here is a cheap header check.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import sqlite3
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from baton.errors import FeedCompacted, StoreTimeout, StoreUnavailable
from baton.store.base import (
    Capabilities,
    Change,
    ChangeKind,
    Condition,
    FeedListener,
    Lapse,
    Lease,
    Op,
    Position,
    Put,
    Record,
    Store,
    TxnResult,
    VersionIs,
    bulk_allocation,
    check_floors,
    check_name,
    check_names,
    check_ops,
    check_same_holder,
    check_ttl,
    make_position,
)

T = TypeVar("T")
US = 1_000_000
#: How many changes the log keeps; older ones are trimmed (watchers behind them re-list).
KEEP_CHANGES = 100_000
#: How often a watcher checks ``PRAGMA data_version``.
POLL_INTERVAL = 0.005
BUSY_TIMEOUT_MS = 10_000
#: Primary result codes of a database another connection kept locked past the busy timeout.
_LOCKED = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def translate(url: str, exc: sqlite3.Error) -> StoreTimeout | StoreUnavailable:
    """``exc`` as the store's error, by its primary result code (``sqlite_errorcode & 0xFF``):
    :class:`StoreTimeout` when the database stayed locked past the busy timeout, else
    :class:`StoreUnavailable`."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and (code & 0xFF) in _LOCKED:
        return StoreTimeout(f"{url} stayed locked: {exc}")
    return StoreUnavailable(f"{url}: {exc}")


SCHEMA = """
CREATE TABLE IF NOT EXISTS {p}meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {p}leases (
    name TEXT PRIMARY KEY, holder TEXT, epoch INTEGER NOT NULL, ttl_us INTEGER NOT NULL,
    exp_us INTEGER NOT NULL, successor TEXT, reserved_until_us INTEGER);
CREATE INDEX IF NOT EXISTS {p}leases_held ON {p}leases (exp_us) WHERE holder IS NOT NULL;
CREATE TABLE IF NOT EXISTS {p}records (
    key TEXT PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS {p}counters (name TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS {p}changes (
    rev INTEGER PRIMARY KEY, kind TEXT NOT NULL, key TEXT NOT NULL, value BLOB, version INTEGER,
    holder TEXT, epoch INTEGER, successor TEXT);
"""


class SQLiteStore(Store):
    """Coordination store in an SQLite file. ``clock`` (seconds) is injectable for tests that
    must move time without waiting; it defaults to the host's ``time.time``."""

    capabilities = Capabilities(multi_host=False, durable=True)

    def __init__(
        self, path: str, *, namespace: str = "baton", clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.url = f"sqlite:///{path.lstrip('/')}" if path.startswith("/") else f"sqlite:{path}"
        self._p = f"{namespace}_"
        self._clock = clock
        self._executor: ThreadPoolExecutor | None = None
        self._db: sqlite3.Connection | None = None
        self._incarnation = ""
        #: Calls handed to the database thread and not yet answered (a manual clock in tests
        #: waits for them before it moves: see baton.testing.clock).
        self.in_flight = 0

    # -- plumbing ----------------------------------------------------------------------------

    def _now_us(self) -> int:
        return int(self._clock() * US)

    def _open(self) -> sqlite3.Connection:
        if not Path(self.path).parent.exists():
            raise StoreUnavailable(
                f"cannot open {self.url}: directory {Path(self.path).parent} does not exist"
            )
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None or self._db is None:
            await self.connect()
        assert self._executor is not None
        self.in_flight += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        except sqlite3.DatabaseError as exc:
            raise translate(self.url, exc) from exc
        finally:
            self.in_flight -= 1

    def _connect_sync(self) -> None:
        if self._db is not None:
            return
        db = self._open()
        p = self._p
        db.execute("BEGIN IMMEDIATE")
        try:
            for stmt in SCHEMA.format(p=p).split(";"):
                if stmt.strip():
                    db.execute(stmt)
            db.execute(
                f"INSERT OR IGNORE INTO {p}meta VALUES ('incarnation', ?), ('rev', '0'), "
                "('oldest', '1')",
                (uuid.uuid4().hex,),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            db.close()
            raise
        self._incarnation = self._meta(db, "incarnation")
        self._db = db

    @staticmethod
    def _meta_of(db: sqlite3.Connection, p: str, k: str) -> str:
        row = db.execute(f"SELECT v FROM {p}meta WHERE k = ?", (k,)).fetchone()
        if row is None:
            raise StoreUnavailable(f"baton schema is damaged: meta {k!r} is missing")
        return str(row[0])

    def _meta(self, db: sqlite3.Connection, k: str) -> str:
        return self._meta_of(db, self._p, k)

    async def connect(self) -> None:
        if self._db is not None:
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="baton-sqlite")
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._connect_sync)
        except sqlite3.Error as exc:
            # Locked (several processes creating the schema at once): a StoreTimeout, which a
            # caller may retry; anything else: the store cannot be used.
            err = translate(self.url, exc)
            raise type(err)(f"cannot open {self.url}: {exc}") from exc

    async def close(self) -> None:
        if self._executor is None:
            return
        db, self._db = self._db, None
        if db is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, db.close)
        self._executor.shutdown(wait=False)
        self._executor = None

    def _live(self) -> sqlite3.Connection:
        """The connection, or :class:`StoreUnavailable` once the store is closed (a task still
        running when its owner closed the store gets a store error it handles, not an
        assertion)."""
        db = self._db
        if db is None:
            raise StoreUnavailable(f"{self.url}: the store is closed")
        return db

    def _write(self, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        """Run ``fn(db, now_us)`` inside one ``BEGIN IMMEDIATE`` transaction."""
        db = self._live()
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(db, self._now_us())
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out

    def _log(
        self,
        db: sqlite3.Connection,
        kind: ChangeKind,
        key: str,
        *,
        value: bytes | None = None,
        holder: str | None = None,
        epoch: int | None = None,
        successor: str | None = None,
    ) -> int:
        """Append one change at the next revision and return that revision."""
        p = self._p
        (rev,) = db.execute(
            f"UPDATE {p}meta SET v = CAST(v AS INTEGER) + 1 WHERE k = 'rev' RETURNING CAST(v AS "
            "INTEGER)"
        ).fetchone()
        version = rev if kind in (ChangeKind.PUT, ChangeKind.DELETE) else None
        db.execute(
            f"INSERT INTO {p}changes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (rev, kind.value, key, value, version, holder, epoch, successor),
        )
        return int(rev)

    # -- time --------------------------------------------------------------------------------

    async def now(self) -> float:
        await self._run(lambda: None)  # proves the store is usable, as a server round trip does
        return self._clock()

    # -- leases ------------------------------------------------------------------------------

    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        check_name("lease name", name)
        check_name("holder", holder)
        ttl_us = int(check_ttl(ttl) * US)
        p = self._p

        def op(db: sqlite3.Connection, now: int) -> Lease | None:
            row = db.execute(
                f"SELECT holder, epoch, exp_us, successor, reserved_until_us FROM {p}leases "
                "WHERE name = ?",
                (name,),
            ).fetchone()
            last = 0
            if row is not None:
                old_holder, last, exp_us, successor, reserved_until = row
                if old_holder is not None:
                    if exp_us > now:
                        return None
                    # Expired but nobody logged it yet: the log must say so before the takeover.
                    self._log(db, ChangeKind.EXPIRED, name, holder=old_holder, epoch=last)
                elif successor is not None and reserved_until > now and successor != holder:
                    return None
            epoch = max(now, last + 1)
            db.execute(
                f"INSERT OR REPLACE INTO {p}leases VALUES (?, ?, ?, ?, ?, NULL, NULL)",
                (name, holder, epoch, ttl_us, now + ttl_us),
            )
            self._log(db, ChangeKind.ACQUIRED, name, holder=holder, epoch=epoch)
            return Lease(name, holder, epoch, ttl_us / US, (now + ttl_us) / US)

        return await self._run(self._write, op)

    async def renew(self, holder: str, leases: Sequence[Lease]) -> dict[str, Lease | None]:
        batch = check_same_holder(holder, leases)
        if not batch:
            return {}
        p = self._p

        def op(db: sqlite3.Connection, now: int) -> dict[str, Lease | None]:
            with bulk_allocation():
                return renew_all(db, now)

        def renew_all(db: sqlite3.Connection, now: int) -> dict[str, Lease | None]:
            out: dict[str, Lease | None] = {}
            stmt = (
                f"UPDATE {p}leases SET ttl_us = ?, exp_us = ? + ? WHERE name = ? AND holder = ? "
                "AND epoch = ? AND exp_us > ? RETURNING ttl_us, exp_us"
            )
            for lease in batch:
                ttl_us = int(check_ttl(lease.ttl) * US)
                args = (ttl_us, now, ttl_us, lease.name, holder, lease.epoch, now)
                row = db.execute(stmt, args).fetchone()
                out[lease.name] = (
                    None
                    if row is None
                    else Lease(lease.name, holder, lease.epoch, row[0] / US, row[1] / US)
                )
            return out

        return await self._run(self._write, op)

    async def release(self, lease: Lease, *, successor: str | None = None) -> bool:
        if successor is not None:
            check_name("successor", successor)
        p = self._p

        def op(db: sqlite3.Connection, now: int) -> bool:
            # exp_us of a lease nobody holds is when it stopped being held (see lapses()).
            cur = db.execute(
                f"UPDATE {p}leases SET holder = NULL, exp_us = ?, successor = ?, "
                "reserved_until_us = CASE WHEN ? IS NULL THEN NULL ELSE ? + ttl_us END "
                "WHERE name = ? AND holder = ? AND epoch = ? AND exp_us > ?",
                (now, successor, successor, now, lease.name, lease.holder, lease.epoch, now),
            )
            if cur.rowcount != 1:
                return False
            self._log(
                db,
                ChangeKind.RELEASED,
                lease.name,
                holder=lease.holder,
                epoch=lease.epoch,
                successor=successor,
            )
            return True

        return await self._run(self._write, op)

    def _held(self, where: str, args: tuple[Any, ...]) -> list[Lease]:
        db = self._live()
        rows = db.execute(
            f"SELECT name, holder, epoch, ttl_us, exp_us FROM {self._p}leases "
            f"WHERE holder IS NOT NULL AND exp_us > ? AND {where} ORDER BY name",
            (self._now_us(), *args),
        ).fetchall()
        return [Lease(n, h, e, t / US, x / US) for n, h, e, t, x in rows]

    async def next_epochs(self, floors: Mapping[str, int]) -> dict[str, int]:
        wanted = check_floors(floors)
        if not wanted:
            return {}
        p = self._p

        def op(db: sqlite3.Connection, now: int) -> dict[str, int]:
            out: dict[str, int] = {}
            for name, floor in wanted.items():
                (epoch,) = db.execute(
                    f"INSERT INTO {p}counters VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET "
                    "epoch = max(excluded.epoch, epoch + 1) RETURNING epoch",
                    (name, max(now, floor)),
                ).fetchone()
                out[name] = int(epoch)
            return out

        return await self._run(self._write, op)

    async def get_lease(self, name: str) -> Lease | None:
        found = await self._run(self._held, "name = ?", (name,))
        return found[0] if found else None

    async def list_leases(self, prefix: str = "") -> list[Lease]:
        return await self._run(self._held, "substr(name, 1, ?) = ?", (len(prefix), prefix))

    async def lapses(self, names: Sequence[str]) -> dict[str, Lapse]:
        wanted = check_names("lease name", names)

        def op() -> dict[str, Lapse]:
            db = self._live()
            now = self._now_us()
            out: dict[str, Lapse] = {}
            for i in range(0, len(wanted), 500):  # below SQLite's limit of bound parameters
                chunk = wanted[i : i + 500]
                rows = db.execute(
                    f"SELECT name, exp_us, ttl_us FROM {self._p}leases WHERE name IN "
                    f"({','.join('?' * len(chunk))}) AND (holder IS NULL OR exp_us <= ?)",
                    (*chunk, now),
                ).fetchall()
                # min(): a release written before releases set exp_us kept a later expiry.
                out.update({n: Lapse(n, min(x, now) / US, t / US) for n, x, t in rows})
            return out

        return await self._run(op)

    async def expire_due(self) -> float | None:
        p = self._p

        def due(db: sqlite3.Connection, now: int) -> None:
            rows = db.execute(
                f"SELECT name, holder, epoch FROM {p}leases WHERE holder IS NOT NULL AND "
                "exp_us <= ? ORDER BY exp_us, name",
                (now,),
            ).fetchall()
            for name, holder, epoch in rows:
                db.execute(f"UPDATE {p}leases SET holder = NULL WHERE name = ?", (name,))
                self._log(db, ChangeKind.EXPIRED, name, holder=holder, epoch=epoch)
            self._trim(db)

        def op() -> float | None:
            db = self._live()
            now = self._now_us()
            # Read first: most wake-ups find nothing due, and must not take the write lock.
            (n_due,) = db.execute(
                f"SELECT count(*) FROM {p}leases WHERE holder IS NOT NULL AND exp_us <= ?",
                (now,),
            ).fetchone()
            if n_due:
                self._write(due)
            (nxt,) = db.execute(
                f"SELECT min(exp_us) FROM {p}leases WHERE holder IS NOT NULL"
            ).fetchone()
            return None if nxt is None else max(0.0, (nxt - self._now_us()) / US)

        return await self._run(op)

    def _trim(self, db: sqlite3.Connection) -> None:
        p = self._p
        head = int(self._meta(db, "rev"))
        oldest = int(self._meta(db, "oldest"))
        if head - oldest > KEEP_CHANGES * 1.1:
            keep_from = head - KEEP_CHANGES + 1
            db.execute(f"DELETE FROM {p}changes WHERE rev < ?", (keep_from,))
            db.execute(f"UPDATE {p}meta SET v = ? WHERE k = 'oldest'", (str(keep_from),))

    # -- records -----------------------------------------------------------------------------

    async def get(self, key: str) -> Record | None:
        def op() -> Record | None:
            db = self._live()
            row = db.execute(
                f"SELECT key, value, version FROM {self._p}records WHERE key = ?", (key,)
            ).fetchone()
            return None if row is None else Record(row[0], bytes(row[1]), row[2])

        return await self._run(op)

    async def list(self, prefix: str = "") -> tuple[list[Record], Position]:
        p = self._p

        def op() -> tuple[list[Record], Position]:
            db = self._live()
            db.execute("BEGIN")  # one read snapshot for the records and the head
            try:
                rows = db.execute(
                    f"SELECT key, value, version FROM {p}records WHERE substr(key, 1, ?) = ? "
                    "ORDER BY key",
                    (len(prefix), prefix),
                ).fetchall()
                rev = int(self._meta(db, "rev"))
            finally:
                db.execute("COMMIT")
            return [Record(k, bytes(v), ver) for k, v, ver in rows], make_position(
                self._incarnation, rev
            )

        return await self._run(op)

    async def txn(self, ops: Sequence[Op], conditions: Sequence[Condition] = ()) -> TxnResult:
        check_ops(ops, conditions)
        p = self._p

        def holds(db: sqlite3.Connection, now: int, cond: Condition) -> bool:
            if isinstance(cond, VersionIs):
                row = db.execute(f"SELECT version FROM {p}records WHERE key = ?", (cond.key,))
                found = row.fetchone()
                return (found[0] if found else 0) == cond.version
            found = db.execute(
                f"SELECT 1 FROM {p}leases WHERE name = ? AND holder = ? AND epoch = ? AND "
                "exp_us > ?",
                (cond.name, cond.holder, cond.epoch, now),
            ).fetchone()
            return found is not None

        def op(db: sqlite3.Connection, now: int) -> TxnResult:
            failed = tuple(c for c in conditions if not holds(db, now, c))
            if failed:
                return TxnResult(False, None, failed)
            for o in ops:
                if isinstance(o, Put):
                    rev = self._log(db, ChangeKind.PUT, o.key, value=o.value)
                    db.execute(
                        f"INSERT OR REPLACE INTO {p}records VALUES (?, ?, ?)", (o.key, o.value, rev)
                    )
                elif db.execute(f"DELETE FROM {p}records WHERE key = ?", (o.key,)).rowcount:
                    self._log(db, ChangeKind.DELETE, o.key)
            return TxnResult(True, int(self._meta(db, "rev")))

        return await self._run(self._write, op)

    # -- change feed -------------------------------------------------------------------------

    async def head(self) -> Position:
        def op() -> Position:
            return make_position(self._incarnation, int(self._meta(self._live(), "rev")))

        return await self._run(op)

    async def _changes_after(
        self, incarnation: str, revision: int, prefix: str, limit: int
    ) -> tuple[builtins.list[Change], int]:
        p = self._p

        def op() -> tuple[builtins.list[Change], int]:
            db = self._live()
            db.execute("BEGIN")
            try:
                if incarnation != self._meta(db, "incarnation"):
                    raise FeedCompacted(
                        f"position from another store incarnation ({incarnation}); re-list"
                    )
                if revision + 1 < int(self._meta(db, "oldest")):
                    raise FeedCompacted(f"changes after revision {revision} were trimmed; re-list")
                rows = db.execute(
                    f"SELECT rev, kind, key, value, version, holder, epoch, successor FROM "
                    f"{p}changes WHERE rev > ? ORDER BY rev LIMIT ?",
                    (revision, limit),
                ).fetchall()
            finally:
                db.execute("COMMIT")
            last = rows[-1][0] if rows else revision
            out = [
                Change(
                    make_position(incarnation, r[0]),
                    r[0],
                    ChangeKind(r[1]),
                    r[2],
                    None if r[3] is None else bytes(r[3]),
                    r[4],
                    r[5],
                    r[6],
                    r[7],
                )
                for r in rows
                if r[2].startswith(prefix)
            ]
            return out, last

        return await self._run(op)

    @contextlib.asynccontextmanager
    async def _listen(self) -> AsyncIterator[FeedListener]:
        listener = _DataVersionListener(self)
        await listener.open()
        try:
            yield listener
        finally:
            await listener.close()


class _DataVersionListener(FeedListener):
    """Wakes when another connection commits to the file (``PRAGMA data_version`` changes).

    The check runs in the listener's own thread with its own connection, so an idle watcher
    costs one cheap header read every few milliseconds and never wakes the event loop until
    something changed."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._changed = asyncio.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def report(exc: BaseException | None) -> None:
            if not ready.done():
                ready.set_exception(exc) if exc else ready.set_result(None)

        def poll() -> None:
            try:
                db = self._store._open()
            except (sqlite3.Error, StoreUnavailable) as exc:
                loop.call_soon_threadsafe(report, exc)
                return
            try:
                version = db.execute("PRAGMA data_version").fetchone()[0]
                loop.call_soon_threadsafe(report, None)
                while not self._stop.wait(POLL_INTERVAL):
                    now = db.execute("PRAGMA data_version").fetchone()[0]
                    if now != version:
                        version = now
                        loop.call_soon_threadsafe(self._changed.set)
            except sqlite3.Error as exc:
                self._error = exc
                loop.call_soon_threadsafe(self._changed.set)
            except RuntimeError:  # the loop closed under us: nobody is listening any more
                pass
            finally:
                db.close()

        self._thread = threading.Thread(target=poll, name="baton-sqlite-watch", daemon=True)
        self._thread.start()
        try:
            await ready
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"{self._store.url}: {exc}") from exc

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        self._changed.clear()
        if self._error is not None:
            raise StoreUnavailable(f"{self._store.url}: {self._error}")

    async def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 1.0)
