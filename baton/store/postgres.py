"""The PostgreSQL store (``postgresql://user@host:port/db?namespace=NAME``).

Layout
------
Everything lives in a schema named after the namespace, created on first connect::

    meta     one row: incarnation (random, made with the schema), schema_version,
             compacted_rev (every change at or below it was trimmed from the log)
    head     one row: rev, the newest store revision
    leases   name, holder (NULL when free), epoch (the last one granted, kept when the
             lease is released or expires), ttl_us, exp_us (its expiry while held; when
             it stopped being held once it is not), expired_logged,
             successor and reserved_until_us (a handover reservation)
    records  key, value, version
    counters name, epoch: the last epoch of each epoch counter (``next_epochs``); created on
             connect in a namespace that predates it
    changes  the change log: rev (primary key), kind, key, value, version, holder, epoch,
             successor

Time is the server's ``clock_timestamp()`` in microseconds, read inside the statement that
decides, so no client clock is ever involved.

Why every appending transaction locks ``head`` first
----------------------------------------------------
A watcher reads ``rev > last``. With a sequence, revision 11 could commit before 10 and the
watcher, having moved past 11, would never see 10. So every transaction that appends to the log
first locks the ``head`` row, takes its revisions from it and raises it before committing: the
lock serialises appenders until commit, so revisions become visible in order. Holding that lock
also means nothing but a renewal can change a lease or a record under our feet, which is what
lets the main statement of each operation decide from its own snapshot (taken after the lock was
granted, in a separate statement). Renewals append nothing and never take the lock: they only
push ``exp_us`` of a live lease further out, which no decision depends on in a harmful way (an
acquire's ``ON CONFLICT`` re-reads the newest row anyway).

Each write is sent as one pipeline (``BEGIN``, lock ``head``, one statement, ``COMMIT``): one
network round trip, so the ``head`` lock is held for server time only. A renewal is a single
``UPDATE ... FROM unnest(...)`` for the whole batch (about 0.5 s for 100k leases).

Connections
-----------
A small fixed set of autocommit connections, each used by one task at a time (the most recently
used first), connected lazily; plus one dedicated ``LISTEN`` connection per watcher. An idle
connection that the server closed (restart, terminated backend) is noticed before it is used and
replaced, so the first call after a restart already works; a connection lost during a call fails
that call with :class:`StoreUnavailable`. Every call runs under a deadline
(``request_timeout``, also the server's ``statement_timeout``): a hung server raises
:class:`StoreTimeout` after exactly that long, without waiting for the driver's own attempt to
cancel the query. As with any store, a write that timed out or lost its connection may still
have been applied.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import re
import select
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow

from baton.errors import ConfigError, FeedCompacted, StoreTimeout, StoreUnavailable, redact_url
from baton.store.base import (
    Capabilities,
    Change,
    ChangeKind,
    Condition,
    Delete,
    FeedListener,
    Lapse,
    Lease,
    LeaseHeld,
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
_Conn = psycopg.AsyncConnection[TupleRow]

_NAMESPACE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_SCHEMA_VERSION = 1
_US = 1_000_000

#: The store clock in microseconds since the Unix epoch. ``clock_timestamp()`` (not ``now()``)
#: because ``now()`` is frozen at the start of the transaction, which may predate a lock wait.
_NOW_US = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

#: How many changes the log keeps at least; older ones are trimmed by :meth:`expire_due`.
FEED_RETAIN = 100_000
#: How often (per store object, in seconds) :meth:`expire_due` trims the log.
TRIM_INTERVAL = 10.0
#: At most this many changes are trimmed at once, to keep each trim short.
TRIM_BATCH = 50_000

_COUNTERS_DDL = """CREATE TABLE IF NOT EXISTS {s}.counters (
    name text COLLATE "C" PRIMARY KEY,
    epoch bigint NOT NULL
)"""

_DDL = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    """CREATE TABLE IF NOT EXISTS {s}.head (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        rev bigint NOT NULL
    )""",
    # fillfactor < 100 leaves room on each page so that renewals (which change no indexed
    # column) can be HOT updates and skip the index. For the same reason exp_us has no index:
    # expire_due's scan of the table costs less than slower renewals would.
    """CREATE TABLE IF NOT EXISTS {s}.leases (
        name text COLLATE "C" PRIMARY KEY,
        holder text,
        epoch bigint NOT NULL,
        ttl_us bigint NOT NULL,
        exp_us bigint NOT NULL,
        expired_logged boolean NOT NULL DEFAULT false,
        successor text,
        reserved_until_us bigint
    ) WITH (fillfactor = 80)""",
    """CREATE TABLE IF NOT EXISTS {s}.records (
        key text COLLATE "C" PRIMARY KEY,
        value bytea NOT NULL,
        version bigint NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS {s}.changes (
        rev bigint PRIMARY KEY,
        kind text NOT NULL,
        key text COLLATE "C" NOT NULL,
        value bytea,
        version bigint,
        holder text,
        epoch bigint,
        successor text
    )""",
    "INSERT INTO {s}.head (rev) VALUES (0) ON CONFLICT DO NOTHING",
    _COUNTERS_DDL,
    # meta last: its existence means the whole schema exists (DDL is transactional).
    """CREATE TABLE IF NOT EXISTS {s}.meta (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        incarnation text NOT NULL,
        schema_version integer NOT NULL,
        compacted_rev bigint NOT NULL DEFAULT 0
    )""",
)

_INSERT_META = (
    "INSERT INTO {s}.meta (incarnation, schema_version) VALUES (%(incarnation)s, "
    "%(schema_version)s) ON CONFLICT DO NOTHING"
)

_LOCK_HEAD = "SELECT rev FROM {s}.head FOR UPDATE"

_ACQUIRE = """
WITH now AS (SELECT {now} AS us),
-- This statement's snapshot was taken after the head lock was granted, so prev is exact but
-- for exp_us (a renewal may push it out); won's ON CONFLICT re-checks the newest row anyway.
prev AS (SELECT holder, epoch, expired_logged FROM {s}.leases WHERE name = %(name)s),
won AS (
    INSERT INTO {s}.leases AS l (name, holder, epoch, ttl_us, exp_us)
    SELECT %(name)s, %(holder)s, now.us, %(ttl_us)s, now.us + %(ttl_us)s FROM now
    ON CONFLICT (name) DO UPDATE SET
        holder = EXCLUDED.holder,
        -- the fencing token: later than the clock and than every earlier epoch of the name
        epoch = greatest(EXCLUDED.epoch, l.epoch + 1),
        ttl_us = EXCLUDED.ttl_us,
        exp_us = EXCLUDED.exp_us,
        expired_logged = false,
        successor = NULL,
        reserved_until_us = NULL
    -- EXCLUDED.epoch is the store clock of this statement
    WHERE (l.holder IS NULL OR l.exp_us <= EXCLUDED.epoch)
      AND (l.reserved_until_us IS NULL OR l.reserved_until_us <= EXCLUDED.epoch
           OR l.successor = EXCLUDED.holder)
    RETURNING l.epoch, l.exp_us
),
-- The previous holder ran out but nobody wrote its expiry yet: log it before our takeover.
unlogged AS (
    SELECT prev.holder, prev.epoch FROM prev, won
    WHERE prev.holder IS NOT NULL AND NOT prev.expired_logged
),
base AS (SELECT rev FROM {s}.head),
log AS (
    INSERT INTO {s}.changes (rev, kind, key, holder, epoch)
    SELECT base.rev + 1, 'expired', %(name)s, unlogged.holder, unlogged.epoch
    FROM base, unlogged
    UNION ALL
    SELECT base.rev + 1 + (SELECT count(*) FROM unlogged), 'acquired', %(name)s, %(holder)s,
           won.epoch
    FROM base, won
    RETURNING rev
),
bump AS (
    UPDATE {s}.head SET rev = (SELECT max(rev) FROM log) WHERE EXISTS (SELECT 1 FROM log)
)
SELECT won.epoch, won.exp_us, pg_notify(%(channel)s, '') FROM won
"""

# One statement for the whole batch, all at one store-clock reading. It returns that reading and
# the (1-based) positions of the leases it could not renew, NULL when it renewed them all: a
# renewal of 100k leases moves a few bytes back instead of 100k rows. Binary parameters (%b)
# halve the time of a big call, most of which would go to parsing text arrays at the server.
_RENEW = """
WITH now AS (SELECT {now} AS us),
renewed AS (
    UPDATE {s}.leases l SET exp_us = now.us + r.ttl_us, ttl_us = r.ttl_us
    FROM now, unnest(string_to_array(%(names)s::text, E'\x1f'),
                     string_to_array(%(epochs)s::text, ',')::bigint[],
                     string_to_array(%(ttls)s::text, ',')::bigint[])
                  WITH ORDINALITY AS r(name, epoch, ttl_us, i)
    WHERE l.name = r.name AND l.epoch = r.epoch AND l.holder = %(holder)s AND l.exp_us > now.us
    RETURNING r.i
)
SELECT (SELECT us FROM now),
       -- only looked for when something was lost (the subquery is not run otherwise)
       CASE WHEN (SELECT count(*) FROM renewed) < %(n)s THEN
           (SELECT array_agg(g.i) FROM generate_series(1, %(n)s) AS g(i)
            WHERE NOT EXISTS (SELECT 1 FROM renewed WHERE renewed.i = g.i))
       END
"""

_RELEASE = """
WITH now AS (SELECT {now} AS us),
freed AS (
    UPDATE {s}.leases l SET
        holder = NULL,
        -- the exp_us of a lease nobody holds is when it stopped being held (see _LAPSES)
        exp_us = now.us,
        successor = %(successor)s::text,
        reserved_until_us = CASE WHEN %(successor)s::text IS NULL THEN NULL
                                 ELSE now.us + l.ttl_us END
    FROM now
    WHERE l.name = %(name)s AND l.holder = %(holder)s AND l.epoch = %(epoch)s
      AND l.exp_us > now.us
    RETURNING l.name
),
base AS (SELECT rev FROM {s}.head),
log AS (
    INSERT INTO {s}.changes (rev, kind, key, holder, epoch, successor)
    SELECT base.rev + 1, 'released', freed.name, %(holder)s, %(epoch)s, %(successor)s::text
    FROM base, freed
),
bump AS (UPDATE {s}.head SET rev = head.rev + 1 WHERE EXISTS (SELECT 1 FROM freed))
SELECT pg_notify(%(channel)s, '') FROM freed
"""

# Autocommit, one statement: the row locks of ON CONFLICT serialise concurrent callers, and
# the later one re-reads the newest epoch, so epochs of a counter strictly increase.
_NEXT_EPOCHS = """
WITH now AS (SELECT {now} AS us)
INSERT INTO {s}.counters AS c (name, epoch)
SELECT r.name, greatest(now.us, r.floor)
FROM now, unnest(%(names)s::text[], %(floors)s::bigint[]) AS r(name, floor)
ON CONFLICT (name) DO UPDATE SET epoch = greatest(EXCLUDED.epoch, c.epoch + 1)
RETURNING c.name, c.epoch
"""

_GET_LEASE = """
SELECT holder, epoch, ttl_us, exp_us FROM {s}.leases
WHERE name = %(name)s AND holder IS NOT NULL AND exp_us > (SELECT {now})
"""

_LIST_LEASES = """
SELECT name, holder, epoch, ttl_us, exp_us FROM {s}.leases
WHERE holder IS NOT NULL AND exp_us > (SELECT {now}) AND {cond}
ORDER BY name
"""

# Expired (logged or not) or released: exp_us is when it stopped being held. least(): a release
# written before releases set exp_us kept a later expiry.
_LAPSES = """
WITH now AS (SELECT {now} AS us)
SELECT l.name, least(l.exp_us, now.us), l.ttl_us FROM {s}.leases l, now
WHERE l.name = ANY(%(names)s::text[]) AND (l.holder IS NULL OR l.exp_us <= now.us)
"""

_NEXT_EXPIRY = """
SELECT min(exp_us) - (SELECT {now}) FROM {s}.leases
WHERE holder IS NOT NULL AND NOT expired_logged
"""

_EXPIRE = """
WITH now AS (SELECT {now} AS us),
-- SKIP LOCKED: a row locked by a renewal is being renewed (or will be refused as expired, and
-- caught by the next call); waiting for it could deadlock with a renewal that locks its rows
-- in another order.
due AS (
    SELECT l.name, l.holder, l.epoch FROM {s}.leases l
    WHERE l.holder IS NOT NULL AND NOT l.expired_logged AND l.exp_us <= (SELECT us FROM now)
    ORDER BY l.name
    FOR UPDATE OF l SKIP LOCKED
),
numbered AS (SELECT due.*, row_number() OVER (ORDER BY due.name) AS k FROM due),
base AS (SELECT rev FROM {s}.head),
freed AS (
    UPDATE {s}.leases l SET holder = NULL, expired_logged = true
    FROM numbered d WHERE l.name = d.name
),
log AS (
    INSERT INTO {s}.changes (rev, kind, key, holder, epoch)
    SELECT base.rev + d.k, 'expired', d.name, d.holder, d.epoch FROM base, numbered d
),
bump AS (
    UPDATE {s}.head SET rev = head.rev + (SELECT count(*) FROM numbered)
    WHERE EXISTS (SELECT 1 FROM numbered)
)
SELECT
    (SELECT min(l.exp_us) FROM {s}.leases l
     WHERE l.holder IS NOT NULL AND NOT l.expired_logged
       AND l.name NOT IN (SELECT name FROM numbered)) - (SELECT us FROM now),
    CASE WHEN EXISTS (SELECT 1 FROM numbered) THEN pg_notify(%(channel)s, '') END
"""

_TRIM = """
WITH cut AS (
    SELECT least(h.rev - %(retain)s, m.compacted_rev + %(batch)s) AS upto
    FROM {s}.head h, {s}.meta m
),
-- meta first: it serialises concurrent trims, and a reader sees the new compacted_rev in the
-- same snapshot as the rows it removes.
moved AS (
    UPDATE {s}.meta SET compacted_rev = cut.upto FROM cut
    WHERE cut.upto > meta.compacted_rev
    RETURNING compacted_rev
)
DELETE FROM {s}.changes WHERE rev <= (SELECT compacted_rev FROM moved)
"""

_GET = "SELECT value, version FROM {s}.records WHERE key = %(key)s"

_LIST = """
SELECT m.incarnation, h.rev, r.key, r.value, r.version
FROM {s}.meta m CROSS JOIN {s}.head h LEFT JOIN {s}.records r ON {cond}
ORDER BY r.key
"""

_TXN = """
WITH now AS (SELECT {now} AS us),
failed AS (
    SELECT v.i FROM unnest(%(v_idx)s::int[], %(v_key)s::text[], %(v_ver)s::bigint[])
                    AS v(i, key, version)
    LEFT JOIN {s}.records r ON r.key = v.key
    WHERE coalesce(r.version, 0) <> v.version
    UNION ALL
    SELECT c.i FROM unnest(%(l_idx)s::int[], %(l_name)s::text[], %(l_holder)s::text[],
                           %(l_epoch)s::bigint[]) AS c(i, name, holder, epoch)
    LEFT JOIN {s}.leases l ON l.name = c.name
    WHERE l.holder IS DISTINCT FROM c.holder OR l.epoch IS DISTINCT FROM c.epoch
       OR NOT coalesce(l.exp_us > (SELECT us FROM now), false)
),
-- The changes to make: every put, and every delete of a key that exists (deleting a missing
-- key is a no-op and logs nothing). A NULL value means delete.
ops AS (
    SELECT o.ord, o.key, o.value
    FROM unnest(%(o_key)s::text[], %(o_val)s::bytea[]) WITH ORDINALITY AS o(key, value, ord)
    WHERE NOT EXISTS (SELECT 1 FROM failed)
      AND (o.value IS NOT NULL OR EXISTS (SELECT 1 FROM {s}.records r WHERE r.key = o.key))
),
numbered AS (
    SELECT ops.*, row_number() OVER (ORDER BY ops.ord) AS k, count(*) OVER () AS n FROM ops
),
base AS (SELECT rev FROM {s}.head),
puts AS (
    INSERT INTO {s}.records AS r (key, value, version)
    SELECT o.key, o.value, base.rev + o.k FROM numbered o, base WHERE o.value IS NOT NULL
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, version = EXCLUDED.version
),
dels AS (
    DELETE FROM {s}.records r USING numbered o WHERE o.value IS NULL AND r.key = o.key
),
log AS (
    INSERT INTO {s}.changes (rev, kind, key, value, version)
    SELECT base.rev + o.k, CASE WHEN o.value IS NULL THEN 'delete' ELSE 'put' END, o.key,
           o.value, base.rev + o.k
    FROM numbered o, base
),
bump AS (
    UPDATE {s}.head SET rev = head.rev + (SELECT count(*) FROM numbered)
    WHERE EXISTS (SELECT 1 FROM numbered)
)
SELECT (SELECT array_agg(i ORDER BY i) FROM failed),
       base.rev + coalesce((SELECT max(n) FROM numbered), 0),
       CASE WHEN EXISTS (SELECT 1 FROM numbered) THEN pg_notify(%(channel)s, '') END
FROM base
"""

_HEAD = "SELECT m.incarnation, h.rev FROM {s}.meta m, {s}.head h"

_CHANGES_AFTER = """
WITH scan AS (
    SELECT max(rev) AS hi
    FROM (SELECT rev FROM {s}.changes WHERE rev > %(after)s ORDER BY rev LIMIT %(limit)s) s
)
SELECT m.incarnation, m.compacted_rev, h.rev, scan.hi,
       c.rev, c.kind, c.key, c.value, c.version, c.holder, c.epoch, c.successor
FROM {s}.meta m CROSS JOIN {s}.head h CROSS JOIN scan
LEFT JOIN {s}.changes c
       ON c.rev > %(after)s AND c.rev <= scan.hi AND starts_with(c.key, %(prefix)s)
ORDER BY c.rev
"""


def _prefix_upper(prefix: str) -> str | None:
    """The smallest string above every string that starts with ``prefix`` (code point order,
    which is byte order under ``COLLATE "C"``), or None if there is none."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if 0xD800 <= code <= 0xDFFF:  # surrogates cannot be stored: skip them
            code = 0xE000
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def _check_prefix(prefix: str) -> None:
    if not isinstance(prefix, str) or "\x00" in prefix:
        raise ConfigError(f"bad prefix {prefix!r}: use a string without NUL characters")


def _prefix_condition(column: str, prefix: str) -> tuple[sql.Composable, dict[str, Any]]:
    """A condition on ``column`` matching names that start with ``prefix``, as a key range so
    that the primary-key index serves it."""
    _check_prefix(prefix)
    col = sql.Identifier(*column.split("."))
    if not prefix:
        return sql.SQL("true"), {}
    upper = _prefix_upper(prefix)
    if upper is None:
        return sql.SQL("starts_with({}, %(prefix)s)").format(col), {"prefix": prefix}
    cond = sql.SQL("{col} >= %(prefix)s AND {col} < %(upper)s").format(col=col)
    return cond, {"prefix": prefix, "upper": upper}


def _readable(conn: _Conn) -> bool:
    """Whether an idle connection has unread input (or a hang-up). Idle pool connections never
    LISTEN, so input means the server said goodbye (shutdown, restart, terminated backend) and
    the connection is not worth a round trip."""
    try:
        fd = conn.fileno()
        if hasattr(select, "poll"):  # no limit on the descriptor number, unlike select()
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


class _Slot:
    """One of the store's connections (None until first needed or after a failure)."""

    __slots__ = ("conn", "generation")

    def __init__(self) -> None:
        self.conn: _Conn | None = None
        self.generation = 0


class _Listener(FeedListener):
    """A watcher's own autocommit connection that has executed ``LISTEN``."""

    def __init__(self, store: PostgresStore, conn: _Conn) -> None:
        self._store = store
        self._conn: _Conn | None = conn

    async def wait(self, timeout: float) -> None:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            # Notifications sent while we were not listening are lost: listen again and return
            # at once so that the watcher re-reads the log after LISTEN took effect.
            await self.close()
            self._conn = await self._store._timed(self._store._open_listener(), "LISTEN")
            return
        try:
            async for _ in conn.notifies(timeout=max(timeout, 0.0), stop_after=1):
                pass
            # Swallow whatever else has arrived: one re-read of the log covers it all.
            async for _ in conn.notifies(timeout=0):
                pass
        except psycopg.Error:
            # Lost the connection: the watcher re-reads the log now (which reports the outage
            # if the server is really gone) and the next wait listens again.
            await self.close()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class PostgresStore(Store):
    """A :class:`Store` on PostgreSQL 13+ (``clock_timestamp()``, ``LISTEN``/``NOTIFY``).

    ``url`` is a libpq URL (``postgresql://user:password@host:port/dbname?sslmode=...``);
    ``namespace`` names the schema that holds the tables, so several clusters can share one
    database. ``request_timeout`` bounds every call (a slower answer raises
    :class:`~baton.errors.StoreTimeout`), ``connect_timeout`` every connection attempt, and at
    most ``max_connections`` connections are used for calls, plus one per active watcher.
    """

    capabilities = Capabilities(multi_host=True, durable=True)

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "baton",
        request_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        max_connections: int = 4,
    ) -> None:
        self.url = redact_url(url)
        if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
            raise ConfigError(
                f"bad namespace {namespace!r}: use 1-40 lower-case letters, digits or '_', "
                "starting with a letter"
            )
        for what, value in (
            ("request_timeout", request_timeout),
            ("connect_timeout", connect_timeout),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{what}={value!r} must be a positive number of seconds")
        if (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or max_connections < 1
        ):
            raise ConfigError(f"max_connections={max_connections!r} must be an integer >= 1")
        try:
            params: dict[str, Any] = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise ConfigError(f"bad PostgreSQL URL {self.url!r}: {redact_url(str(exc))}") from exc
        self.namespace = namespace
        self.request_timeout = float(request_timeout)
        self._channel = f"{namespace}_feed"
        timeout_ms = max(1, round(self.request_timeout * 1000))
        # Our session settings first, so that options given in the URL win. JIT off: our
        # statements are small and latency-bound, and a JIT compile of the change-feed read
        # measured +0.5 s on a planned handover (docs/benchmarks.md).
        ours = (
            f"-c statement_timeout={timeout_ms} -c idle_in_transaction_session_timeout={timeout_ms}"
            " -c jit=off"
        )
        params["options"] = f"{ours} {params.get('options', '')}".strip()
        params.setdefault("connect_timeout", max(2, round(connect_timeout)))
        params.setdefault("application_name", "baton")
        params.setdefault("keepalives", 1)
        params.setdefault("keepalives_idle", 10)
        params.setdefault("keepalives_interval", 5)
        params.setdefault("keepalives_count", 3)
        self._params = params

        schema = sql.Identifier(namespace)

        def q(text: str, **more: sql.Composable) -> sql.Composed:
            return sql.SQL(text).format(s=schema, now=sql.SQL(_NOW_US), **more)

        self._q = q
        self._ddl = [q(text) for text in _DDL]
        self._lock_head = q(_LOCK_HEAD)
        self._acquire = q(_ACQUIRE)
        self._renew = q(_RENEW)
        self._release = q(_RELEASE)
        self._get_lease = q(_GET_LEASE)
        self._lapses = q(_LAPSES)
        self._next_epochs = q(_NEXT_EPOCHS)
        self._counters_ddl = q(_COUNTERS_DDL)
        self._next_expiry = q(_NEXT_EXPIRY)
        self._expire = q(_EXPIRE)
        self._trim = q(_TRIM)
        self._get = q(_GET)
        self._txn = q(_TXN)
        self._head = q(_HEAD)
        self._changes = q(_CHANGES_AFTER)
        self._listen_sql = sql.SQL("LISTEN {}").format(sql.Identifier(self._channel))

        # Last in, first out: calls reuse the most recently used connection, so the store only
        # opens as many connections as it has concurrent calls.
        self._slots: asyncio.LifoQueue[_Slot] = asyncio.LifoQueue()
        for _ in range(max_connections):
            self._slots.put_nowait(_Slot())
        # Bumped when a connection is found dead (the others probably are too) and on close():
        # connections of an older generation are closed instead of reused.
        self._generation = 0
        self._schema_ready = False
        self._orphans: set[asyncio.Task[Any]] = set()
        self._next_trim = 0.0
        #: Changes the log keeps at least, and how often (seconds) ``expire_due`` trims it.
        self.feed_retain = FEED_RETAIN
        self.trim_interval = TRIM_INTERVAL

    # -- lifecycle ---------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect and create the schema if needed. Idempotent."""
        await self._call(self._noop, "connect")

    async def close(self) -> None:
        """Close every idle connection; connections still busy are closed when they finish.
        Leases are not released. The store reconnects if it is used again."""
        self._generation += 1
        self._schema_ready = False
        idle = [self._slots.get_nowait() for _ in range(self._slots.qsize())]
        for slot in idle:
            await self._drop(slot)
            self._slots.put_nowait(slot)

    # -- plumbing ----------------------------------------------------------------------------

    async def _noop(self, conn: _Conn) -> None:
        return None

    async def _timed(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """Run ``coro`` with the request deadline. It runs as its own task so that a hung
        server costs the caller exactly the deadline: cancelling a query makes psycopg try to
        cancel it at the server, which could take much longer; that finishes in the
        background."""
        task = asyncio.ensure_future(coro)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.request_timeout)
        except asyncio.CancelledError:
            self._orphan(task)
            raise
        if task in done:
            return task.result()
        self._orphan(task)
        raise StoreTimeout(
            f"PostgreSQL store {self.url} did not answer {what} within {self.request_timeout:g} s: "
            "check that the server is up and not overloaded"
        )

    def _orphan(self, task: asyncio.Task[Any]) -> None:
        task.cancel()
        self._orphans.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[Any]) -> None:
        self._orphans.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved, so that asyncio does not log it

    async def _call(self, fn: Callable[[_Conn], Awaitable[T]], what: str) -> T:
        """Run ``fn`` on one of the store's connections, under the request deadline, with every
        driver error translated."""
        return await self._timed(self._on_connection(fn, what), what)

    async def _on_connection(self, fn: Callable[[_Conn], Awaitable[T]], what: str) -> T:
        slot = await self._slots.get()
        try:
            conn = await self._ready(slot)
            try:
                return await fn(conn)
            except psycopg.Error as exc:
                await self._recover(slot, exc)
                raise self._translate(exc, what) from exc
            except BaseException:
                # Cancelled (or a bug) mid-conversation: the connection's state is unknown.
                await self._drop(slot)
                raise
        finally:
            if slot.conn is not None and slot.generation != self._generation:
                await self._drop(slot)
            self._slots.put_nowait(slot)

    async def _ready(self, slot: _Slot) -> _Conn:
        """The slot's connection, reconnecting if it is missing, stale or dead."""
        conn = slot.conn
        if conn is not None and (
            slot.generation != self._generation
            or conn.closed
            or conn.broken
            or conn.info.transaction_status != TransactionStatus.IDLE
            or _readable(conn)
        ):
            await self._drop(slot)
            conn = None
        if conn is None:
            conn = await self._connect()
            slot.conn, slot.generation = conn, self._generation
        if not self._schema_ready:
            try:
                await self._ensure_schema(conn)
            except psycopg.Error as exc:
                await self._recover(slot, exc)
                raise self._translate(exc, "creating the schema") from exc
            self._schema_ready = True
        return conn

    async def _connect(self) -> _Conn:
        try:
            return await psycopg.AsyncConnection.connect(**self._params, autocommit=True)
        except psycopg.Error as exc:
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL store {self.url}: {redact_url(str(exc).strip())}; "
                "check that the server is running and the URL is right"
            ) from exc

    async def _drop(self, slot: _Slot) -> None:
        conn, slot.conn = slot.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def _recover(self, slot: _Slot, exc: psycopg.Error) -> None:
        """After a driver error: keep the connection if it is still good, else drop it."""
        if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.InvalidSchemaName):
            # Someone dropped the namespace: recreate it (with a new incarnation, so watchers
            # learn that the log they followed is gone) on the next call.
            self._schema_ready = False
        conn = slot.conn
        if conn is None:
            return
        if conn.closed or conn.broken:
            # One connection died; the others were probably cut by the same event.
            self._generation += 1
            await self._drop(slot)
            return
        if conn.info.transaction_status != TransactionStatus.IDLE:
            try:
                await conn.execute("ROLLBACK")
            except psycopg.Error:
                await self._drop(slot)

    def _translate(self, exc: psycopg.Error, what: str) -> StoreUnavailable | StoreTimeout:
        detail = redact_url(str(exc).strip()) or type(exc).__name__
        if isinstance(exc, psycopg.errors.QueryCanceled | psycopg.errors.LockNotAvailable):
            return StoreTimeout(
                f"PostgreSQL store {self.url} timed out {what}: {detail}; the server may be "
                "overloaded"
            )
        return StoreUnavailable(f"PostgreSQL store {self.url} failed {what}: {detail}")

    async def _ensure_schema(self, conn: _Conn) -> None:
        meta = f'"{self.namespace}".meta'
        cur = await conn.execute("SELECT to_regclass(%s)", [meta])
        row = await cur.fetchone()
        if row is None or row[0] is None:
            async with conn.transaction():
                # Several processes may start at once: one creates, the others wait and find
                # everything there (CREATE ... IF NOT EXISTS alone can still collide).
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    [f"baton schema {self.namespace}"],
                )
                for stmt in self._ddl:
                    await conn.execute(stmt)
                args = {"incarnation": uuid.uuid4().hex, "schema_version": _SCHEMA_VERSION}
                await conn.execute(self._q(_INSERT_META), args)
        cur = await conn.execute(self._q("SELECT schema_version FROM {s}.meta"))
        row = await cur.fetchone()
        if row is None or row[0] != _SCHEMA_VERSION:
            raise StoreUnavailable(
                f"namespace {self.namespace!r} in PostgreSQL store {self.url} has schema version "
                f"{row[0] if row else None}, this baton uses {_SCHEMA_VERSION}: use a matching "
                "baton or another namespace"
            )
        # The counters table came later than schema version 1: add it where it is missing
        # (under the same lock, as concurrent CREATE ... IF NOT EXISTS can collide).
        cur = await conn.execute("SELECT to_regclass(%s)", [f'"{self.namespace}".counters'])
        row = await cur.fetchone()
        if row is None or row[0] is None:
            async with conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    [f"baton schema {self.namespace}"],
                )
                await conn.execute(self._counters_ddl)

    async def _open_listener(self) -> _Conn:
        conn = await self._connect()
        try:
            await conn.execute(self._listen_sql)
        except psycopg.Error as exc:
            await conn.close()
            raise self._translate(exc, "LISTEN") from exc
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _rows(
        self, query: sql.Composed, params: dict[str, Any] | None, what: str
    ) -> list[TupleRow]:
        """Run one statement on its own (autocommit)."""

        async def run(conn: _Conn) -> list[TupleRow]:
            cur = await conn.execute(query, params)
            rows: list[TupleRow] = await cur.fetchall()
            return rows

        return await self._call(run, what)

    async def _append(
        self, query: sql.Composed, params: dict[str, Any], what: str
    ) -> list[TupleRow]:
        """Run one statement that may append to the change log, in a transaction that first
        locks ``head`` (see the module docstring), all in one round trip."""

        async def run(conn: _Conn) -> list[TupleRow]:
            async with conn.pipeline():
                await conn.execute("BEGIN")
                await conn.execute(self._lock_head)
                cur = await conn.execute(query, params)
                await conn.execute("COMMIT")
            rows: list[TupleRow] = await cur.fetchall()
            return rows

        return await self._call(run, what)

    # -- time --------------------------------------------------------------------------------

    async def now(self) -> float:
        """The store's clock (the server's ``clock_timestamp()``), in seconds."""
        rows = await self._rows(self._q("SELECT {now}"), None, "reading the clock")
        return int(rows[0][0]) / _US

    # -- leases ------------------------------------------------------------------------------

    async def acquire(self, name: str, holder: str, ttl: float) -> Lease | None:
        """Take lease ``name`` for ``ttl`` seconds, or return None if it is held (or reserved
        for another holder by a handover)."""
        check_name("lease name", name)
        check_name("holder", holder)
        ttl = check_ttl(ttl)
        params = {
            "name": name,
            "holder": holder,
            "ttl_us": round(ttl * _US),
            "channel": self._channel,
        }
        rows = await self._append(self._acquire, params, f"acquiring lease {name!r}")
        if not rows:
            return None
        epoch, exp_us, _ = rows[0]
        return Lease(name, holder, int(epoch), ttl, int(exp_us) / _US)

    async def renew(self, holder: str, leases: Sequence[Lease]) -> dict[str, Lease | None]:
        """Renew every lease in ``leases`` (all held by ``holder``) in one statement, each for
        its own ``ttl`` (which the store keeps from then on). Returns, per name, the renewed
        lease or None if it was lost (expired by the store clock, released, or held at another
        epoch)."""
        check_name("holder", holder)
        # One lease per name (the last given), so that every name gets exactly one answer.
        batch = list({lease.name: lease for lease in check_same_holder(holder, leases)}.values())
        if not batch:
            return {}
        ttls = [round(lease.ttl * _US) for lease in batch]
        if not _US // 1000 <= min(ttls) <= max(ttls) <= 86400 * _US:
            for lease in batch:
                check_ttl(lease.ttl)
        names = [lease.name for lease in batch]
        # Three delimited strings rather than three arrays: adapting 100k array elements one
        # by one in Python cost more than the server's whole UPDATE. Names cannot contain the
        # unit separator (they are printable, see check_name).
        params = {
            "names": "\x1f".join(names),
            "epochs": ",".join([str(lease.epoch) for lease in batch]),
            "ttls": ",".join(map(str, ttls)),
            "holder": holder,
            "n": len(batch),
        }
        rows = await self._rows(self._renew, params, f"renewing {len(batch)} leases")
        now_us, lost = rows[0]
        with bulk_allocation():
            out: dict[str, Lease | None] = {
                lease.name: Lease(lease.name, holder, lease.epoch, lease.ttl, (now_us + ttl) / _US)
                for lease, ttl in zip(batch, ttls, strict=True)
            }
        for i in lost or ():
            out[names[i - 1]] = None
        return out

    async def release(self, lease: Lease, *, successor: str | None = None) -> bool:
        """Give up ``lease`` if it is still held at its epoch and has not expired. With
        ``successor``, only that holder can acquire it for the next ttl. The epoch is kept so
        the next grant is higher."""
        check_name("lease name", lease.name)
        check_name("holder", lease.holder)
        if successor is not None:
            check_name("successor", successor)
        params = {
            "name": lease.name,
            "holder": lease.holder,
            "epoch": lease.epoch,
            "successor": successor,
            "channel": self._channel,
        }
        rows = await self._append(self._release, params, f"releasing lease {lease.name!r}")
        return bool(rows)

    async def next_epochs(self, floors: Mapping[str, int]) -> dict[str, int]:
        wanted = check_floors(floors)
        if not wanted:
            return {}
        params = {"names": list(wanted), "floors": list(wanted.values())}
        rows = await self._rows(self._next_epochs, params, "taking epochs")
        return {str(name): int(epoch) for name, epoch in rows}

    async def get_lease(self, name: str) -> Lease | None:
        """The current holder of ``name``, or None if nobody holds it by the store clock."""
        check_name("lease name", name)
        rows = await self._rows(self._get_lease, {"name": name}, f"reading lease {name!r}")
        if not rows:
            return None
        holder, epoch, ttl_us, exp_us = rows[0]
        return Lease(name, holder, int(epoch), int(ttl_us) / _US, int(exp_us) / _US)

    async def list_leases(self, prefix: str = "") -> list[Lease]:
        """Every held lease whose name starts with ``prefix``, sorted by name."""
        cond, params = _prefix_condition("name", prefix)
        query = self._q(_LIST_LEASES, cond=cond)
        rows = await self._rows(query, params, "listing leases")
        return [
            Lease(name, holder, int(epoch), int(ttl_us) / _US, int(exp_us) / _US)
            for name, holder, epoch, ttl_us, exp_us in rows
        ]

    async def lapses(self, names: Sequence[str]) -> dict[str, Lapse]:
        wanted = check_names("lease name", names)
        if not wanted:
            return {}
        rows = await self._rows(self._lapses, {"names": wanted}, "reading lease lapses")
        return {name: Lapse(name, int(at) / _US, int(ttl) / _US) for name, at, ttl in rows}

    async def expire_due(self) -> float | None:
        """Write an ``expired`` change for every lease past its expiry that has none yet (and
        now and then trim the change log), then return the seconds until the next expiry."""
        if time.monotonic() >= self._next_trim:
            self._next_trim = time.monotonic() + self.trim_interval
            await self._trim_log(self.feed_retain)
        # Most calls find nothing due: answer those without taking the head lock.
        rows = await self._rows(self._next_expiry, None, "checking lease expiry")
        due = rows[0][0]
        if due is None:
            return None
        if due > 0:
            return int(due) / _US
        rows = await self._append(self._expire, {"channel": self._channel}, "expiring leases")
        due = rows[0][0]
        return None if due is None else int(due) / _US

    async def _trim_log(self, retain: int) -> None:
        """Drop changes older than the newest ``retain`` (at most ``TRIM_BATCH`` at once)."""
        params = {"retain": retain, "batch": TRIM_BATCH}

        async def run(conn: _Conn) -> None:
            await conn.execute(self._trim, params)

        await self._call(run, "trimming the change log")

    # -- records -----------------------------------------------------------------------------

    async def get(self, key: str) -> Record | None:
        """The record at ``key``, or None."""
        check_name("record key", key)
        rows = await self._rows(self._get, {"key": key}, f"reading record {key!r}")
        if not rows:
            return None
        value, version = rows[0]
        return Record(key, bytes(value), int(version))

    async def list(self, prefix: str = "") -> tuple[list[Record], Position]:
        """Every record under ``prefix`` sorted by key, and the feed position they are current
        at (read in the same snapshot)."""
        cond, params = _prefix_condition("r.key", prefix)
        rows = await self._rows(self._q(_LIST, cond=cond), params, "listing records")
        incarnation, rev = rows[0][0], int(rows[0][1])
        records = [
            Record(key, bytes(value), int(version))
            for _, _, key, value, version in rows
            if key is not None
        ]
        return records, make_position(incarnation, rev)

    async def txn(self, ops: Sequence[Op], conditions: Sequence[Condition] = ()) -> TxnResult:
        """Apply ``ops`` atomically if every condition holds, one revision per change (in the
        order of ``ops``); each record written gets its change's revision as its version."""
        check_ops(ops, conditions)
        params: dict[str, Any] = {
            "v_idx": [],
            "v_key": [],
            "v_ver": [],
            "l_idx": [],
            "l_name": [],
            "l_holder": [],
            "l_epoch": [],
            "o_key": [op.key for op in ops],
            "o_val": [op.value if isinstance(op, Put) else None for op in ops],
            "channel": self._channel,
        }
        for op in ops:
            if not isinstance(op, Put | Delete):
                raise ConfigError(f"bad operation {op!r}: use Put or Delete")
        for i, cond in enumerate(conditions):
            if isinstance(cond, VersionIs):
                check_name("record key", cond.key)
                params["v_idx"].append(i)
                params["v_key"].append(cond.key)
                params["v_ver"].append(cond.version)
            elif isinstance(cond, LeaseHeld):
                check_name("lease name", cond.name)
                check_name("holder", cond.holder)
                params["l_idx"].append(i)
                params["l_name"].append(cond.name)
                params["l_holder"].append(cond.holder)
                params["l_epoch"].append(cond.epoch)
            else:
                raise ConfigError(f"bad condition {cond!r}: use VersionIs or LeaseHeld")
        what = f"writing {', '.join(op.key for op in ops)[:200]!r}"
        rows = await self._append(self._txn, params, what)
        failed, revision, _ = rows[0]
        if failed:
            return TxnResult(False, None, tuple(conditions[i] for i in failed))
        return TxnResult(True, int(revision))

    # -- change feed -------------------------------------------------------------------------

    async def head(self) -> Position:
        """The position of the newest change."""
        rows = await self._rows(self._head, None, "reading the feed head")
        return make_position(rows[0][0], int(rows[0][1]))

    async def _changes_after(
        self, incarnation: str, revision: int, prefix: str, limit: int
    ) -> tuple[builtins.list[Change], int]:
        _check_prefix(prefix)
        params = {"after": revision, "limit": limit, "prefix": prefix}
        rows = await self._rows(self._changes, params, "reading the change feed")
        ours, compacted, head, hi = rows[0][:4]
        position = make_position(incarnation, revision)
        if ours != incarnation:
            raise FeedCompacted(
                f"feed position {position!r} is from another store (this one is {ours!r}): "
                "re-list and watch from the new position"
            )
        if revision < compacted or revision > head:
            raise FeedCompacted(
                f"feed position {position!r} is no longer available (the log holds revisions "
                f"{compacted + 1} to {head}): re-list and watch from the new position"
            )
        changes = [
            Change(
                position=make_position(incarnation, rev),
                revision=rev,
                kind=ChangeKind(kind),
                key=key,
                value=None if value is None else bytes(value),
                version=version,
                holder=holder,
                epoch=epoch,
                successor=successor,
            )
            for _, _, _, _, rev, kind, key, value, version, holder, epoch, successor in rows
            if rev is not None
        ]
        return changes, revision if hi is None else int(hi)

    @contextlib.asynccontextmanager
    async def _listen(self) -> AsyncIterator[FeedListener]:
        """A dedicated connection that has executed ``LISTEN`` on the namespace's channel;
        every appending transaction notifies it at commit."""
        listener = _Listener(self, await self._timed(self._open_listener(), "LISTEN"))
        try:
            yield listener
        finally:
            await listener.close()


__all__ = ["PostgresStore"]
