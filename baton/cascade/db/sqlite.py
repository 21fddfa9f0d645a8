"""The SQLite node database (the embedded default).

SQLite has one writer at a time, and an event's id is assigned inside its writing transaction,
so ids commit in increasing order: a tick made in a write transaction that records the highest
id so far covers exactly the events committed before it, and no event with a lower id can
commit later. A root batch is therefore the id range between two ticks.
"""

from __future__ import annotations

import contextlib
import re
import socket
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from baton.cascade.codec import sqlite_value_sql
from baton.cascade.db.base import NodeDB, ident, node_schema, split_location
from baton.cascade.model import ROW_TYPES, Event, Tick
from baton.errors import (
    CascadeError,
    CascadeInputError,
    ConfigError,
    NodeDatabaseError,
    NodeUnreachable,
    NotANode,
)
from baton.store import sqlite_path

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"

#: Events one trim deletes at most, about (the ticks' own event ids count them).
TRIM_STEP = 5000
#: Where baton's own write transactions say so for the guard triggers (see
#: :meth:`SQLiteNodeDB.transaction`); an operator repairing by hand inserts a row in their
#: transaction too (docs/cascade.md).
WRITER_TABLE = "CREATE TABLE IF NOT EXISTS baton_writer (w INTEGER)"

SCHEMA = """
CREATE TABLE IF NOT EXISTS baton_event (
    ev_id INTEGER PRIMARY KEY AUTOINCREMENT,
    ev_txid INTEGER NOT NULL DEFAULT 0,
    ev_time REAL NOT NULL,
    ev_type TEXT NOT NULL,
    ev_table TEXT,
    ev_key TEXT,
    ev_data TEXT,
    ev_tick INTEGER
);
CREATE INDEX IF NOT EXISTS baton_event_tick ON baton_event (ev_tick);
CREATE TABLE IF NOT EXISTS baton_tick (
    tick_id INTEGER PRIMARY KEY,
    ev_high INTEGER NOT NULL,
    snapshot TEXT,
    tick_time REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS baton_node (
    name TEXT PRIMARY KEY,
    location TEXT NOT NULL,
    dead INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS baton_local (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS baton_subscriber (
    name TEXT PRIMARY KEY,
    watermark INTEGER NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS baton_table (
    name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    tick INTEGER NOT NULL DEFAULT 0
);
"""


#: The node's own tables: a database without every one of them is not a cascade node.
TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (baton_\w+)", SCHEMA))

#: Primary result codes of a database that cannot be used now, whatever the input: locked by
#: another connection past the busy timeout, an I/O error, a full disk, a file that cannot be
#: opened, or "locking protocol" (in WAL mode, another process frozen in the instant it held a
#: shared-memory lock: retried like a busy database, never taken for bad input).
_UNREACHABLE = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
    }
)


def _failure(
    what: str, exc: sqlite3.Error, other: type[CascadeError] = NodeDatabaseError
) -> CascadeError:
    """``exc`` as baton's error, by its primary result code: :class:`NodeUnreachable` when the
    database cannot be used now, :class:`NotANode` for a file that is not a database, else
    ``other``. Errors of the module itself (a value it cannot bind) carry no code."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    if primary in _UNREACHABLE:
        return NodeUnreachable(f"{what}: {exc}")
    if primary == sqlite3.SQLITE_NOTADB:
        return NotANode(f"{what}: {exc} (not a cascade node)")
    return other(f"{what}: {exc}")


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection to another node's SQLite file: it can never take the write lock
    (not even to checkpoint the log when it closes last), so pausing the process holding it
    never stops that node's writers."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0)


class SQLiteNodeDB(NodeDB):
    _now = _NOW

    def __init__(self, location: str, readonly: bool = False, existing: bool = False) -> None:
        self.location = location
        database, self.part = split_location(location)
        try:  # the store's parser: every spelling means the same file everywhere
            path = sqlite_path(database)
        except ConfigError as exc:
            raise CascadeInputError(str(exc)) from None
        self.path = Path(path)
        self._writer_ready = False
        if existing and not readonly and not self.path.is_file():
            # A Spark task on a host that does not see the file: opening it would make a new
            # empty database there and apply nothing where the node really is.
            raise NodeUnreachable(
                f"{location}: no such file on {socket.gethostname()}; a SQLite node must be "
                "reachable at the same path wherever Spark runs tasks (use PostgreSQL nodes "
                "on a cluster)"
            )
        if not self.path.parent.is_dir():
            raise CascadeInputError(f"{location}: directory {self.path.parent} does not exist")
        try:
            if readonly:
                self.conn = connect_readonly(self.path)
            else:
                self.conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:  # not a database, or one that cannot be opened now
            raise _failure(f"{location}: cannot open", exc, CascadeInputError) from exc

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        """Inside: a driver error leaves as baton's (see :func:`_failure`)."""
        try:
            yield
        except sqlite3.Error as exc:
            raise _failure(f"{self.location}: {what}", exc) from exc

    def install(self) -> None:
        with self._translated("cannot install"):
            self.conn.executescript(node_schema(SCHEMA, self.part) if self.part else SCHEMA)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """A write transaction of baton's own (the apply path, the copy, ``execute``, the
        operations): it says so in ``baton_writer``, which the guard triggers of a node that
        does not capture a table look for (SQLite has one writer at a time, and no other
        connection sees the row, which is gone again before the commit)."""
        cur = self.conn.cursor()
        with self._translated("cannot write"):
            cur.execute("BEGIN IMMEDIATE")
            if not self._writer_ready:  # a database made before the table existed
                cur.execute(WRITER_TABLE)
                self._writer_ready = True
            cur.execute("INSERT INTO baton_writer (w) VALUES (1)")
        try:
            yield cur
            cur.execute("DELETE FROM baton_writer")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
                cur.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):  # a statement of the caller's transaction
                raise _failure(f"{self.location}: cannot write", exc) from exc
            raise
        try:
            cur.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                cur.execute("ROLLBACK")
            raise _failure(f"{self.location}: cannot commit", exc) from exc

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        # A deferred transaction: its reads share the snapshot its first read takes (in WAL
        # mode writers go on meanwhile), and it never takes the write lock.
        with self._translated("cannot read"):
            self.conn.execute("BEGIN")
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):  # nothing written: nothing to lose
                self.conn.execute("COMMIT")

    def _rows(self, query: Any, args: Sequence[Any] = ()) -> list[Any]:
        try:
            return self.conn.execute(query, args).fetchall()
        except sqlite3.Error as exc:
            failure = _failure(f"{self.location}: cannot read", exc)
            if type(failure) is NodeDatabaseError and self._missing_tables():
                raise NotANode(f"{self.location} is not a cascade node") from exc
            raise failure from exc

    def _missing_tables(self) -> bool:
        """Whether any of the node's own tables is missing (False when that cannot be read:
        the read's own error says more)."""
        try:
            rows = self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return not set(self.own_tables(TABLES)) <= {r[0] for r in rows}
        except sqlite3.Error:
            return False

    # -- queue ----------------------------------------------------------------------------

    @staticmethod
    def _tick(row: Any) -> Tick:
        return Tick(tick_id=row[0], ev_high=row[1], snapshot=row[2], time=row[3])

    def last_tick(self) -> Tick | None:
        row = self._one(
            "SELECT tick_id, ev_high, snapshot, tick_time FROM baton_tick "
            "ORDER BY tick_id DESC LIMIT 1"
        )
        return None if row is None else self._tick(row)

    def get_tick(self, tick_id: int) -> Tick | None:
        row = self._one(
            "SELECT tick_id, ev_high, snapshot, tick_time FROM baton_tick WHERE tick_id = ?",
            (tick_id,),
        )
        return None if row is None else self._tick(row)

    def ticks(self, after: int, upto: int) -> list[Tick]:
        rows = self._rows(
            "SELECT tick_id, ev_high, snapshot, tick_time FROM baton_tick "
            "WHERE tick_id > ? AND tick_id <= ? ORDER BY tick_id",
            (after, upto),
        )
        return [self._tick(r) for r in rows]

    def batch_events(self, after: int, upto: int) -> Iterator[Event]:
        prev = self.get_tick(after)
        last = self.get_tick(upto)
        if last is None:
            return
        low = prev.ev_high if prev is not None else 0
        # Copied events carry their tick; events captured here carry none until a tick covers
        # them, and then belong to the tick whose id range holds them.
        with self._translated("cannot read"):
            rows = self.conn.execute(
                "SELECT ev_id, ev_time, ev_type, ev_table, ev_key, ev_data, ev_txid, ev_tick "
                "FROM baton_event WHERE (ev_tick > ? AND ev_tick <= ?) "
                "OR (ev_tick IS NULL AND ev_id > ? AND ev_id <= ?) ORDER BY ev_id",
                (after, upto, low, last.ev_high),
            )
            ticks = self.ticks(after, upto)
            highs = [t.ev_high for t in ticks]
            for r in rows:
                tick = r[7]
                if tick is None:
                    # The first tick of the range whose high covers this id.
                    tick = next(t.tick_id for t, h in zip(ticks, highs, strict=True) if r[0] <= h)
                yield Event(r[0], r[1], r[2], r[3], r[4], r[5], r[6], tick)

    def make_tick(self, cur: Any, min_events: int = 0) -> Tick | None:
        last = cur.execute(
            "SELECT tick_id, ev_high FROM baton_tick ORDER BY tick_id DESC LIMIT 1"
        ).fetchone()
        tick_id, low = (last[0], last[1]) if last else (0, 0)
        high = cur.execute("SELECT coalesce(max(ev_id), 0) FROM baton_event").fetchone()[0]
        high = max(high, low)
        if high - low < min_events:
            return None
        now = time.time()
        cur.execute(
            "INSERT INTO baton_tick (tick_id, ev_high, snapshot, tick_time) VALUES (?, ?, NULL, ?)",
            (tick_id + 1, high, now),
        )
        return Tick(tick_id + 1, high, now)

    def pending(self) -> tuple[int, float | None]:
        last = self.last_tick()
        low = last.ev_high if last else 0
        row = self._one(
            "SELECT count(*), min(ev_time) FROM baton_event WHERE ev_tick IS NULL AND ev_id > ?",
            (low,),
        )
        return int(row[0]), row[1]

    def insert_event(
        self, cur: Any, type_: str, table: str | None, key: str | None, data: str | None
    ) -> int:
        cur.execute(
            "INSERT INTO baton_event (ev_time, ev_type, ev_table, ev_key, ev_data) "
            "VALUES (?, ?, ?, ?, ?)",
            (time.time(), type_, table, key, data),
        )
        return int(cur.lastrowid)

    def insert_events(self, cur: Any, events: Sequence[Event]) -> None:
        cur.executemany(
            "INSERT INTO baton_event (ev_time, ev_type, ev_table, ev_key, ev_data) "
            "VALUES (?, ?, ?, ?, ?)",
            [(time.time(), e.type, e.table, e.key, e.data) for e in events],
        )

    def capture_mark(self, cur: Any) -> int:
        row = cur.execute("SELECT coalesce(max(ev_id), 0) FROM baton_event").fetchone()
        return int(row[0])

    def drop_captured(self, cur: Any, mark: int) -> None:
        # The caller holds the write lock since before ``mark`` was read: every event above it
        # with no tick was captured by its own statements.
        cur.execute("DELETE FROM baton_event WHERE ev_id > ? AND ev_tick IS NULL", (mark,))

    def bump_event_ids(self, cur: Any, above: int) -> None:
        # AUTOINCREMENT never reuses an id, even after trimming; this also lifts it past ids
        # this node never held (a promoted branch continues after the old root's last tick).
        cur.execute(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'baton_event'", (above,)
        )
        cur.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT 'baton_event', ? "
            "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'baton_event')",
            (above,),
        )

    def copy_batch(self, cur: Any, events: Sequence[Event], ticks: Sequence[Tick]) -> None:
        cur.executemany(
            "INSERT INTO baton_event (ev_id, ev_txid, ev_time, ev_type, ev_table, ev_key, "
            "ev_data, ev_tick) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(e.ev_id, e.txid, e.time, e.type, e.table, e.key, e.data, e.tick) for e in events],
        )
        cur.executemany(
            "INSERT INTO baton_tick (tick_id, ev_high, snapshot, tick_time) VALUES (?, ?, ?, ?)",
            [(t.tick_id, t.ev_high, t.snapshot, t.time) for t in ticks],
        )

    def _after_clause(self, tick_id: int) -> tuple[str, tuple[int, int]]:
        tick = self.get_tick(tick_id)
        high = tick.ev_high if tick else 0
        return "ev_tick > ? OR (ev_tick IS NULL AND ev_id > ?)", (tick_id, high)

    def events_after(self, tick_id: int) -> Iterator[Event]:
        where, args = self._after_clause(tick_id)
        # A root's events carry no tick (its batches are id ranges): the tick whose batch
        # holds one is the first with ev_high at or above its id (none yet: NULL).
        with self._translated("cannot read"):
            rows = self.conn.execute(
                "SELECT ev_id, ev_time, ev_type, ev_table, ev_key, ev_data, ev_txid, "
                "coalesce(ev_tick, (SELECT min(tick_id) FROM baton_tick WHERE ev_high >= ev_id)) "
                f"FROM baton_event WHERE {where} ORDER BY ev_id",
                args,
            )
            for r in rows:
                yield Event(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])

    def _row_events_after(self, table: str, tick_id: int) -> list[tuple[int, str | None, Any]]:
        where, args = self._after_clause(tick_id)
        return self._rows(
            "SELECT ev_id, ev_key, ev_tick FROM baton_event "
            f"WHERE ev_table = ? AND ev_type IN (?, ?, ?) AND ({where})",
            (table, *sorted(ROW_TYPES), *args),
        )

    def discard_after(self, cur: Any, tick_id: int) -> None:
        where, args = self._after_clause(tick_id)
        cur.execute(f"DELETE FROM baton_event WHERE {where}", args)
        cur.execute("DELETE FROM baton_tick WHERE tick_id > ?", (tick_id,))

    def trim(self, cur: Any, below_tick: int) -> int:
        """Delete about :data:`TRIM_STEP` events at most, the oldest, of those below
        ``below_tick``: SQLite has one writer, and every writer of the node (the application
        at a root, the worker at a branch) waits while a trim runs in its transaction. Behind
        by a catch-up of 100,000 events, one trim held the lock for about 150 ms. The rest goes
        at the next trims, which come with every watermark the root publishes: a queue trims
        far faster than it grows (20 watermarks a second, a step each)."""
        if (
            cur.execute("SELECT 1 FROM baton_tick WHERE tick_id = ?", (below_tick,)).fetchone()
            is None
        ):
            return 0
        below_tick = self._trim_bound(cur, below_tick, TRIM_STEP)
        n = cur.execute(
            "DELETE FROM baton_event WHERE ev_tick < ? OR (ev_tick IS NULL AND ev_id <= "
            "(SELECT coalesce(max(ev_high), 0) FROM baton_tick WHERE tick_id < ?))",
            (below_tick, below_tick),
        ).rowcount
        n += cur.execute("DELETE FROM baton_tick WHERE tick_id < ?", (below_tick,)).rowcount
        return int(n)

    # -- replicated tables ------------------------------------------------------------------

    def columns(self, table: str) -> tuple[list[str], list[str]]:
        rows = self._rows(f"PRAGMA table_info({ident(table)})")
        if not rows:
            raise CascadeInputError(f"no table {table!r} in {self.location}")
        cols = [r[1] for r in rows]
        pk = [r[1] for r in sorted((r for r in rows if r[5]), key=lambda r: r[5])]
        return cols, pk

    def capture(self, cur: Any, table: str, on: bool) -> None:
        cols, pk = self.columns(table)
        t = ident(table)
        for op in ("ins", "upd", "del"):
            cur.execute(f"DROP TRIGGER IF EXISTS {ident(f'baton_cap_{table}_{op}')}")
        if not on:
            return

        try:
            self.conn.execute("SELECT atan2(0.0, -1.0)")
            signed_zero = True
        except sqlite3.OperationalError:  # built without the math functions
            signed_zero = False

        def value(ref: str, c: str) -> str:
            return sqlite_value_sql(f"{ref}.{ident(c)}", signed_zero)

        def obj(ref: str, names: list[str]) -> str:
            return "json_object(" + ", ".join(f"'{c}', {value(ref, c)}" for c in names) + ")"

        for op, when, ref, type_ in (
            ("ins", "INSERT", "NEW", "I"),
            ("upd", "UPDATE", "NEW", "U"),
            ("del", "DELETE", "OLD", "D"),
        ):
            data = "NULL" if type_ == "D" else obj(ref, cols)
            # A key change is an update of another row: delete the old key, insert the new.
            extra = ""
            if type_ == "U":
                changed = " OR ".join(f"OLD.{ident(c)} IS NOT NEW.{ident(c)}" for c in pk)
                extra = (
                    f"INSERT INTO baton_event (ev_time, ev_type, ev_table, ev_key, ev_data) "
                    f"SELECT {_NOW}, 'D', '{table}', {obj('OLD', pk)}, NULL WHERE {changed}; "
                )
            cur.execute(
                f"CREATE TRIGGER {ident(f'baton_cap_{table}_{op}')} AFTER {when} ON {t} BEGIN "
                f"{extra}INSERT INTO baton_event (ev_time, ev_type, ev_table, ev_key, ev_data) "
                f"VALUES ({_NOW}, '{type_}', '{table}', {obj(ref, pk)}, {data}); END"
            )

    def guard(self, cur: Any, table: str, on: bool, message: str = "") -> None:
        self.columns(table)  # a table that is not there says so
        t = ident(table)
        literal = "'" + message.replace("'", "''") + "'"
        ops = (("ins", "INSERT"), ("upd", "UPDATE"), ("del", "DELETE"))
        if on:
            have = {
                name: text
                for name, text in self._rows(
                    "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
                    (table,),
                )
            }
            if all(literal in (have.get(f"baton_deny_{table}_{op}") or "") for op, _ in ops):
                return  # already so: no schema change (other connections would re-prepare)
        for op, _ in ops:
            cur.execute(f"DROP TRIGGER IF EXISTS {ident(f'baton_deny_{table}_{op}')}")
        if not on:
            return
        for op, when in ops:
            cur.execute(
                f"CREATE TRIGGER {ident(f'baton_deny_{table}_{op}')} BEFORE {when} ON {t} "
                "WHEN NOT EXISTS (SELECT 1 FROM baton_writer) "
                f"BEGIN SELECT RAISE(ABORT, {literal}); END"
            )

    def upsert(
        self, cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        if not rows:
            return
        _, pk = self.columns(table)
        cols = ", ".join(ident(c) for c in columns)
        marks = ", ".join("?" for _ in columns)
        updates = ", ".join(f"{ident(c)} = excluded.{ident(c)}" for c in columns if c not in pk)
        conflict = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
        cur.executemany(
            f"INSERT INTO {ident(table)} ({cols}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(ident(c) for c in pk)}) {conflict}",
            rows,
        )

    def delete_keys(
        self, cur: Any, table: str, key_columns: Sequence[str], keys: Sequence[Sequence[Any]]
    ) -> None:
        if not keys:
            return
        where = " AND ".join(f"{ident(c)} = ?" for c in key_columns)
        cur.executemany(f"DELETE FROM {ident(table)} WHERE {where}", keys)

    def read_keys(
        self, table: str, key_columns: Sequence[str], keys: Sequence[Sequence[Any]]
    ) -> list[tuple[Any, ...]]:
        where = " AND ".join(f"{ident(c)} = ?" for c in key_columns)
        out: list[tuple[Any, ...]] = []
        for key in keys:
            out.extend(self._rows(f"SELECT * FROM {ident(table)} WHERE {where}", key))
        return out

    def read_rows(
        self, table: str, key_range: tuple[int, int] | None = None
    ) -> list[tuple[Any, ...]]:
        cols, pk = self.columns(table)
        order = ", ".join(ident(c) for c in pk or cols)
        if key_range is None:
            return self._rows(f"SELECT * FROM {ident(table)} ORDER BY {order}")
        return self._rows(
            f"SELECT * FROM {ident(table)} WHERE {ident(pk[0])} BETWEEN ? AND ? ORDER BY {order}",
            key_range,
        )

    # -- sequences, scripts, constraints and triggers (issue 16) -------------------------------

    def sequence_last(self, seq: str) -> int | None:
        raise CascadeInputError(
            f"{self.location}: SQLite has no sequences (sequences need PostgreSQL nodes)"
        )

    def raise_sequence(self, cur: Any, seq: str, value: int) -> None:
        self.sequence_last(seq)

    def run_script(self, cur: Any, text: str, error: type[CascadeError]) -> None:
        # executescript() would commit the caller's transaction first: run the statements one
        # by one, cut where SQLite itself says a statement is complete (a trigger's BEGIN ...
        # END holds semicolons).
        pending = ""
        for piece in text.split(";"):
            pending += piece + ";"
            if sqlite3.complete_statement(pending):
                if pending.strip(" \t\r\n;"):
                    try:
                        cur.execute(pending)
                    except sqlite3.Error as exc:
                        raise _failure(f"{self.location}", exc, error) from exc
                pending = ""
        if pending.strip(" \t\r\n;"):
            raise error(f"{self.location}: the script ends inside a statement: {pending.strip()}")

    def _user_tables(self) -> list[str]:
        rows = self._rows(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'baton\\_%' "
            "ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
        )
        return [r[0] for r in rows]

    def foreign_keys(self) -> list[tuple[str, str, list[str], str, list[str], bool]]:
        out: list[tuple[str, str, list[str], str, list[str], bool]] = []
        for table in self._user_tables():
            found: dict[int, tuple[str, list[str], list[str]]] = {}
            for r in self._rows(f"PRAGMA foreign_key_list({ident(table)})"):
                ref, cols, refcols = found.setdefault(r[0], (r[2], [], []))
                cols.append(r[3])
                refcols.append(r[4] or "")
            for n, (ref, cols, named) in sorted(found.items()):
                refcols = named
                if not all(named) and ref in self._user_tables():
                    refcols = self.columns(ref)[1]  # REFERENCES parent: its primary key
                out.append((f"{table}_fk{n}", table, cols, ref, refcols, False))
        return out

    def user_triggers(self) -> list[tuple[str, str]]:
        rows = self._rows(
            "SELECT tbl_name, name FROM sqlite_master WHERE type = 'trigger' "
            "AND name NOT LIKE 'baton\\_cap\\_%' ESCAPE '\\' "
            "AND name NOT LIKE 'baton\\_deny\\_%' ESCAPE '\\' ORDER BY tbl_name, name"
        )
        return [(r[0], r[1]) for r in rows]
