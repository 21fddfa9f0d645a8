"""The PostgreSQL node database.

**Batches.** On PostgreSQL an event's id comes from a sequence when the row is written, long
before its transaction commits, so an event with a lower id can commit after a tick that
recorded a higher one: an id range would miss it (or take it twice). As in PgQ, a tick stores
the snapshot of the transaction that made it (``pg_current_snapshot()``), and each captured event
stores its transaction id. The batch of a local tick ``cur`` after tick ``prev`` is:

- the events captured here (``ev_tick IS NULL``) whose transaction is visible in ``cur``'s
  snapshot and not in ``prev``'s: committed before ``cur`` was made and after ``prev`` was;
- when ``prev`` has no snapshot of this database (there is none, or it was copied from another
  root, e.g. before this node was promoted), those visible in ``cur``'s snapshot with an id above
  ``prev.ev_high`` (all of them when there is no ``prev``);
- plus the events copied from a provider whose ``ev_tick`` is in ``(prev, cur]``.

Ticks made here are marked ``tick_local``: a copied tick keeps its provider's snapshot verbatim
(it is passed on down the cascade) but that snapshot speaks of another server's transactions.
A snapshot's ``xmin``/``xmax`` bound the scan through a partial index on ``ev_txid``. A tick's
``ev_high`` is the highest event id its snapshot sees (read in the same statement).

**Serialisation.** :meth:`PostgresNodeDB.transaction` takes a transaction-scoped advisory lock
for the node (keyed on its schema) so that the node's own writers run one at a time, as
SQLite's ``BEGIN IMMEDIATE`` makes them: a worker's read of its position and epoch and its
write of the new ones cannot interleave with another worker's, and ticks are made strictly one
after the other, each with a snapshot taken after the previous tick committed (transactions
are READ COMMITTED, so every statement takes a fresh snapshot once the lock is held).
Application transactions that write captured tables take no such lock.

**Capture.** One PL/pgSQL function, ``baton_capture_stmt(key columns...)``, run by three
statement-level triggers per table (insert, update, delete), writes every row change of a
statement in the writer's transaction with one ``INSERT ... SELECT`` from the statement's
transition tables: ``ev_key`` holds the key columns in key order and ``ev_data`` the whole row
(``row_to_json``: columns in table order, compact like SQLite's ``json_object``).
It pins ``extra_float_digits`` so that doubles are written with the shortest text that reads
back to the same value whatever the writer's session says; timestamps travel as ISO 8601
strings, which the upsert casts back.

**Upserts** send one text array per column and run a single ``INSERT ... SELECT FROM unnest(...)
ON CONFLICT DO UPDATE``: one statement and one round trip for any number of rows, with
PostgreSQL casting each text to its column's type; no temporary table (whose catalog churn
every micro-batch would pay) and no per-row statements.

**Reading batches.** :meth:`PostgresNodeDB.batch_events` streams through a server-side cursor
on a second connection, so a large batch is never held in memory and the caller may use the
node database (even write to it) while it iterates.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import math
import os
import re
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from baton.cascade.codec import ExactNumber
from baton.cascade.db.base import DENY_SQLSTATE, NodeDB, ident, node_schema, split_location
from baton.cascade.db.sqlite import TABLES
from baton.cascade.model import ROW_TYPES, Event, Tick
from baton.errors import (
    CascadeError,
    CascadeInputError,
    NodeDatabaseError,
    NodeUnreachable,
    NotANode,
    redact_url,
)

_Conn = psycopg.Connection[TupleRow]
_Cur = psycopg.Cursor[TupleRow]
_Query = str | sql.SQL | sql.Composed

#: The database clock in epoch seconds. ``clock_timestamp()`` rather than ``now()``, which is
#: frozen at the start of the transaction (possibly before a lock wait).
_NOW = "extract(epoch FROM clock_timestamp())::float8"
_TXID = "pg_current_xact_id()::text::bigint"
_EVENT_COLS = "ev_id, ev_time, ev_type, ev_table, ev_key, ev_data, ev_txid, ev_tick"
_TICK_COLS = "tick_id, ev_high, snapshot, tick_time, tick_local"
#: Rows fetched per round trip when streaming events.
_FETCH = 2000
#: Events one trim deletes at most, about (the ticks' ``ev_high`` count them). A trim runs in
#: a branch's apply transaction: behind a catch-up of a million events, one ``DELETE`` of them
#: all held that batch's commit for seconds.
TRIM_STEP = 10_000
#: The host ``baton_local`` key of the transaction id below which the trims left no captured
#: event (:meth:`PostgresNodeDB.trim`).
TRIM_FLOOR_KEY = "trim_floor"
#: An :class:`Event` straight from a row of :data:`_EVENT_COLS` (its fields, in order).
_new_event = tuple.__new__
#: The statement-level capture function (an older baton's row-level one is ``baton_capture``).
CAPTURE_FUNCTION = "baton_capture_stmt"

_SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS baton_event_id_seq;
CREATE TABLE IF NOT EXISTS baton_event (
    ev_id bigint PRIMARY KEY DEFAULT nextval('baton_event_id_seq'),
    ev_txid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
    ev_time double precision NOT NULL,
    ev_type text NOT NULL,
    ev_table text,
    ev_key text,
    ev_data text,
    ev_tick bigint
);
ALTER SEQUENCE baton_event_id_seq OWNED BY baton_event.ev_id;
-- Copied events are found by tick; captured ones (no tick) by transaction id. Each index only
-- holds the rows it serves: a root has no copied events, a branch no captured ones.
CREATE INDEX IF NOT EXISTS baton_event_tick ON baton_event (ev_tick) WHERE ev_tick IS NOT NULL;
CREATE INDEX IF NOT EXISTS baton_event_txid ON baton_event (ev_txid) WHERE ev_tick IS NULL;
CREATE TABLE IF NOT EXISTS baton_tick (
    tick_id bigint PRIMARY KEY,
    ev_high bigint NOT NULL,
    snapshot text,
    tick_time double precision NOT NULL,
    tick_local boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS baton_node (
    name text PRIMARY KEY,
    location text NOT NULL,
    dead boolean NOT NULL DEFAULT false
);
CREATE TABLE IF NOT EXISTS baton_local (key text PRIMARY KEY, value text);
CREATE TABLE IF NOT EXISTS baton_subscriber (
    name text PRIMARY KEY,
    watermark bigint NOT NULL,
    updated double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS baton_table (
    name text PRIMARY KEY,
    state text NOT NULL,
    tick bigint NOT NULL DEFAULT 0
);
"""

# SECURITY DEFINER: writers of captured tables need no privilege on baton_event (as PgQ does);
# hence the pinned search_path and the schema-qualified table. A statement-level trigger: one
# call and one INSERT ... SELECT per statement, reading the rows the statement changed from its
# transition tables, where a row trigger paid a call (and the SET clauses) and two or three
# queries per row. A transition table is read in its own order (the order in which the
# statement changed the rows, the order row triggers fire in): a plain scan of it feeds the
# INSERT, which takes the event ids in that order (OFFSET 0 keeps the row's JSON from being
# built twice). An UPDATE's old and new tables hold the same rows in the same order, so the n-th
# old row is the n-th new row's before-image: both are numbered and joined, and the events
# sorted by that number (volatile defaults are evaluated after the ORDER BY). The key is built
# by hand from the row's JSON so that it stays compact and in key order (json_build_object
# adds spaces, jsonb reorders keys), and the same key always has the same text (apply groups
# events by it); a one-column key without a subquery per row.
_KEY = (
    "CASE WHEN key1 IS NULL THEN (SELECT '{{{{' || coalesce(string_agg(to_json(k.c)::text "
    "|| ':' || ({row} -> k.c)::text, ',' ORDER BY k.n), '') || '}}}}' "
    "FROM unnest(TG_ARGV) WITH ORDINALITY AS k(c, n)) "
    "ELSE prefix || ({row} -> key1)::text || '}}}}' END"
)
_CAPTURE_FN = f"""
CREATE OR REPLACE FUNCTION {{schema}}.{CAPTURE_FUNCTION}() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET extra_float_digits = 3
AS $baton$
DECLARE
    txid bigint;
    key1 text;  -- the key column when the key is one column (else NULL)
    prefix text;  -- then its name as the key's JSON text starts with it
BEGIN
    IF current_setting('baton.merging', true) = 'on' THEN
        RETURN NULL;  -- a merge-leaf writing rows: it queues the partition's own events
    END IF;
    txid := pg_current_xact_id()::text::bigint;
    IF TG_NARGS = 1 THEN
        key1 := TG_ARGV[0];
        prefix := '{{{{' || to_json(key1)::text || ':';
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {{schema}}.baton_event (ev_txid, ev_time, ev_type, ev_table, ev_key, ev_data)
        SELECT txid, extract(epoch FROM clock_timestamp())::float8, 'I', TG_TABLE_NAME,
               {_KEY.format(row="r.j")}, r.j::text
          FROM (SELECT row_to_json(t.*) AS j FROM baton_new t OFFSET 0) r;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {{schema}}.baton_event (ev_txid, ev_time, ev_type, ev_table, ev_key)
        SELECT txid, extract(epoch FROM clock_timestamp())::float8, 'D', TG_TABLE_NAME,
               {_KEY.format(row="r.j")}
          FROM (SELECT row_to_json(t.*) AS j FROM baton_old t OFFSET 0) r;
    ELSE
        -- A key change is an update of another row: delete the old key, then write the new.
        INSERT INTO {{schema}}.baton_event (ev_txid, ev_time, ev_type, ev_table, ev_key, ev_data)
        WITH o AS (SELECT row_number() OVER () AS n, row_to_json(t.*) AS j FROM baton_old t),
             w AS (SELECT row_number() OVER () AS n, row_to_json(t.*) AS j FROM baton_new t),
             p AS (SELECT w.n, {_KEY.format(row="o.j")} AS old_key,
                          {_KEY.format(row="w.j")} AS new_key, w.j
                     FROM o JOIN w ON o.n = w.n)
        SELECT txid, extract(epoch FROM clock_timestamp())::float8, e.ty, TG_TABLE_NAME,
               e.key, e.data
          FROM (SELECT n, 0 AS s, 'D' AS ty, old_key AS key, NULL::text AS data FROM p
                 WHERE old_key IS DISTINCT FROM new_key
                UNION ALL
                SELECT n, 1, 'U', new_key, j::text FROM p) e
         ORDER BY e.n, e.s;
    END IF;
    RETURN NULL;
END
$baton$
"""

#: The capture triggers, one per kind of change (a trigger with transition tables may have only
#: one event), and the transition tables each names. Triggers whose name starts with
#: ``baton_capture`` are baton's: an older baton installed one row trigger ``baton_capture``.
_CAPTURE_TRIGGERS = (
    ("baton_capture_i", "INSERT", "NEW TABLE AS baton_new"),
    ("baton_capture_u", "UPDATE", "OLD TABLE AS baton_old NEW TABLE AS baton_new"),
    ("baton_capture_d", "DELETE", "OLD TABLE AS baton_old"),
)

_PASSWORD = re.compile(r"://[^:/@]*:(?P<pw>[^@/]*)@")


def _name(name: str) -> sql.Identifier:
    """``name`` as an SQL identifier, after the same check as the SQLite backend's."""
    ident(name)
    return sql.Identifier(name)


def _on_conflict(table: str, columns: Sequence[str], pk: Sequence[str]) -> sql.Composable:
    """The ``ON CONFLICT`` action of an upsert of ``columns`` into ``table`` keyed by ``pk``;
    :class:`CascadeInputError` when the key is not among the columns written."""
    if not pk or set(pk) - set(columns):
        raise CascadeInputError(f"cannot upsert into {table!r}: its key {pk} is not in {columns}")
    updates = [sql.SQL("{0} = excluded.{0}").format(_name(c)) for c in columns if c not in pk]
    if not updates:
        return sql.SQL("DO NOTHING")
    return sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(updates))


def _text(value: Any) -> str | None:
    """A value as the text PostgreSQL casts to the column's type (None stays NULL)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, ExactNumber):
        whole = "e" in value.text.lower() and value.is_integer() and abs(value) < 2**63
        if not whole:
            return value.text  # a number as written: the target casts it without rounding
        # else a whole double in exponent form (from SQLite): '5' suits integer columns too
    if isinstance(value, float):
        # A whole float may come from a backend without an integer type: '5' suits integer
        # columns as well as floating ones ('5.0' does not). Minus zero keeps its sign.
        minus_zero = value == 0 and math.copysign(1.0, value) < 0
        if value.is_integer() and abs(value) < 2**63 and not minus_zero:
            return str(int(value))
        return repr(value)  # the shortest text that reads back to the same double
    if isinstance(value, dict | list):
        return json.dumps(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def _one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A ``pg_snapshot``: transactions below xmin are visible, from xmax on invisible, and in
    between visible unless listed as in progress."""

    text: str
    xmin: int
    xmax: int
    xip: frozenset[int]

    @classmethod
    def parse(cls, text: str | None) -> _Snapshot | None:
        if not text:
            return None
        try:
            xmin, xmax, xip = text.split(":")
            return cls(text, int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))
        except ValueError:
            return None

    def visible(self, txid: int) -> bool:
        return txid < self.xmin or (txid < self.xmax and txid not in self.xip)


@dataclass(frozen=True, slots=True)
class _TickRow:
    """A tick and, when it was made here, its snapshot (None for a copied tick)."""

    tick: Tick
    snap: _Snapshot | None

    @classmethod
    def of(cls, row: Sequence[Any]) -> _TickRow:
        tick = Tick(tick_id=row[0], ev_high=row[1], snapshot=row[2], time=row[3])
        return cls(tick, _Snapshot.parse(row[2]) if row[4] else None)


def _seen(snap: _Snapshot, seen: bool = True) -> tuple[sql.Composable, list[Any]]:
    """The condition on captured events: their transaction is visible in ``snap`` (or, not
    ``seen``, it is not). Every transaction from xmax on is invisible and every one below xmin
    visible: the bound on ``ev_txid`` lets the txid index serve."""
    op, bound, negation = ("<", snap.xmax, "") if seen else (">=", snap.xmin, "NOT ")
    visible = "pg_visible_in_snapshot(ev_txid::text::xid8, %s::pg_snapshot)"
    return sql.SQL(f"ev_txid {op} %s AND {negation}{visible}"), [bound, snap.text]


_INTEGERS = ("bigint", "integer", "smallint")

_NONE = type(None)
_STRING = (str, _NONE)
#: Column types (as ``format_type`` names them; with a type modifier they are not here) whose
#: value ``json_to_record`` reads as :meth:`PostgresNodeDB.upsert` writes the decoded one, for
#: these value types: an integer's digits; a double's text as captured, which reads back to the
#: same double as its shortest repr (and keeps -0); a string's content, given to the type's
#: input function either way.
_IMAGE_TYPES: dict[str, tuple[type, ...]] = {
    **dict.fromkeys(("bigint", "integer", "smallint"), (int, _NONE)),
    **dict.fromkeys(("double precision", "real"), (int, float, str, _NONE)),
    "boolean": (bool, str, _NONE),
    **dict.fromkeys(
        ("text", "character varying", "bytea", "date", "uuid", "interval",
         "timestamp with time zone", "timestamp without time zone",
         "time with time zone", "time without time zone"),
        _STRING,
    ),
}  # fmt: skip
_TEXTS = ("text",)

#: Settings of ``bucket_sums``'s transaction. The text forms it hashes must not depend on a
#: session's settings (the two databases' may differ); JIT compiling costs more than it saves
#: for one pass; and a hash aggregate is the cheap plan for a group per bucket (the planner,
#: not knowing the key's spread, would sort every row, on disk).
_SUM_SETTINGS = tuple(
    sql.SQL("SET LOCAL {} = {}").format(sql.Identifier(name), sql.Literal(value))
    for name, value in (
        ("jit", "off"),
        ("enable_sort", "off"),
        ("work_mem", "64MB"),
        ("TimeZone", "UTC"),
        ("DateStyle", "ISO, YMD"),
        ("IntervalStyle", "postgres"),
        ("extra_float_digits", "3"),
        ("bytea_output", "hex"),
    )
)


def _column_hash(column: str, type_: str, seed: int) -> sql.Composable:
    """A 64-bit hash of one column's value, equal for two values only when capture's rules
    (:func:`baton.cascade.table_diff.same_value`) could call them the same, but for a
    collision. The type's own hash where it is that exact: integers (any width alike), text by
    its bytes, numeric by value; a double's hash takes minus zero for zero, so a zero is
    hashed by its text ('-0' or '0'). Any other type by its text form, which the settings of
    :data:`_SUM_SETTINGS` make the same in both databases. NULL is a mark of its own."""
    c = _name(column)
    s = sql.Literal(seed)
    if type_ in _INTEGERS or type_ == "boolean":
        h = sql.SQL("hashint8extended({}::int::bigint, {})" if type_ == "boolean"
                    else "hashint8extended({}::bigint, {})").format(c, s)  # fmt: skip
    elif type_ in _TEXTS or type_.startswith("character varying"):
        h = sql.SQL('hashtextextended({}::text COLLATE "C", {})').format(c, s)
    elif type_ in ("double precision", "real"):
        h = sql.SQL(
            "CASE WHEN {c} = 0 THEN hashtextextended({c}::text, {s}) "
            "ELSE hashfloat8extended({c}::float8, {s}) END"
        ).format(c=c, s=s)
    elif type_.startswith("numeric"):
        h = sql.SQL("hash_numeric_extended({}, {})").format(c, s)
    else:
        h = sql.SQL("hashtextextended({}::text, {})").format(c, s)
    return sql.SQL("coalesce({}, {})").format(h, sql.Literal(_NULL_MARK ^ seed))


#: The hash of a NULL column (with the column's seed mixed in).
_NULL_MARK = 0x2F6B_3C1D_55A9_E047


def row_fingerprint(catalog: Sequence[tuple[str, str, int | None]]) -> sql.Composable:
    """A row's 64-bit fingerprint for ``bucket_sums``: its columns' hashes, each seeded by the
    column's name (so neither the tables' column order nor two columns' swapped values go
    unseen), combined by XOR and hashed once more, so that the XOR of a bucket's rows cannot
    cancel values moved between rows. About half the cost of ``hash_record_extended`` of the
    row, which forms each row into a record first."""
    parts = [_column_hash(c, t, zlib.crc32(c.encode())) for c, t, _ in catalog]
    return sql.SQL("hashint8extended({}, 0)").format(sql.SQL(" # ").join(parts))


def _covered(upto: _TickRow | None, covered: bool = True) -> tuple[sql.Composable, list[Any]]:
    """The condition on captured (``ev_tick IS NULL``) events: in a batch up to ``upto`` (or,
    not ``covered``, after it: the negation)."""
    if upto is None:
        return sql.SQL("FALSE" if covered else "TRUE"), []
    if upto.snap is None:
        return sql.SQL("ev_id <= %s" if covered else "ev_id > %s"), [upto.tick.ev_high]
    return _seen(upto.snap, covered)


def _after(tick: _TickRow | None) -> tuple[sql.Composable, list[Any]]:
    """The condition on captured events: not in a batch up to ``tick``."""
    return _covered(tick, covered=False)


def _is_after(tick: _TickRow | None, ev_id: int, txid: int) -> bool:
    """:func:`_after` in Python, for one event."""
    if tick is None:
        return True
    if tick.snap is None:
        return ev_id > tick.tick.ev_high
    return not tick.snap.visible(txid)


@dataclass(slots=True)
class _Run:
    """Consecutive local ticks of a range and the tick before them: their batches hold the
    captured events after ``before`` and visible in the last tick's snapshot."""

    before: _TickRow | None
    ticks: list[tuple[int, _Snapshot]]

    def condition(self) -> tuple[sql.Composable, list[Any]]:
        low, low_args = _after(self.before)
        high, high_args = _seen(self.ticks[-1][1])
        return sql.SQL("({} AND {})").format(low, high), [*low_args, *high_args]

    def tick_of(self, ev_id: int, txid: int) -> int | None:
        """The first tick of the run whose snapshot sees the event (None: not in the run)."""
        if not _is_after(self.before, ev_id, txid):
            return None
        return next((t for t, snap in self.ticks if snap.visible(txid)), None)


#: Idle connections kept per node location in one process, and for how long.
POOL_SIZE = 4
POOL_IDLE_SECONDS = 30.0
_POOL: dict[str, list[tuple[PostgresNodeDB, float]]] = {}
_POOL_LOCK = threading.Lock()


def _forget_pool_in_child() -> None:
    # The child's copies of the parent's connections share its sockets: never use or close them.
    _POOL.clear()


os.register_at_fork(after_in_child=_forget_pool_in_child)


#: The guard triggers' function: a direct write of a replicated table at a node that does not
#: capture it is refused, unless the transaction is baton's own or an operator's who said so
#: (``SET LOCAL baton.writer = 'on'``). Statement-level: one check per statement.
_GUARD_FN = f"""
CREATE OR REPLACE FUNCTION {{schema}}.baton_deny() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('baton.writer', true) IS DISTINCT FROM 'on' THEN
        RAISE EXCEPTION USING ERRCODE = '{DENY_SQLSTATE}', MESSAGE = TG_ARGV[0];
    END IF;
    RETURN NULL;
END
$$
"""


class PostgresNodeDB(NodeDB):
    """A node database in PostgreSQL (``postgresql://user[:password]@host[:port]/db``), in the
    connection's default schema. See the module docstring for how batches are cut."""

    _mark = "%s"
    _now = _NOW

    def __init__(self, location: str) -> None:
        self.location = location
        self._database, self.part = split_location(location)
        self._shown = redact_url(location)
        self._reader: _Conn | None = None
        self._pid = os.getpid()
        self.conn = self._connect()
        try:
            row = self.conn.execute("SELECT current_schema()").fetchone()
        except psycopg.Error as exc:
            self.conn.close()
            raise self._failure("cannot use", exc) from exc
        if row is None or row[0] is None:
            self.conn.close()
            raise CascadeInputError(f"{self._shown}: no schema in the search_path exists")
        self.schema: str = row[0]
        digest = hashlib.blake2b(f"baton.node:{self.schema}".encode(), digest_size=8).digest()
        self._lock_key = int.from_bytes(digest, "big", signed=True)

    def _failure(
        self, what: str, exc: BaseException, other: type[CascadeError] = NodeDatabaseError
    ) -> CascadeError:
        """``exc`` as baton's error, by its class: :class:`NodeUnreachable` for the server
        (``OperationalError``: cannot connect, connection lost, server shutting down), else
        ``other``. One line naming the node, with no password in it (not even one the driver
        quotes from a URL it could not parse)."""
        detail = redact_url(_one_line(str(exc))) or type(exc).__name__
        secrets = {m["pw"] for m in _PASSWORD.finditer(self.location)}
        with contextlib.suppress(psycopg.Error):
            secrets.add(conninfo_to_dict(self._database).get("password") or "")
        for secret in sorted(secrets - {""}, key=len, reverse=True):
            detail = detail.replace(secret, "***")
        message = f"{what} PostgreSQL node {self._shown}: {detail}"
        if isinstance(exc, psycopg.OperationalError):  # the server, not the input
            return NodeUnreachable(message)
        return other(message)

    def _connect(self, *settings: str) -> _Conn:
        try:
            params: dict[str, Any] = conninfo_to_dict(self._database)
            params.setdefault("connect_timeout", 10)
            params.setdefault("application_name", "baton-cascade")
            # Doubles read back exactly whatever the server's default says.
            opts = " ".join(f"-c {s}" for s in ("extra_float_digits=3", *settings))
            params["options"] = f"{params.get('options', '')} {opts}".strip()
            conn = psycopg.connect(**params, autocommit=True)
        except psycopg.OperationalError as exc:
            raise self._failure("cannot connect to", exc) from exc
        except (psycopg.Error, ValueError) as exc:
            # A location that cannot be parsed: the driver's message may quote its password.
            raise self._failure("cannot connect to", exc, CascadeInputError) from None
        # READ COMMITTED whatever the server's default: make_tick relies on each statement
        # taking a fresh snapshot once the node's lock is held.
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        return conn

    @classmethod
    def open(cls, location: str) -> PostgresNodeDB:
        """An idle connection to ``location`` from this process's pool, or a new one."""
        now = time.monotonic()
        with _POOL_LOCK:
            idle = _POOL.get(location, [])
            while idle:
                db, since = idle.pop()
                if now - since < POOL_IDLE_SECONDS and db._healthy():
                    break
                db._close_connections()
            else:
                return cls(location)
        try:
            db.conn.execute("SELECT 1")  # a restarted server: find out here, not mid-operation
        except psycopg.Error:
            db._close_connections()
            return cls(location)
        return db

    def _healthy(self) -> bool:
        return (
            self._pid == os.getpid()
            and not self.conn.closed
            and not self.conn.broken
            and self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        )

    def close(self) -> None:
        """Give the connections back to the process's pool (at most :data:`POOL_SIZE` idle per
        location), or close them. Opening a connection costs a PostgreSQL backend and several
        round trips; the ticker, the Spark source and the apply step open a node many times a
        second."""
        if self._healthy():
            with _POOL_LOCK:
                idle = _POOL.setdefault(self.location, [])
                if len(idle) < POOL_SIZE:
                    idle.append((self, time.monotonic()))
                    return
        self._close_connections()

    def _close_connections(self) -> None:
        if self._pid != os.getpid():
            return  # a forked child must not close its parent's sockets
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
        self.conn.close()

    def install(self) -> None:
        """Create the baton_* tables and the capture function if missing (idempotent)."""
        schema = sql.Identifier(self.schema)
        with self.transaction() as cur:
            if self.part:  # a merge-leaf: its own node tables; the queue is the host's
                cur.execute(node_schema(_SCHEMA, self.part))
                return
            cur.execute(_SCHEMA)
            cur.execute(sql.SQL(_CAPTURE_FN).format(schema=schema))

    @contextlib.contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        """Inside: a driver error leaves as baton's (see :meth:`_failure`)."""
        try:
            yield
        except psycopg.Error as exc:
            raise self._failure(what, exc) from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_Cur]:
        """A transaction holding the node's advisory lock (see the module docstring)."""
        with (
            self._translated("cannot write to"),
            self.conn.transaction(),
            self.conn.cursor() as cur,
        ):
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            # baton's own write (the apply path, the copy, execute, the operations): the
            # guard triggers of a node that does not capture a table let it through.
            cur.execute("SELECT set_config('baton.writer', 'on', true)")
            yield cur

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """A REPEATABLE READ, READ ONLY transaction on the main connection: every read of it
        (not the streams of :meth:`_stream`, on their own connection) sees one snapshot."""
        with self._translated("cannot read from"), self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def _rows(self, query: _Query, args: Sequence[Any] = ()) -> list[Any]:
        try:
            return self.conn.execute(query, args).fetchall()
        except psycopg.Error as exc:
            failure = self._failure("cannot read from", exc)
            if isinstance(exc, psycopg.errors.UndefinedTable) and self._missing_tables():
                raise NotANode(f"{self._shown} is not a cascade node") from exc
            raise failure from exc

    def _missing_tables(self) -> bool:
        """Whether any of the node's own tables is missing from its schema (False when that
        cannot be read, e.g. in a transaction the failed read aborted: its error says more)."""
        if self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return False
        try:
            row = self.conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename = ANY(%s)",
                (self.schema, list(self.own_tables(TABLES))),
            ).fetchone()
        except psycopg.Error:
            return False
        return row is None or row[0] < len(TABLES)

    # -- queue ----------------------------------------------------------------------------

    def _tick_row(self, tick_id: int) -> _TickRow | None:
        row = self._one(f"SELECT {_TICK_COLS} FROM baton_tick WHERE tick_id = %s", (tick_id,))
        return None if row is None else _TickRow.of(row)

    def _last_row(self) -> _TickRow | None:
        row = self._one(f"SELECT {_TICK_COLS} FROM baton_tick ORDER BY tick_id DESC LIMIT 1")
        return None if row is None else _TickRow.of(row)

    def _tick_rows(self, after: int, upto: int) -> list[_TickRow]:
        rows = self._rows(
            f"SELECT {_TICK_COLS} FROM baton_tick WHERE tick_id > %s AND tick_id <= %s "
            "ORDER BY tick_id",
            (after, upto),
        )
        return [_TickRow.of(r) for r in rows]

    def last_tick(self) -> Tick | None:
        row = self._last_row()
        return None if row is None else row.tick

    def get_tick(self, tick_id: int) -> Tick | None:
        row = self._tick_row(tick_id)
        return None if row is None else row.tick

    def ticks(self, after: int, upto: int) -> list[Tick]:
        return [r.tick for r in self._tick_rows(after, upto)]

    def _stream(self, where: sql.Composable, args: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        """The events matching ``where`` in id order, through a server-side cursor on the
        reader connection (taken while in use, so nested streams open their own)."""
        conn, self._reader = self._reader, None
        if conn is None or conn.closed:
            # Scanning an index in id order to return the first rows fast is rarely cheaper
            # than fetching a batch through its indexes and sorting it: plan for all rows.
            conn = self._connect("cursor_tuple_fraction=1")
        done = False
        try:
            query = sql.SQL("SELECT {} FROM baton_event WHERE {} ORDER BY ev_id").format(
                sql.SQL(_EVENT_COLS), where
            )
            with (
                self._translated("cannot read from"),
                conn.transaction(),
                conn.cursor(name="baton_events") as cur,
            ):
                cur.execute(query, args)
                # Page by page: a server cursor's own iterator runs Python code per row.
                while rows := cur.fetchmany(_FETCH):
                    yield from rows
                    if len(rows) < _FETCH:
                        break
            done = True
        finally:
            if done and self._reader is None and not self.conn.closed:
                self._reader = conn
            else:
                conn.close()

    def batch_events(self, after: int, upto: int) -> Iterator[Event]:
        if self.get_tick(upto) is None:
            return
        before = self._tick_row(after)
        runs: list[_Run] = []
        run: _Run | None = None
        for row in self._tick_rows(after, upto):
            if row.snap is None:
                run = None  # a copied tick: its events carry it
            else:
                if run is None:
                    run = _Run(before, [])
                    runs.append(run)
                run.ticks.append((row.tick.tick_id, row.snap))
            before = row
        parts: list[sql.Composable] = [sql.SQL("(ev_tick > %s AND ev_tick <= %s)")]
        args: list[Any] = [after, upto]
        for r in runs:
            cond, cond_args = r.condition()
            parts.append(sql.SQL("(ev_tick IS NULL AND {})").format(cond))
            args += cond_args
        # A captured event's tick depends on its transaction alone when every run starts after
        # a tick with a snapshot (or at the start): then it is looked up once per transaction
        # (hundreds of events each), not once per event.
        by_txid: dict[int, int] | None = (
            {} if all(r.before is None or r.before.snap is not None for r in runs) else None
        )
        for e in self._stream(sql.SQL(" OR ").join(parts), args):
            if e[7] is not None:
                # The row is the event's fields in order (see _EVENT_COLS): made into one as
                # it is, with no call of Event's own constructor, which runs Python code.
                yield _new_event(Event, e)
                continue
            txid = e[6]
            tick = None if by_txid is None else by_txid.get(txid)
            if tick is None:
                # The first tick of the range whose snapshot sees the event's transaction.
                tick = next(t for r in runs if (t := r.tick_of(e[0], txid)) is not None)
                if by_txid is not None:
                    by_txid[txid] = tick
            yield _new_event(Event, (*e[:7], tick))

    def make_tick(self, cur: Any, min_events: int = 0) -> Tick | None:
        """Root: make the next tick with this transaction's snapshot. Must run in a transaction
        that has written no event: its own events would commit after the snapshot that is
        meant to cover them (PgQ's ticker has the same rule)."""
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))  # see transaction()
        own = cur.execute(
            "SELECT count(*) FROM baton_event WHERE ev_tick IS NULL "
            "AND ev_txid = pg_current_xact_id_if_assigned()::text::bigint"
        ).fetchone()[0]
        if own:
            raise CascadeError("make a tick in a transaction of its own: this one wrote events")
        row = cur.execute(
            f"SELECT {_TICK_COLS} FROM baton_tick ORDER BY tick_id DESC LIMIT 1"
        ).fetchone()
        last = None if row is None else _TickRow.of(row)
        tick_id, low = (last.tick.tick_id, last.tick.ev_high) if last else (0, 0)
        if min_events > 0:
            cond, args = _after(last)
            query = sql.SQL("SELECT count(*) FROM baton_event WHERE ev_tick IS NULL AND {}")
            if cur.execute(query.format(cond), args).fetchone()[0] < min_events:
                return None
        # One statement: the snapshot and the highest id it sees are the same snapshot's.
        high, snapshot, now = cur.execute(
            "INSERT INTO baton_tick (tick_id, ev_high, snapshot, tick_time, tick_local) "
            f"SELECT %s, greatest(coalesce(max(ev_id), 0), %s), pg_current_snapshot()::text, "
            f"{_NOW}, true FROM baton_event RETURNING ev_high, snapshot, tick_time",
            (tick_id + 1, low),
        ).fetchone()
        return Tick(tick_id + 1, high, now, snapshot)

    def pending(self) -> tuple[int, float | None]:
        cond, args = _after(self._last_row())
        row = self._one(
            sql.SQL(
                "SELECT count(*), min(ev_time) FROM baton_event WHERE ev_tick IS NULL AND {}"
            ).format(cond),
            args,
        )
        return int(row[0]), row[1]

    def insert_event(
        self, cur: Any, type_: str, table: str | None, key: str | None, data: str | None
    ) -> int:
        row = cur.execute(
            "INSERT INTO baton_event (ev_txid, ev_time, ev_type, ev_table, ev_key, ev_data) "
            f"VALUES ({_TXID}, {_NOW}, %s, %s, %s, %s) RETURNING ev_id",
            (type_, table, key, data),
        ).fetchone()
        return int(row[0])

    def insert_events(self, cur: Any, events: Sequence[Event]) -> None:
        cur.executemany(
            "INSERT INTO baton_event (ev_txid, ev_time, ev_type, ev_table, ev_key, ev_data) "
            f"VALUES ({_TXID}, {_NOW}, %s, %s, %s, %s)",
            [(e.type, e.table, e.key, e.data) for e in events],
        )

    def capture_mark(self, cur: Any) -> int:
        # The capture function writes nothing while this is on (for this transaction only).
        cur.execute("SELECT set_config('baton.merging', 'on', true)")
        return 0  # events are told apart by transaction id here

    def drop_captured(self, cur: Any, mark: int) -> None:
        cur.execute("SELECT set_config('baton.merging', 'off', true)")
        # A capture function installed before the setting existed captured them: drop those.
        cur.execute(
            f"DELETE FROM baton_event WHERE ev_tick IS NULL AND ev_txid = {_TXID} AND ev_id > %s",
            (mark,),
        )

    def bump_event_ids(self, cur: Any, above: int) -> None:
        # A sequence never hands out an id twice (trimming changes nothing); only raise it.
        if above > 0:
            cur.execute(
                "SELECT setval('baton_event_id_seq', greatest(%s, last_value)) "
                "FROM baton_event_id_seq",
                (above,),
            )

    def copy_batch(self, cur: Any, events: Sequence[Event], ticks: Sequence[Tick]) -> None:
        if events:
            # COPY in binary: the rows are dumped by psycopg's C code and loaded without a
            # statement to plan; the arrays of an INSERT ... unnest were dumped in Python (a
            # quarter of a large batch's time on a branch, profiled).
            with cur.copy(
                "COPY baton_event (ev_id, ev_txid, ev_time, ev_type, ev_table, ev_key, ev_data, "
                "ev_tick) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["int8", "int8", "float8", "text", "text", "text", "text", "int8"])
                for e in events:
                    copy.write_row(
                        (e.ev_id, e.txid, e.time, e.type, e.table, e.key, e.data, e.tick)
                    )
        if ticks:
            cur.execute(
                "INSERT INTO baton_tick (tick_id, ev_high, snapshot, tick_time) "
                "SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::text[], %b::float8[])",
                [
                    [t.tick_id for t in ticks],
                    [t.ev_high for t in ticks],
                    [t.snapshot for t in ticks],
                    [t.time for t in ticks],
                ],
            )
        # Should this node become the root, its own ids must go on above the ones it copied
        # (and above the ticks' highs, which its first batch starts after).
        self.bump_event_ids(
            cur, max([e.ev_id for e in events] + [t.ev_high for t in ticks], default=0)
        )

    def events_after(self, tick_id: int) -> Iterator[Event]:
        cond, args = _after(self._tick_row(tick_id))
        where = sql.SQL("ev_tick > %s OR (ev_tick IS NULL AND {})").format(cond)
        for e in self._stream(where, [tick_id, *args]):
            yield _new_event(Event, e)

    def _row_events_after(self, table: str, tick_id: int) -> list[tuple[int, str | None, Any]]:
        cond, args = _after(self._tick_row(tick_id))
        where = sql.SQL(
            "ev_table = %s AND ev_type = ANY(%s) AND (ev_tick > %s OR (ev_tick IS NULL AND {}))"
        ).format(cond)
        query = sql.SQL("SELECT ev_id, ev_key, ev_tick FROM baton_event WHERE {}").format(where)
        return self._rows(query, [table, sorted(ROW_TYPES), tick_id, *args])

    def discard_after(self, cur: Any, tick_id: int) -> None:
        """Delete the later ticks and the events :meth:`events_after` returns. Captured events
        of transactions still open are not seen, so not deleted: stop capture first."""
        cond, args = _after(self._tick_row(tick_id))
        cur.execute("DELETE FROM baton_event WHERE ev_tick > %s", (tick_id,))
        cur.execute(
            sql.SQL("DELETE FROM baton_event WHERE ev_tick IS NULL AND {}").format(cond), args
        )
        cur.execute("DELETE FROM baton_tick WHERE tick_id > %s", (tick_id,))

    def trim(self, cur: Any, below_tick: int) -> int:
        """Delete about :data:`TRIM_STEP` events at most, the oldest, of those below
        ``below_tick``; the next trims delete the rest."""
        if (
            cur.execute("SELECT 1 FROM baton_tick WHERE tick_id = %s", (below_tick,)).fetchone()
            is None
        ):
            return 0
        below_tick = self._trim_bound(cur, below_tick, TRIM_STEP)
        row = cur.execute(
            f"SELECT {_TICK_COLS} FROM baton_tick WHERE tick_id < %s ORDER BY tick_id DESC LIMIT 1",
            (below_tick,),
        ).fetchone()
        last = None if row is None else _TickRow.of(row)
        # Both deletes are bounded below by what earlier trims took, not only above: the rows
        # they deleted stay in the indexes until a vacuum, and a delete bounded only above
        # walked all of them, index entries and heap pages, every time (measured behind a
        # 1M-event catch-up: 1.2 M dead entries and 23,000 pages for 2,600 rows, 80-120 ms a
        # trim, twice a second, in the ticker's turn: the lag's sawtooth).
        # Copied events: every event of a tick below the oldest tick left went with its tick.
        oldest = cur.execute("SELECT min(tick_id) FROM baton_tick").fetchone()[0]
        n = cur.execute(
            "DELETE FROM baton_event WHERE ev_tick >= %s AND ev_tick < %s", (oldest, below_tick)
        ).rowcount
        # Captured events go with the batches up to the last tick below ``below_tick``.
        cond, args = _covered(last)
        if last is not None and last.snap is not None:
            floor = self._trim_floor()
            # A floor above this tick's own xmin is not one of this database's (one restored
            # into a new cluster starts its ids again): it must not hide events from trims.
            if floor is not None and floor <= last.snap.xmin:
                cond, args = sql.SQL("ev_txid >= %s AND {}").format(cond), [floor, *args]
        n += cur.execute(
            sql.SQL("DELETE FROM baton_event WHERE ev_tick IS NULL AND {}").format(cond), args
        ).rowcount
        if last is not None and last.snap is not None:
            # Every transaction below the snapshot's xmin had ended when it was taken, so
            # each of its events was visible in it and is deleted now; no later transaction
            # gets an id that low.
            self.host_set(cur, TRIM_FLOOR_KEY, str(last.snap.xmin))
        n += cur.execute("DELETE FROM baton_tick WHERE tick_id < %s", (below_tick,)).rowcount
        return int(n)

    def _trim_floor(self) -> int | None:
        """The transaction id below which an earlier trim left no captured event, or None
        (read on the trim's own connection, inside its transaction)."""
        value = self.host_get(TRIM_FLOOR_KEY)
        try:
            return None if value is None else int(value)
        except ValueError:
            return None  # not a number: no floor, every captured event is looked at

    # -- replicated tables ------------------------------------------------------------------

    def _catalog(self, table: str) -> list[tuple[str, str, int | None]]:
        """(column, type, position in the primary key or None) in table order."""
        name = ident(table)  # to_regclass takes the quoted name: no case folding
        rows = self._rows(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
            "array_position(i.indkey::int2[], a.attnum) "
            "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid "
            "LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary "
            "WHERE c.oid = to_regclass(%s) AND c.relkind IN ('r', 'p') "
            "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (name,),
        )
        if not rows:
            raise CascadeInputError(f"no table {table!r} in {self._shown}")
        return [(r[0], r[1], r[2]) for r in rows]

    def columns(self, table: str) -> tuple[list[str], list[str]]:
        cat = self._catalog(table)
        pk = sorted((pos, c) for c, _, pos in cat if pos is not None)
        return [c for c, _, _ in cat], [c for _, c in pk]

    def exact_numbers(self, table: str) -> bool:
        return any(t.startswith("numeric") for _, t, _ in self._catalog(table))

    def bucket_sums(self, table: str, size: int) -> dict[int, tuple[int, int]] | None:
        catalog = self._catalog(table)
        keys = [(c, t) for c, t, pos in catalog if pos is not None]
        if len(keys) != 1 or keys[0][1] not in _INTEGERS:
            return None
        # The bucket of k is k / size in integer division (toward zero: see bucket_range).
        # Each row's fingerprint is built from its columns' own hashes (row_fingerprint);
        # the XOR of a bucket's fingerprints is as good as their sum, for less work.
        query = sql.SQL("SELECT {key} / %s, count(*), bit_xor({row}) FROM {t} GROUP BY 1").format(
            key=_name(keys[0][0]), row=row_fingerprint(catalog), t=_name(table)
        )
        try:
            with self.conn.transaction():
                for setting in _SUM_SETTINGS:
                    self.conn.execute(setting)
                rows = self._rows(query, (size,))
        except (NodeDatabaseError, psycopg.Error):
            return None  # the pass is an optimisation: every row is read instead
        return {int(b): (int(n), int(h)) for b, n, h in rows}

    def key_ranges(self, table: str, rows: int) -> list[tuple[int, int]] | None:
        """Ranges of about ``rows`` rows each of ``table``'s key, cut by row count (one pass
        over the key's index), when its primary key is one integer column; else None. For
        reads in parallel that may each see another moment (``compare``: a key changed in
        between is one it leaves to the queue)."""
        keys = [c for c, t, pos in self._catalog(table) if pos is not None]
        types = {c: t for c, t, _ in self._catalog(table)}
        if len(keys) != 1 or types[keys[0]] not in ("bigint", "integer", "smallint"):
            return None
        key = _name(keys[0])
        starts = [
            int(r[0])
            for r in self._rows(
                sql.SQL(
                    "SELECT k FROM (SELECT {key} AS k, row_number() OVER (ORDER BY {key}) AS n "
                    "FROM {t}) s WHERE (n - 1) %% %s = 0 ORDER BY k"
                ).format(key=key, t=_name(table)),
                (rows,),
            )
        ]
        if not starts:
            return None
        high = int(self._one(sql.SQL("SELECT max({}) FROM {}").format(key, _name(table)))[0])
        ends = [b - 1 for b in starts[1:]] + [high]
        return list(zip(starts, ends, strict=True))

    def capture(self, cur: Any, table: str, on: bool) -> None:
        """Install (``on``) or drop ``table``'s capture triggers. Installing drops whatever
        capture the table had first, the row trigger of an older baton included, and defines
        the capture function afresh: a node installed by an older baton gets the current one
        the next time its tables are captured (``add-table`` at the root, a promotion,
        ``execute``)."""
        _, pk = self.columns(table)
        t = _name(table)
        schema = sql.Identifier(self.schema)
        for name in ("baton_capture", *(n for n, _, _ in _CAPTURE_TRIGGERS)):
            cur.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(name), t))
        if not on:
            return
        cur.execute(sql.SQL(_CAPTURE_FN).format(schema=schema))
        keys = sql.SQL(", ").join(map(sql.Literal, pk))
        for name, event, tables in _CAPTURE_TRIGGERS:
            cur.execute(
                sql.SQL(
                    "CREATE TRIGGER {} AFTER {} ON {} REFERENCING {} "
                    "FOR EACH STATEMENT EXECUTE FUNCTION {}.{}({})"
                ).format(
                    sql.Identifier(name),
                    sql.SQL(event),
                    t,
                    sql.SQL(tables),
                    schema,
                    sql.Identifier(CAPTURE_FUNCTION),
                    keys,
                )
            )

    def _deny_has_code(self) -> bool:
        """Whether the guard function raises :data:`DENY_SQLSTATE` (one installed by an older
        baton raised the generic code: the next :meth:`guard` replaces it)."""
        found = self._one(
            "SELECT prosrc FROM pg_proc WHERE proname = 'baton_deny' "
            "AND pronamespace = current_schema()::regnamespace"
        )
        return found is not None and DENY_SQLSTATE in str(found[0])

    def guard(self, cur: Any, table: str, on: bool, message: str = "") -> None:
        self.columns(table)  # a table that is not there says so
        t = _name(table)
        schema = sql.Identifier(self.schema)
        if on:
            have = self._one(
                "SELECT t.tgargs FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "WHERE t.tgname = 'baton_deny' AND c.relname = %s "
                "AND c.relnamespace = current_schema()::regnamespace",
                (table,),
            )
            if (
                have is not None
                and bytes(have[0]).rstrip(b"\x00").decode() == message
                and self._deny_has_code()
            ):
                return  # already so
        cur.execute(sql.SQL("DROP TRIGGER IF EXISTS baton_deny ON {}").format(t))
        if not on:
            return
        cur.execute(sql.SQL(_GUARD_FN).format(schema=schema))
        cur.execute(
            sql.SQL(
                "CREATE TRIGGER baton_deny BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON {} "
                "FOR EACH STATEMENT EXECUTE FUNCTION {}.baton_deny({})"
            ).format(t, schema, sql.Literal(message))
        )

    def _unnest(
        self,
        table: str,
        columns: Sequence[str],
        values: Sequence[Sequence[Any]],
        alias: str,
        numbered: bool = False,
    ) -> tuple[sql.Composable, dict[str, sql.Composable], list[list[str | None]]]:
        """``unnest(one text[] per column) AS alias(columns)`` (with a row number ``baton_n``
        when ``numbered``), each column cast back to its type, and the arrays."""
        types = {c: t for c, t, _ in self._catalog(table)}
        for c in columns:
            if c not in types:
                raise CascadeInputError(f"table {table!r} has no column {c!r}")
        a = sql.Identifier(alias)
        cast: dict[str, sql.Composable] = {
            c: sql.SQL("CAST({}.{} AS {})").format(a, _name(c), sql.SQL(types[c])) for c in columns
        }
        names = [_name(c) for c in columns] + ([sql.Identifier("baton_n")] if numbered else [])
        source = sql.SQL("unnest({}) {}AS {}({})").format(
            # Binary parameters: psycopg escapes every element of a text-format array with a
            # regular expression, which took most of an apply's time.
            sql.SQL(", ").join(sql.SQL("%b::text[]") for _ in columns),
            sql.SQL("WITH ORDINALITY " if numbered else ""),
            a,
            sql.SQL(", ").join(names),
        )
        arrays = [[_text(v[i]) for v in values] for i in range(len(columns))]
        return source, cast, arrays

    def upsert(
        self, cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        if not rows:
            return
        _, pk = self.columns(table)
        conflict = _on_conflict(table, columns, pk)
        # ON CONFLICT may touch a row once per statement: the last row of a key wins, as it
        # would row by row.
        at = [list(columns).index(c) for c in pk]
        last = {tuple(_text(r[i]) for i in at): r for r in rows}
        source, cast, arrays = self._unnest(table, columns, list(last.values()), "baton_u")
        cur.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) {}").format(
                _name(table),
                sql.SQL(", ").join(_name(c) for c in columns),
                sql.SQL(", ").join(cast[c] for c in columns),
                source,
                sql.SQL(", ").join(_name(c) for c in pk),
                conflict,
            ),
            arrays,
        )

    def image_types(self, table: str) -> dict[str, tuple[type, ...]] | None:
        """Column -> the value types for which ``json_to_record`` (the JSON value's text, or a
        string's content, given to the column type's input function) writes what
        :meth:`upsert` (the decoded value's :func:`_text`, cast) would; None when any column's
        type is not one of those (json, arrays, numeric, whose scale an exponent form would
        change, and anything else are decoded)."""
        out: dict[str, tuple[type, ...]] = {}
        for column, type_, _ in self._catalog(table):
            allowed = _IMAGE_TYPES.get(type_)
            if allowed is None:
                return None
            out[column] = allowed
        return out

    def upsert_images(
        self, cur: Any, table: str, columns: Sequence[str], images: Sequence[str]
    ) -> None:
        if not images:
            return
        catalog = self._catalog(table)
        types = {c: t for c, t, _ in catalog}
        for c in columns:
            if c not in types:
                raise CascadeInputError(f"table {table!r} has no column {c!r}")
        pk = [c for _, c in sorted((pos, c) for c, _, pos in catalog if pos is not None)]
        conflict = _on_conflict(table, columns, pk)
        # The server reads each image: one JSON array of them to send, read by one
        # json_to_recordset, instead of a value per column converted to text in Python, which
        # took about as long as the statement itself. One document: the join is one C call
        # (a text[] parameter was dumped element by element in Python) and the server parses
        # it in one pass (each element of a text[] was cast to json and then read again by
        # json_to_record): 14 % less server time for a 20,000-row batch, the values read by
        # the same per-column input functions. The images are JSON objects (checked by
        # _as_image), so the array is well formed. json, not jsonb: json keeps each number's
        # text (jsonb would turn -0 into 0). In key order: the rows an upsert updates are
        # spread over the table, and visiting them in index order is cheaper than in the
        # events' order (4 % less server time, same batch).
        cur.execute(
            sql.SQL(
                "INSERT INTO {t} ({cols}) SELECT {r} FROM json_to_recordset(%s::json) "
                "AS baton_r({defs}) ORDER BY {order} ON CONFLICT ({pk}) {c}"
            ).format(
                t=_name(table),
                cols=sql.SQL(", ").join(_name(c) for c in columns),
                r=sql.SQL(", ").join(sql.SQL("baton_r.{}").format(_name(c)) for c in columns),
                defs=sql.SQL(", ").join(
                    sql.SQL("{} {}").format(_name(c), sql.SQL(types[c])) for c in columns
                ),
                order=sql.SQL(", ").join(sql.SQL("baton_r.{}").format(_name(c)) for c in pk),
                pk=sql.SQL(", ").join(_name(c) for c in pk),
                c=conflict,
            ),
            ["[" + ",".join(images) + "]"],
        )

    def _key_match(
        self, cast: dict[str, sql.Composable], key_columns: Sequence[str]
    ) -> sql.Composable:
        return sql.SQL(" AND ").join(
            sql.SQL("baton_d.{} = {}").format(_name(c), cast[c]) for c in key_columns
        )

    def delete_keys(
        self, cur: Any, table: str, key_columns: Sequence[str], keys: Sequence[Sequence[Any]]
    ) -> None:
        if not keys:
            return
        source, cast, arrays = self._unnest(table, key_columns, keys, "baton_k")
        cur.execute(
            sql.SQL("DELETE FROM {} AS baton_d USING {} WHERE {}").format(
                _name(table), source, self._key_match(cast, key_columns)
            ),
            arrays,
        )

    def read_keys(
        self, table: str, key_columns: Sequence[str], keys: Sequence[Sequence[Any]]
    ) -> list[tuple[Any, ...]]:
        if not keys:
            return []
        # Numbered keys give the rows in the order of the keys, as the SQLite backend does.
        source, cast, arrays = self._unnest(table, key_columns, keys, "baton_k", numbered=True)
        rows = self._rows(
            sql.SQL(
                "SELECT baton_d.* FROM {} JOIN {} AS baton_d ON {} ORDER BY baton_k.baton_n"
            ).format(source, _name(table), self._key_match(cast, key_columns)),
            arrays,
        )
        return [tuple(r) for r in rows]

    def read_rows(
        self, table: str, key_range: tuple[int, int] | None = None
    ) -> list[tuple[Any, ...]]:
        cols, pk = self.columns(table)
        order = sql.SQL(", ").join(_name(c) for c in pk or cols)
        if key_range is None:
            query = sql.SQL("SELECT * FROM {} ORDER BY {}").format(_name(table), order)
        else:
            query = sql.SQL("SELECT * FROM {} WHERE {} BETWEEN %s AND %s ORDER BY {}").format(
                _name(table), _name(pk[0]), order
            )
        rows = self._rows(query, key_range or ())
        return [tuple(r) for r in rows]

    # -- sequences, scripts, constraints and triggers (issue 16) -------------------------------

    def has_sequences(self) -> bool:
        return True

    def _sequence(self, seq: str) -> sql.Identifier:
        row = self._one(
            "SELECT 1 FROM pg_class WHERE relkind = 'S' AND relname = %s "
            "AND relnamespace = current_schema()::regnamespace",
            (seq,),
        )
        if row is None:
            raise CascadeInputError(f"no sequence {seq!r} in {self._shown}")
        return _name(seq)

    def sequence_last(self, seq: str) -> int | None:
        name = self._sequence(seq)
        row = self._one(
            sql.SQL("SELECT last_value, is_called FROM {}").format(name),
        )
        return int(row[0]) if row is not None and row[1] else None

    def raise_sequence(self, cur: Any, seq: str, value: int) -> None:
        name = self._sequence(seq)
        cur.execute(
            sql.SQL(
                "SELECT setval(%s::regclass, greatest(last_value, %s)) FROM {} "
                "WHERE NOT is_called OR last_value < %s"
            ).format(name),
            (ident(seq), value, value),
        )

    def run_script(self, cur: Any, text: str, error: type[CascadeError]) -> None:
        # Without parameters psycopg sends the text as one simple query: several statements
        # run in order, in the caller's transaction.
        try:
            cur.execute(text.encode())
        except psycopg.Error as exc:
            raise self._failure("cannot run the script on", exc, error) from exc

    def foreign_keys(self) -> list[tuple[str, str, list[str], str, list[str], bool]]:
        rows = self._rows(
            "SELECT c.conname, t.relname, "
            "array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i) "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i), "
            "r.relname, "
            "array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i) "
            "JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i), "
            "c.condeferrable AND c.condeferred "
            "FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
            "JOIN pg_class r ON r.oid = c.confrelid "
            "WHERE c.contype = 'f' AND t.relnamespace = current_schema()::regnamespace "
            "AND left(t.relname, 6) <> 'baton_' ORDER BY t.relname, c.conname"
        )
        return [(r[0], r[1], list(r[2]), r[3], list(r[4]), bool(r[5])) for r in rows]

    def user_triggers(self) -> list[tuple[str, str]]:
        # Enabled 'O' (origin, the default) or 'A' (always): the ones an apply fires. 'R'
        # fires only in replica sessions and 'D' never.
        rows = self._rows(
            "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE NOT t.tgisinternal AND t.tgenabled IN ('O', 'A') "
            "AND c.relnamespace = current_schema()::regnamespace "
            "AND left(t.tgname, 13) <> 'baton_capture' AND t.tgname <> 'baton_deny' "
            "AND left(c.relname, 6) <> 'baton_' "
            "ORDER BY c.relname, t.tgname"
        )
        return [(r[0], r[1]) for r in rows]
