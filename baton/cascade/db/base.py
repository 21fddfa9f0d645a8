"""A cascade node's database: its queue (events, ticks), the set's node list, its own state,
the subscribers' watermarks, and its replicated tables.

This is synchronous code on purpose: it runs inside Spark's Python workers and in the CLI as
well as in the node agent (which calls it through ``asyncio.to_thread``). One class per
backend; :func:`baton.cascade.db.open_node_db` picks it from the location's scheme.

Tables (all prefixed ``baton_`` so they never collide with replicated ones):

``baton_event``      ev_id, ev_txid, ev_time, ev_type, ev_table, ev_key, ev_data, ev_tick
``baton_tick``       tick_id, ev_high, snapshot, tick_time
``baton_node``       name, location, dead: the set's members (the only duplicated data)
``baton_local``      key/value: this node's name, set, role, provider, position, epoch, ...;
                     ``reflected.<table>``: the events a table's copy already shows
``baton_subscriber`` name, watermark, updated: subscribers of this node's queue
``baton_table``      name, state, key columns: the tables this node replicates
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import json
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from baton.cascade.codec import decode
from baton.cascade.model import Event, NodeState, Role, TableCopy, Tick
from baton.errors import (
    CascadeError,
    CascadeInputError,
    NotANode,
)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

#: The node's own tables: a merge-leaf hosted in another node's database has its own copy of
#: each, named for its set (:func:`part_table`); the queue tables are the host's.
NODE_TABLES = ("baton_local", "baton_node", "baton_subscriber", "baton_table")
#: Host ``baton_local`` keys: ``merge.<set>`` names the merge-leaf hosted for a partition set,
#: ``merged.<set>`` the last partition tick the combined set holds.
MERGE_KEY, MERGED_KEY = "merge.", "merged."

#: The SQLSTATE of a write the guard triggers refused on PostgreSQL (:meth:`NodeDB.guard`):
#: baton's own code, so that a writer (:mod:`baton.cascade.writer`) tells it from any other
#: error by its code alone. SQLite's guard is a ``RAISE(ABORT)`` in a trigger:
#: ``SQLITE_CONSTRAINT_TRIGGER``.
DENY_SQLSTATE = "BTN01"


def split_location(location: str) -> tuple[str, str | None]:
    """(the database's location, the partition set of a merge-leaf hosted there or None):
    ``LOCATION#SET`` is the merge-leaf of set SET in the node database at LOCATION."""
    base, sep, part = location.rpartition("#")
    if not sep:
        return location, None
    if not part or "/" in part or "@" in part:
        raise CascadeInputError(
            f"bad merge-leaf location suffix {'#' + part!r}: use LOCATION#SET (a set name)"
        )
    return base, part


def node_schema(schema: str, part: str) -> str:
    """The ``CREATE TABLE`` statements of :data:`NODE_TABLES` in ``schema`` (a backend's DDL),
    renamed for the merge-leaf namespace of ``part``."""
    statements = re.findall(r"CREATE TABLE IF NOT EXISTS (baton_\w+) (\([^;]*\);)", schema)
    out = [
        f"CREATE TABLE IF NOT EXISTS {part_table(part, name)} {body}"
        for name, body in statements
        if name in NODE_TABLES
    ]
    return "\n".join(out)


def part_table(part: str, table: str) -> str:
    """The name of node table ``table`` (one of :data:`NODE_TABLES`) in the namespace of the
    merge-leaf of partition set ``part``: readable, and distinct for distinct set names."""
    plain = re.sub(r"[^a-z0-9_]", "_", part.lower())[:24]
    digest = hashlib.blake2b(part.encode(), digest_size=3).hexdigest()
    return f"baton_m_{plain}_{digest}_{table.removeprefix('baton_')}"


def ident(name: str) -> str:
    """``name`` quoted as an SQL identifier, after checking it is a plain one (the same rule on
    every backend)."""
    if not _IDENT.match(name):
        raise CascadeInputError(f"bad table or column name {name!r}: use letters, digits and '_'")
    return f'"{name}"'


class NodeDB(abc.ABC):
    """One node database. Not thread-safe: one instance per thread."""

    location: str

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> NodeDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema and state -------------------------------------------------------------------

    @abc.abstractmethod
    def install(self) -> None:
        """Create the baton_* tables if missing (idempotent)."""

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A write transaction (serialised with other writers); yields a cursor."""

    @abc.abstractmethod
    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """A read-only transaction: every read of this instance inside sees the database as of
        one moment (SQLite: one read transaction; PostgreSQL: REPEATABLE READ). Not for
        :meth:`batch_events` and :meth:`events_after`, which may read on another connection."""

    # The bookkeeping below is the same SQL on every backend but for the parameter mark and the
    # clock.

    #: The driver's parameter mark (``?`` for sqlite3, ``%s`` for psycopg).
    _mark = "?"
    #: SQL for the database's clock, in seconds since the epoch (a double).
    _now: str

    @abc.abstractmethod
    def _rows(self, query: Any, args: Sequence[Any] = ()) -> list[Any]:
        """Every row of a read; :class:`NotANode` when the baton_ tables are missing, and a
        driver error translated (:class:`NodeUnreachable`, :class:`NodeDatabaseError`)."""

    def _one(self, query: Any, args: Sequence[Any] = ()) -> Any:
        rows = self._rows(query, args)
        return rows[0] if rows else None

    def _sql(self, text: str) -> str:
        """``text`` with the driver's parameter mark, and the node's own tables renamed to
        its namespace's when it is a merge-leaf hosted in another node's database."""
        text = text.replace("?", self._mark)
        if self.part is not None:
            for table in NODE_TABLES:
                text = text.replace(table, part_table(self.part, table))
        return text

    def _host_sql(self, text: str) -> str:
        """``text`` for the host node's own tables, whatever this instance's namespace."""
        return text.replace("?", self._mark)

    # -- merge-leaf namespaces (seed 004's combined sets) -----------------------------------

    #: The partition set whose merge-leaf this instance is (the location's ``#SET``), or None
    #: for the node the database belongs to (its host).
    part: str | None = None

    def own_tables(self, tables: Sequence[str]) -> list[str]:
        """``tables`` (baton's) as named for this instance's namespace."""
        if self.part is None:
            return list(tables)
        return [part_table(self.part, t) if t in NODE_TABLES else t for t in tables]

    def host_get(self, key: str) -> str | None:
        """A ``baton_local`` value of the host node (the database's own node)."""
        row = self._one(self._host_sql("SELECT value FROM baton_local WHERE key = ?"), (key,))
        return None if row is None else str(row[0])

    def host_set(self, cur: Any, key: str, value: str) -> None:
        cur.execute(
            self._host_sql(
                "INSERT INTO baton_local (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            ),
            (key, value),
        )

    def host_tables(self) -> dict[str, str]:
        """The host node's replicated tables and their states."""
        rows = self._rows(self._host_sql("SELECT name, state FROM baton_table ORDER BY name"))
        return {name: state for name, state in rows}

    def host_role(self) -> Role | None:
        """The host node's role (None: the database is not a node)."""
        role = self.host_get("role")
        return None if role is None else Role(role)

    def only_tracks(self, st: NodeState) -> bool:
        """Whether the node ``st`` (this instance's) is a merge-leaf that only tracks and
        merges nothing: its host is not the combined root, or is handing that role over (a
        switchover: nothing is merged after the switch tick). The sink refuses such a node's
        batches and the worker keeps no query for it; both ask here so they never disagree."""
        return st.merge_leaf and (
            self.host_role() is not Role.ROOT or self.host_get("switch_tick") is not None
        )

    def merge_leaves(self) -> dict[str, str]:
        """Partition set -> name of the merge-leaf this database hosts for it."""
        rows = self._rows(
            self._host_sql("SELECT key, value FROM baton_local WHERE key LIKE ?"),
            (MERGE_KEY + "%",),
        )
        return {key.removeprefix(MERGE_KEY): value for key, value in rows}

    def merged(self) -> dict[str, int]:
        """Partition set -> the last partition tick whose batch the combined set holds, as far
        as this node has seen (a ``baton.partition-tick`` event, or its own merge)."""
        rows = self._rows(
            self._host_sql("SELECT key, value FROM baton_local WHERE key LIKE ?"),
            (MERGED_KEY + "%",),
        )
        return {key.removeprefix(MERGED_KEY): int(value) for key, value in rows}

    def track_partition(
        self,
        cur: Any,
        part: str,
        tick: int,
        copies: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """The combined set holds partition ``part`` up to ``tick``: note it, and move the
        merge-leaf this database hosts for ``part`` (if any, and only forwards) there, in the
        caller's transaction. A combined-failover's merge-leaves only track: their position
        is what the combined set holds, so they never run ahead of the combined root.

        ``copies``: the merging merge-leaf's tables whose initial copy is not behind it yet
        (state, copy tick, and the events the copy showed: see :meth:`reflected`); the
        tracking merge-leaf takes them over with the position, so that if it ever merges
        from there it skips (or copies) exactly what the merging one would have. A table
        not named is whole and past its copy."""
        if tick > self.merged().get(part, 0):
            self.host_set(cur, MERGED_KEY + part, str(tick))
        if part not in self.merge_leaves():
            return
        host, self.part = self.part, part
        try:
            # Created before the combined set had brought any partition tick: its position is
            # a guess until the first one comes (and may have to move back to it).
            unknown = self.get_local("tracking") == "unknown"
            position = int(self.get_local("position") or 0)
            if position > tick and not unknown:
                return  # a late one: the copies it names are older than what is known
            if position == tick and not unknown and copies is None:
                return
            self.set_local(cur, "position", str(tick))
            self.set_local(cur, "tracking", None)
            if copies is None:
                return
            for table in self.tables():
                info = copies.get(table)
                if info is None:
                    self.set_table(cur, table, "ok", 0)
                    self.set_reflected(cur, table, 0, ())
                else:
                    self.set_table(cur, table, str(info["state"]), int(info["tick"]))
                    ids = [int(i) for i in info.get("ids", ())]
                    self.set_reflected(cur, table, int(info.get("upto", 0)), ids)
        finally:
            self.part = host

    def get_local(self, key: str, default: str | None = None) -> str | None:
        row = self._one(self._sql("SELECT value FROM baton_local WHERE key = ?"), (key,))
        return default if row is None else str(row[0])

    def set_local(self, cur: Any, key: str, value: str | None) -> None:
        if value is None:
            cur.execute(self._sql("DELETE FROM baton_local WHERE key = ?"), (key,))
        else:
            cur.execute(
                self._sql(
                    "INSERT INTO baton_local (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                (key, value),
            )

    def is_installed(self) -> bool:
        """Whether the node was created here (a database that cannot be reached raises)."""
        try:
            return self.get_local("node_name") is not None
        except NotANode:
            return False

    #: The ``baton_local`` keys :meth:`state` reads.
    _STATE_KEYS = (
        "node_name", "set_name", "role", "provider", "position", "epoch", "paused",
        "global_watermark", "combined",
    )  # fmt: skip

    def state(self) -> NodeState:
        # Every key in one read, not one read per key: a low-latency worker reads its state
        # at each look at its provider (every 5 ms while it waits), and the root's ticker at
        # each of its steps.
        marks = ", ".join("?" * len(self._STATE_KEYS))
        rows = self._rows(
            self._sql(f"SELECT key, value FROM baton_local WHERE key IN ({marks})"),
            self._STATE_KEYS,
        )
        got = {str(k): str(v) for k, v in rows}
        name = got.get("node_name")
        if name is None:
            raise NotANode(f"{self.location} is not a cascade node: create it first")
        return NodeState(
            name=name,
            set_name=got.get("set_name") or "",
            role=Role(got.get("role") or "leaf"),
            provider=got.get("provider") or None,
            position=int(got.get("position") or 0),
            epoch=int(got.get("epoch") or 0),
            paused=got.get("paused") == "1",
            global_watermark=int(got.get("global_watermark") or 0),
            combined=got.get("combined") or None,
        )

    # -- set members ----------------------------------------------------------------------

    def nodes(self) -> dict[str, tuple[str, bool]]:
        """Node name -> (location, dead)."""
        rows = self._rows(self._sql("SELECT name, location, dead FROM baton_node ORDER BY name"))
        return {name: (loc, bool(dead)) for name, loc, dead in rows}

    def put_node(self, cur: Any, name: str, location: str, dead: bool = False) -> None:
        cur.execute(
            self._sql(
                "INSERT INTO baton_node (name, location, dead) VALUES (?, ?, ?) ON CONFLICT "
                "(name) DO UPDATE SET location = excluded.location, dead = excluded.dead"
            ),
            (name, location, dead),
        )

    # -- queue ----------------------------------------------------------------------------

    @abc.abstractmethod
    def last_tick(self) -> Tick | None: ...

    @abc.abstractmethod
    def get_tick(self, tick_id: int) -> Tick | None: ...

    @abc.abstractmethod
    def ticks(self, after: int, upto: int) -> list[Tick]:
        """Ticks with after < tick_id <= upto, in order."""

    @abc.abstractmethod
    def batch_events(self, after: int, upto: int) -> Iterator[Event]:
        """The events of the batches after tick ``after`` up to tick ``upto``, in id order."""

    @abc.abstractmethod
    def make_tick(self, cur: Any, min_events: int = 0) -> Tick | None:
        """Root: make the next tick covering every event committed so far (None when there
        are fewer than ``min_events`` new events)."""

    @abc.abstractmethod
    def pending(self) -> tuple[int, float | None]:
        """Root: events not yet covered by a tick, and the time of the oldest one."""

    @abc.abstractmethod
    def insert_event(
        self, cur: Any, type_: str, table: str | None, key: str | None, data: str | None
    ) -> int:
        """Root: add one event in the caller's transaction; its id."""

    @abc.abstractmethod
    def insert_events(self, cur: Any, events: Sequence[Event]) -> None:
        """Root: add copies of ``events`` (type, table, key, data; new ids, in order) in the
        caller's transaction (a merge-leaf filling its combined set's queue)."""

    @abc.abstractmethod
    def capture_mark(self, cur: Any) -> int:
        """Root, in a write transaction: a mark for :meth:`drop_captured`."""

    @abc.abstractmethod
    def drop_captured(self, cur: Any, mark: int) -> None:
        """Root: delete the events the caller's transaction captured since ``mark`` (a merge
        writes rows to captured tables and queues the partition's own events instead)."""

    @abc.abstractmethod
    def bump_event_ids(self, cur: Any, above: int) -> None:
        """Make every event id assigned from now on greater than ``above`` (and never reuse an
        id, even after trimming): a promoted node's new events must sort after the set's."""

    @abc.abstractmethod
    def copy_batch(self, cur: Any, events: Sequence[Event], ticks: Sequence[Tick]) -> None:
        """Branch: store the provider's events and ticks verbatim (same ids, same ticks)."""

    @abc.abstractmethod
    def events_after(self, tick_id: int) -> Iterator[Event]:
        """Every event not in a batch up to ``tick_id``: in later batches or not ticked yet."""

    @abc.abstractmethod
    def _row_events_after(self, table: str, tick_id: int) -> list[tuple[int, str | None, Any]]:
        """(id, key, tick) of ``table``'s row events among :meth:`events_after` ``tick_id``,
        read on this instance's connection (so inside :meth:`snapshot` when called there); the
        tick is None for an event captured here (a root's)."""

    def keys_after(self, table: str, tick_id: int) -> list[str | None]:
        """The keys (JSON text) of ``table``'s row events after ``tick_id``: the keys this node
        changed since then (``compare`` leaves them to the queue)."""
        return [key for _, key, _ in self._row_events_after(table, tick_id)]

    @abc.abstractmethod
    def discard_after(self, cur: Any, tick_id: int) -> None:
        """Delete the ticks after ``tick_id`` and every event :meth:`events_after` returns."""

    def _trim_bound(self, cur: Any, below_tick: int, step: int) -> int:
        """Where a trim to ``below_tick`` stops: the oldest tick about ``step`` events above the
        oldest tick of the queue (by the ticks' ``ev_high``), or ``below_tick`` itself when it
        is nearer. A tick either way, so the trim's deletes stand as they are, only fewer."""
        row = cur.execute(
            self._host_sql(
                "SELECT min(tick_id) FROM baton_tick WHERE tick_id < ? AND ev_high >= "
                "(SELECT ev_high FROM baton_tick ORDER BY tick_id LIMIT 1) + ?"
            ),
            (below_tick, step),
        ).fetchone()
        return below_tick if row is None or row[0] is None else int(row[0])

    @abc.abstractmethod
    def trim(self, cur: Any, below_tick: int) -> int:
        """Delete events and ticks below ``below_tick`` (the global watermark); rows deleted.
        A backend may delete only the oldest part, up to a tick below it, and leave the rest
        to the next trims (every rise of the watermark trims again)."""

    # -- subscribers ------------------------------------------------------------------------

    def set_watermark(self, cur: Any, subscriber: str, tick: int) -> None:
        """Record the lowest tick ``subscriber`` (and its subtree) has applied."""
        cur.execute(
            self._sql(
                "INSERT INTO baton_subscriber (name, watermark, updated) "
                f"VALUES (?, ?, {self._now}) ON CONFLICT (name) DO UPDATE "
                "SET watermark = excluded.watermark, updated = excluded.updated"
            ),
            (subscriber, tick),
        )

    def drop_subscriber(self, cur: Any, subscriber: str) -> None:
        cur.execute(self._sql("DELETE FROM baton_subscriber WHERE name = ?"), (subscriber,))

    def watermarks(self) -> dict[str, int]:
        """Subscriber name -> the lowest tick it (and its subtree) has applied."""
        rows = self._rows(self._sql("SELECT name, watermark FROM baton_subscriber ORDER BY name"))
        return {name: int(tick) for name, tick in rows}

    # -- replicated tables ------------------------------------------------------------------

    @abc.abstractmethod
    def columns(self, table: str) -> tuple[list[str], list[str]]:
        """(columns, primary key columns) of ``table``; CascadeInputError if it does not
        exist."""

    def exact_numbers(self, table: str) -> bool:
        """Whether ``table`` has columns that hold more than a double or a 64-bit integer
        (row images for it are then read with :func:`baton.cascade.codec.decode` ``exact``)."""
        return False

    def bucket_sums(self, table: str, size: int) -> dict[int, tuple[int, int]] | None:
        """``compare``'s cheap first pass: for each bucket of ``table``'s key (one integer
        column; the bucket of k is k / ``size`` rounded toward zero, see
        :func:`bucket_range`), its row count and a fingerprint of its rows (the XOR of a
        64-bit hash of each whole row, which two rows that differ by capture's rules share
        only by a collision), computed in the database in one
        scan; None when this backend or the key do not allow it (then every row is read)."""
        return None

    def tables(self) -> dict[str, str]:
        """Replicated table -> state (copying, catching-up, ok)."""
        rows = self._rows(self._sql("SELECT name, state FROM baton_table ORDER BY name"))
        return {name: state for name, state in rows}

    def set_table(self, cur: Any, table: str, state: str | None, tick: int = 0) -> None:
        """Set ``table``'s state and copy tick; state None: no longer replicated (its
        :meth:`reflected` entry goes with it)."""
        role = self.get_local("role")
        # A node that does not capture (not a root; a database that is no node yet has no
        # role, and no guard either).
        guarded = role is not None and role != Role.ROOT.value
        if state is None:
            cur.execute(self._sql("DELETE FROM baton_table WHERE name = ?"), (table,))
            self.set_reflected(cur, table, 0, ())
            if guarded:
                self.guard(cur, table, False)
        else:
            if guarded:
                # Replicated here, captured elsewhere: direct writes are refused (invariant 8).
                self.guard(cur, table, True, self.guard_message(table))
            cur.execute(
                self._sql(
                    "INSERT INTO baton_table (name, state, tick) VALUES (?, ?, ?) ON CONFLICT "
                    "(name) DO UPDATE SET state = excluded.state, tick = excluded.tick"
                ),
                (table, state, tick),
            )

    def table_tick(self, table: str) -> int:
        row = self._one(self._sql("SELECT tick FROM baton_table WHERE name = ?"), (table,))
        return 0 if row is None else int(row[0])

    # A table's copy can show events after its copy tick T (the rows are read at T or later).
    # Their ids are kept in baton_local (one key per table: a node database is recognised by
    # its tables, and existing ones keep working) until the node's position passes them.
    _REFLECTED = "reflected."

    def reflected(self) -> dict[str, tuple[int, frozenset[int]]]:
        """Table -> (upto, ids) for each table whose copy shows events after its copy tick that
        the node has not reached yet: the ids of those events, and the provider tick up to
        which they may still arrive in a batch (see :class:`~baton.cascade.model.TableCopy`).
        Applying a batch skips them (:func:`baton.cascade.apply.rows_by_table`)."""
        rows = self._rows(
            self._sql("SELECT key, value FROM baton_local WHERE key LIKE ?"),
            (self._REFLECTED + "%",),
        )
        out: dict[str, tuple[int, frozenset[int]]] = {}
        for key, value in rows:
            entry = json.loads(value)
            out[key.removeprefix(self._REFLECTED)] = (int(entry["upto"]), frozenset(entry["ids"]))
        return out

    def set_reflected(self, cur: Any, table: str, upto: int, ids: Collection[int]) -> None:
        """Store (or, with no ids, drop) ``table``'s entry of :meth:`reflected`."""
        value = json.dumps({"upto": upto, "ids": sorted(ids)}) if ids else None
        self.set_local(cur, self._REFLECTED + table, value)

    def read_copy(
        self, table: str, tick_id: int, key_range: tuple[int, int] | None = None
    ) -> TableCopy:
        """``table``'s rows for an initial copy whose provider tick is ``tick_id`` (T), and the
        ids of its row events after T that those rows already show, read in one snapshot.

        Those are exactly the events after T the snapshot sees: a root captures an event in
        the transaction of its row change, and a branch copies a batch's events in the
        transaction that applies its rows. ``key_range`` (low, high): only the rows whose
        single integer key is in it, and only the events of keys in it (the Spark source reads
        a table in such ranges, each in its own snapshot)."""
        with self.snapshot():
            cols, pk = self.columns(table)
            rows = self.read_rows(table, key_range)
            events = self._row_events_after(table, tick_id)
            last = self.last_tick()
        ids: set[int] = set()
        upto = 0
        for ev_id, key, tick in events:
            if key_range is not None:
                try:
                    value = decode(key or "null")
                except ValueError:
                    continue  # no key of this table: never in any range (nor applied)
                value = value.get(pk[0]) if isinstance(value, dict) else None
                if type(value) is not int or not key_range[0] <= value <= key_range[1]:
                    continue
            ids.add(ev_id)
            # Captured here (no tick): in a batch up to the second tick after the last one
            # this snapshot saw. On SQLite the next tick covers it; on PostgreSQL the next one
            # may have taken its snapshot before this one, but the one after it is made once
            # that one committed, after this snapshot, so it sees every event this one saw.
            # (Perhaps a tick later than needed: the table only stays catching-up longer.)
            upto = max(upto, int(tick) if tick is not None else (last.tick_id if last else 0) + 2)
        return TableCopy(cols, list(rows), frozenset(ids), upto)

    @abc.abstractmethod
    def capture(self, cur: Any, table: str, on: bool) -> None:
        """Root: install (or drop) the triggers that write ``table``'s row changes as events
        in the same transaction as the change."""

    @abc.abstractmethod
    def guard(self, cur: Any, table: str, on: bool, message: str = "") -> None:
        """Install (or drop) the triggers that refuse a direct ``INSERT``, ``UPDATE`` or
        ``DELETE`` of ``table`` with ``message`` at a node that does not capture it (a branch,
        a leaf, an old root): such a write would never reach the queue (invariant 8). Writes
        made in :meth:`transaction` (the apply path, the copy, ``execute``) pass; so does an
        operator's who says so in the transaction (docs/cascade.md, "Writing at a node that
        does not capture")."""

    def guard_message(self, table: str, root: str | None = None) -> str:
        """What a refused write says: where it was made and where to write instead."""
        try:
            st = self.state()
        except NotANode:
            return f"baton: {table} is replicated here, not written: write it at the set's root"
        where = (
            f"write it at the root, {root}"
            if root
            else f"write it at the set's root (this node is fed by {st.provider or 'none'}; "
            f"'baton cascade status --via {st.name}' shows the root)"
        )
        return (
            f"baton: {table} at {st.name} ({st.role.value} of set {st.set_name}) is "
            f"replicated, not written here: {where}"
        )

    @abc.abstractmethod
    def upsert(
        self, cur: Any, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Insert or replace ``rows`` (set-wise)."""

    def image_types(self, table: str) -> dict[str, tuple[type, ...]] | None:
        """For a table whose rows this backend can write straight from their JSON row images
        (:meth:`upsert_images`, the database reading the JSON itself): each column's Python
        types, as ``orjson`` reads an image, for which that gives the same value as
        :meth:`upsert` of the decoded row. An image with a value of any other type (or any
        tagged value of :mod:`baton.cascade.codec`) is decoded and goes through
        :meth:`upsert`. None: the backend or the table's column types do not allow it."""
        return None

    def upsert_images(
        self, cur: Any, table: str, columns: Sequence[str], images: Sequence[str]
    ) -> None:
        """Insert or replace the rows of ``images`` (JSON objects, column -> value; a missing
        column is NULL), set-wise; at most one image per key. Only called for a table
        :meth:`image_types` admits, with images that passed its check; this default decodes
        them and upserts."""
        exact = self.exact_numbers(table)
        rows = [[row.get(c) for c in columns] for row in (decode(i, exact) for i in images)]
        self.upsert(cur, table, columns, rows)

    @abc.abstractmethod
    def delete_keys(self, cur: Any, table: str, key_columns: Sequence[str],
                    keys: Sequence[Sequence[Any]]) -> None:  # fmt: skip
        """Delete the rows with these keys (set-wise; missing keys are ignored)."""

    @abc.abstractmethod
    def read_keys(
        self, table: str, key_columns: Sequence[str], keys: Sequence[Sequence[Any]]
    ) -> list[tuple[Any, ...]]:
        """The rows of ``table`` with these keys (all columns; missing keys are left out)."""

    @abc.abstractmethod
    def read_rows(
        self, table: str, key_range: tuple[int, int] | None = None
    ) -> list[tuple[Any, ...]]:
        """Every row of ``table``, ordered by primary key (for copy and compare); with
        ``key_range`` (low, high), only those whose key (a single integer column) is in it."""

    # -- sequences, scripts, constraints and triggers (issue 16) -------------------------------

    def has_sequences(self) -> bool:
        """Whether this backend has sequences (a declared capability: PostgreSQL has, SQLite
        has not; the sequence methods below refuse on a backend without them)."""
        return False

    @abc.abstractmethod
    def sequence_last(self, seq: str) -> int | None:
        """The last value ``seq`` handed out (None: never used); :class:`CascadeInputError`
        when there is no such sequence, or the backend has none."""

    @abc.abstractmethod
    def raise_sequence(self, cur: Any, seq: str, value: int) -> None:
        """Make ``seq`` at least ``value`` (never lower it), in the caller's transaction."""

    @abc.abstractmethod
    def run_script(self, cur: Any, text: str, error: type[CascadeError]) -> None:
        """Run the SQL script ``text`` (one or more statements) in the caller's transaction. A
        statement the database refuses raises ``error`` with the driver's message on one line;
        a database that cannot be used now raises :class:`NodeUnreachable`, as any write."""

    @abc.abstractmethod
    def foreign_keys(self) -> list[tuple[str, str, list[str], str, list[str], bool]]:
        """Every foreign key between the node's own tables (not baton's): (name, table, its
        columns, referenced table, referenced columns, checked only at commit)."""

    @abc.abstractmethod
    def user_triggers(self) -> list[tuple[str, str]]:
        """(table, trigger) of every enabled trigger that fires on an ordinary write, but for
        baton's own capture triggers, in table order."""

    def locals_with_prefix(self, prefix: str) -> dict[str, str]:
        """The ``baton_local`` entries whose key starts with ``prefix`` (prefix removed)."""
        rows = self._rows(self._sql("SELECT key, value FROM baton_local ORDER BY key"))
        return {str(k)[len(prefix) :]: str(v) for k, v in rows if str(k).startswith(prefix)}


def bucket_range(bucket: int, size: int) -> tuple[int, int]:
    """The keys of ``bucket`` (:meth:`NodeDB.bucket_sums`): ``size`` keys, but bucket 0, which
    integer division toward zero gives every key from -(size - 1) to size - 1."""
    if bucket > 0:
        return bucket * size, bucket * size + size - 1
    if bucket < 0:
        return bucket * size - size + 1, bucket * size
    return -(size - 1), size - 1


__all__ = [
    "MERGED_KEY",
    "MERGE_KEY",
    "NODE_TABLES",
    "NodeDB",
    "bucket_range",
    "ident",
    "part_table",
    "split_location",
]
