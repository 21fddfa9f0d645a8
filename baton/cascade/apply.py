"""Applying batches to a node: one transaction per micro-batch, exactly once and fenced.

The transaction (on the subscriber's node database):

1. refuses the worker if a higher epoch already applied here (:class:`FencedOut`);
2. skips the batch if the node's position is already at or past its last tick (Spark replays
   the last micro-batch after a crash);
3. refuses a batch that does not start right after the position (no gap can be skipped);
4. applies each table's reduced rows set-wise: one upsert statement for the keys whose last
   event is an insert or update, one delete statement for those whose last event is a delete;
5. on a node that carries the queue (branch), copies the events and ticks verbatim;
6. follows the global watermark (an event from the root) and trims the queue below it;
7. stores the new position and the epoch.

Events carry full row images, so applying a key's last event of a batch gives the same table
as applying all of them in order. A batch is never applied twice (the position check), and an
event a table's initial copy already shows is never applied again: the copy's rows are read at
its tick T or later, and a trigger on the table (an audit table) would see the row version
twice. Those are skipped: events up to T (the table's copy tick) and, after T, the ones the copy
names (:meth:`~baton.cascade.db.NodeDB.reflected`). Skipping a key's last event of a batch when
the copy shows it is right: a snapshot that shows a key's event shows its earlier ones. A key's
last event is found by :func:`~baton.cascade.batches.reduce_events` alone: the Spark sink, the
low-latency task and a table copy's catch-up all use it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from baton.cascade import apply_stats, queue_events
from baton.cascade.batches import Outcome
from baton.cascade.codec import decode
from baton.cascade.db import NodeDB
from baton.cascade.model import (
    DELETE,
    PARTITION_TICK,
    ROW_TYPES,
    WATERMARK,
    Event,
    NodeState,
    Role,
    Tick,
)
from baton.errors import CascadeError, FencedOut


@dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: bool
    position: int
    rows: int = 0
    events: int = 0
    outcome: Outcome = Outcome.APPLIED


@dataclass(slots=True)
class TableRows:
    """What a batch writes to one table: its columns and key columns, the rows to upsert
    (decoded, in column order), the keys to delete, and the rows to upsert as their JSON
    images (key -> image), which the database reads itself
    (:meth:`~baton.cascade.db.NodeDB.upsert_images`). A key is in one of the three at most."""

    columns: list[str]
    key: list[str]
    upserts: list[list[Any]]
    deletes: list[list[Any]]
    #: Keyed by the key column's value (a one-column key) or the tuple of the key's values.
    images: dict[Any, str]
    #: The table's :meth:`~baton.cascade.db.NodeDB.image_types` (None: no images).
    image_types: dict[str, tuple[type, ...]] | None


def _as_image(rows: TableRows, text: str) -> bool:
    """Keep ``text`` as an image to upsert when the database reads every value of it as the
    decoded row's upsert would write it (see :meth:`~baton.cascade.db.NodeDB.image_types`);
    False: it is to be decoded (and checked) the usual way."""
    types = rows.image_types
    if types is None or "$baton." in text:
        return False  # tagged values (blobs, infinities, exact numbers) are decoded here
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False  # not standard JSON (e.g. NaN): the usual decoder reads or refuses it
    if type(data) is not dict:
        return False
    for column, value in data.items():
        allowed = types.get(column)
        if allowed is None or type(value) not in allowed:
            return False  # an unknown column is refused by the usual path, with its message
    # One image per key, the last one winning, as upsert keeps the last row of a key.
    key = rows.key
    rows.images[data.get(key[0]) if len(key) == 1 else tuple(data.get(c) for c in key)] = text
    return True


class _Table:
    """What :func:`rows_by_table` looks up once per table of a batch rather than per event:
    the filters of its copy, and its :class:`TableRows` (made at its first event to write)."""

    __slots__ = ("exact", "key_set", "rows", "shown", "skip")

    def __init__(self, skip: int, shown: Collection[int]) -> None:
        self.skip = skip
        self.shown = shown
        self.rows: TableRows | None = None
        self.exact = False
        self.key_set: frozenset[str] = frozenset()

    def start(self, db: NodeDB, table: str) -> TableRows:
        cols, pk = db.columns(table)
        self.rows = TableRows(cols, pk, [], [], {}, db.image_types(table))
        self.exact = db.exact_numbers(table)
        self.key_set = frozenset(pk)
        return self.rows


def rows_by_table(
    db: NodeDB,
    reduced: Iterable[Event],
    tables: dict[str, str],
    skip_upto: dict[str, int],
    reflected: Mapping[str, Collection[int]] | None = None,
) -> dict[str, TableRows]:
    """What to write to each table (:class:`TableRows`); validates every event. Leaves out
    what a table's copy already shows: events whose tick is at or below ``skip_upto[table]``
    (the copy's tick) and those whose id is in ``reflected[table]``."""
    out: dict[str, TableRows] = {}
    shown = reflected or {}
    #: Table -> its filters and rows; None: its events are not applied here (not replicated,
    #: or its copy is being made).
    per: dict[str, _Table | None] = {}
    # Fields by position (ev_id 0, type 2, table 3, key 4, data 5, tick 7): this runs once
    # for every row a batch writes, and a named field is a Python-level lookup.
    for e in reduced:
        table = e[3]
        if table is None:
            continue
        if table in per:
            t = per[table]
        else:
            copying = tables.get(table, "copying") == "copying"
            t = per[table] = (
                None if copying else _Table(skip_upto.get(table, 0), shown.get(table, ()))
            )
        if t is None:
            continue
        if e[7] is not None and e[7] <= t.skip:
            continue  # already in the table's copy
        if t.shown and e[0] in t.shown:
            continue  # after the copy's tick, but its rows were read after this change
        rows = t.rows
        if rows is None:
            rows = out[table] = t.start(db, table)
        try:
            key = decode(e[4] or "", t.exact)
        except ValueError:
            raise CascadeError(f"event {e[0]} for {table}: key or data is not JSON") from None
        if not isinstance(key, dict) or key.keys() != t.key_set:
            got = sorted(key) if isinstance(key, dict) else key
            raise CascadeError(
                f"event {e[0]} for {table}: key columns {got} do not match the target's "
                f"primary key {rows.key}; nothing applied"
            )
        if e[2] == DELETE:
            rows.deletes.append([key[c] for c in rows.key])
            continue
        text = e[5]
        if text and _as_image(rows, text):
            continue
        cols = rows.columns
        if rows.images:
            # A row the database cannot read as is: this table's rows all go the usual way
            # from here, those kept as images first (their order is the events' order).
            for kept in rows.images.values():
                image = decode(kept, t.exact)
                rows.upserts.append([image.get(c) for c in cols])
            rows.images.clear()
        rows.image_types = None
        try:
            data = decode(text, t.exact) if text else None
        except ValueError:
            raise CascadeError(f"event {e[0]} for {table}: key or data is not JSON") from None
        if not isinstance(data, dict) or set(data) - set(cols):
            extra = sorted(set(data) - set(cols)) if isinstance(data, dict) else data
            raise CascadeError(
                f"event {e[0]} for {table}: columns {extra} are not in the target table "
                f"(it has {cols}); nothing applied"
            )
        rows.upserts.append([data.get(c) for c in cols])
    return out


def write_rows(db: NodeDB, cur: Any, per_table: dict[str, TableRows]) -> int:
    """Write what :func:`rows_by_table` returned, set-wise (per table one delete statement,
    and one upsert statement of decoded rows or of images); the number of rows written or
    deleted."""
    n = 0
    for table, rows in per_table.items():
        db.delete_keys(cur, table, rows.key, rows.deletes)
        db.upsert(cur, table, rows.columns, rows.upserts)
        db.upsert_images(cur, table, rows.columns, list(rows.images.values()))
        n += len(rows.upserts) + len(rows.images) + len(rows.deletes)
    return n


def merge_events(
    db: NodeDB,
    cur: Any,
    st: NodeState,
    events: Sequence[Event],
    *,
    tables: Mapping[str, str],
    skip_upto: Mapping[str, int],
    reflected: Mapping[str, tuple[int, Collection[int]]],
    end: int,
) -> int:
    """A merge-leaf's batch into the combined set's queue: the row events it applied (the
    same filter as :func:`rows_by_table`, but every one, not only each key's last) and custom
    events, then a :data:`PARTITION_TICK` for ``end``; the host notes ``end`` as merged. The
    partition's watermark events stay in the partition set. The number of events queued."""
    out: list[Event] = []
    for e in events:
        if e.type == WATERMARK:
            continue
        if e.type in ROW_TYPES:
            if e.table is None or tables.get(e.table, "copying") == "copying":
                continue
            if e.tick is not None and e.tick <= skip_upto.get(e.table, 0):
                continue
            if e.ev_id in reflected.get(e.table, (0, ()))[1]:
                continue
        out.append(e)
    db.insert_events(cur, out)
    partition_tick(db, cur, st, end, tables, skip_upto, reflected)
    return len(out) + 1


def partition_tick(  # noqa: PLR0917
    db: NodeDB,
    cur: Any,
    st: NodeState,
    end: int,
    tables: Mapping[str, str],
    skip_upto: Mapping[str, int],
    reflected: Mapping[str, tuple[int, Collection[int]]],
) -> None:
    """Queue a :data:`PARTITION_TICK` for merge-leaf ``st`` at partition tick ``end`` in the
    combined set, with what of each table's initial copy is still ahead of it (states, copy
    ticks, the events a copy showed): a merge-leaf taking over from this tick needs it (see
    NodeDB.track_partition). A merge batch ends with one; so does a merge-leaf's copy, in its
    own transaction, so that any node holding the copy's rows knows the copy was made."""
    copies: dict[str, dict[str, Any]] = {}
    for table, state in tables.items():
        upto, ids = reflected.get(table, (0, frozenset()))
        if state == "copying" or skip_upto.get(table, 0) > end or upto > end:
            copies[table] = {"state": state, "tick": skip_upto.get(table, 0), "upto": upto,
                             "ids": sorted(ids) if upto > end else []}  # fmt: skip
    mark = {"set": st.set_name, "tick": end, **({"copies": copies} if copies else {})}
    db.insert_events(cur, [Event(0, 0.0, PARTITION_TICK, None, None, json.dumps(mark))])
    db.track_partition(cur, st.set_name, end)


def claim_epoch(db: NodeDB, epoch: int) -> None:
    """Make ``epoch`` the node's before a worker of that epoch reads anything: from then on a
    worker of an older epoch has every batch refused (:class:`FencedOut`), even while this one
    has applied nothing yet. Raises :class:`FencedOut` when a newer epoch claimed the node.

    Without it a node's epoch moved only with an applied batch, so an older worker still
    running (its leadership over, its Spark session slow to start) kept applying while the new
    one, started from a position that then moved under it, failed batch after batch (the fault
    campaign, seed 1, round 12: the leaf's lag stayed over the bound)."""
    with db.transaction() as cur:
        st = db.state()
        if epoch < st.epoch:
            raise FencedOut(
                f"worker epoch {epoch} is stale: epoch {st.epoch} already claimed {st.name}"
            )
        if epoch > st.epoch:
            db.set_local(cur, "epoch", str(epoch))


def apply_batch(
    db: NodeDB,
    ticks: Sequence[Tick],
    reduced: Iterable[Event],
    events: Sequence[Event] | None,
    epoch: int,
    *,
    provider: str | None = None,
) -> ApplyResult:
    """Apply one micro-batch (the batches of ``ticks``) in one transaction; see the module
    docstring. ``events`` (every event, for the queue copy) is needed on a branch. ``provider``
    is the node the batch was read from: nothing is applied unless it is still the node's."""
    if not ticks:
        return ApplyResult(False, db.state().position, outcome=Outcome.NO_TICK)
    first, end = ticks[0].tick_id, ticks[-1].tick_id
    started = time.perf_counter()
    with db.transaction() as cur:
        st = db.state()
        if epoch < st.epoch:
            raise FencedOut(
                f"worker epoch {epoch} is stale: epoch {st.epoch} already applied to {st.name}"
            )
        if end <= st.position:
            return ApplyResult(False, st.position, outcome=Outcome.ALREADY_APPLIED)
        if provider is not None and st.provider != provider:
            # Read from a provider the node has left (change-provider, failover): its ticks may
            # not be the set's any more. The worker restarts on the new provider.
            return ApplyResult(False, st.position, outcome=Outcome.PROVIDER_CHANGED)
        if st.paused:
            # Nothing applied: the worker's next start (or the next micro-batch after resume)
            # reads from the stored position again.
            return ApplyResult(False, st.position, outcome=Outcome.PAUSED)
        if first != st.position + 1:
            raise CascadeError(
                f"{st.name} is at tick {st.position} but the batch starts at tick {first}"
            )
        if db.only_tracks(st):
            # The merge-leaf of a combined-failover only tracks: its position moves with the
            # partition ticks the combined set brings (NodeDB.track_partition). A combined
            # root handing its role over (a switchover) merges nothing after its last tick.
            return ApplyResult(False, st.position, outcome=Outcome.TRACKING)
        tables = db.tables()
        skip = {t: db.table_tick(t) for t in tables}
        reflected = db.reflected()
        shown = {t: ids for t, (_, ids) in reflected.items()}
        mark = db.capture_mark(cur) if st.merge_leaf else 0
        rows = queue_events.apply_rows(  # the rows, cut at the batch's scripts (DDL)
            db, cur, st, reduced, events or (),
            write=lambda part: write_rows(db, cur, rows_by_table(db, part, tables, skip, shown)),
        )  # fmt: skip
        for table, (upto, _) in reflected.items():
            if upto <= end:  # every event the copy showed has come by: nothing left to skip
                db.set_reflected(cur, table, 0, ())
        for table, state in tables.items():
            ahead = reflected.get(table, (0, frozenset()))[0]
            if state == "catching-up" and max(skip[table], ahead) <= end:
                # Past its copy's tick and past every event its copy showed: the table now
                # shows exactly the node's position (a provider's ``ok`` table must, for
                # the copies its subscribers make: see node_ops.copy_ready).
                db.set_table(cur, table, "ok", skip[table])
        queue_events.apply_special(db, cur, st, events or ())
        copied = 0
        if st.role.carries_queue and st.role is not Role.ROOT:
            if events is None:
                raise CascadeError("a branch needs the batch's events to copy them")
            db.copy_batch(cur, list(events), ticks)
            copied = len(events)
        if st.merge_leaf:
            # Seed 004's merge-leaf: the combined root's tables capture the rows just written;
            # the combined queue gets the partition's own events instead (every row version,
            # in order), and the partition tick, in this same transaction.
            if events is None:
                raise CascadeError("a merge-leaf needs the batch's events to copy them")
            db.drop_captured(cur, mark)
            copied = merge_events(
                db, cur, st, events, tables=tables, skip_upto=skip, reflected=reflected, end=end
            )
        for e in events or ():
            if e.type == WATERMARK and e.data:
                wm = int(json.loads(e.data)["tick"])
                if wm > st.global_watermark:
                    db.set_local(cur, "global_watermark", str(wm))
                    if st.role.carries_queue:
                        db.trim(cur, wm)
            elif e.type == PARTITION_TICK and e.data and not st.merge_leaf:
                part = json.loads(e.data)
                copies = part.get("copies", {})
                db.track_partition(cur, str(part["set"]), int(part["tick"]), copies)
        db.set_local(cur, "position", str(end))
        db.set_local(cur, "epoch", str(max(epoch, st.epoch)))
        # The batch's size in events (a leaf, given only the reduced rows: the rows applied)
        # and its duration up to the commit, counted with the batch (apply_stats).
        size = len(events) if events is not None else rows
        apply_stats.record(db, cur, size, time.perf_counter() - started)
    return ApplyResult(True, end, rows, copied)
