"""Cascade operations on node databases. Each is resumable: running it again after an
interruption finishes the job (every step checks what is already done), and bad input is
refused with a :class:`~baton.errors.CascadeInputError` before anything is written, a state that
does not allow the operation with :class:`~baton.errors.Refused`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from baton.cascade.apply import (
    apply_batch,
    partition_tick,
    rows_by_table,
    write_rows,
)
from baton.cascade.batches import reduce_events
from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.db.base import split_location
from baton.cascade.model import ROW_TYPES, Event, NodeState, Role, TableCopy
from baton.cascade.queue_events import QUEUE_ONLY
from baton.errors import CascadeInputError, FencedOut, Refused

#: A node or set name (the node API's schema uses the same pattern).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_NAME = re.compile(NAME_PATTERN)


def check_name(name: str) -> str:
    """``name`` if it is a valid node or set name."""
    if not _NAME.match(name):
        raise CascadeInputError(f"bad node name {name!r}: use 1-63 letters, digits, '_', '.', '-'")
    return name


def check_event_type(type_: str) -> str:
    """``type_`` if a user may emit events of that type: row types would be applied as row
    changes without a table, and ``baton.*`` types are the set's own (watermark, ticks)."""
    if not type_ or type_ in ROW_TYPES or type_.startswith("baton."):
        raise CascadeInputError(
            f"bad event type {type_!r}: I, U, D and baton.* are reserved, use your own name"
        )
    return type_


def table_shape(db: NodeDB, table: str, where: str = "") -> tuple[list[str], list[str]]:
    """(columns, key columns) of ``table`` in ``db``, refused when it has no primary key."""
    cols, pk = db.columns(table)
    if not pk:
        on = f" on {where}" if where else ""
        raise CascadeInputError(f"table {table!r} has no primary key{on}: add one first")
    return cols, pk


def same_shape(a: tuple[list[str], list[str]], b: tuple[list[str], list[str]]) -> bool:
    """Whether two tables have the same columns (in any order) and the same key."""
    return (sorted(a[0]), a[1]) == (sorted(b[0]), b[1])


def installed(location: str) -> NodeState | None:
    """The state of the node at ``location``, or None when it is not one yet (without creating
    an SQLite file that does not exist, nor a directory)."""
    if location.startswith("sqlite://"):
        path = Path(split_location(location)[0].removeprefix("sqlite://"))
        if not path.exists():
            if path.name and not path.parent.is_dir():
                raise CascadeInputError(f"{location}: directory {path.parent} does not exist")
            return None
    with open_node_db(location) as db:
        return db.state() if db.is_installed() else None


def create_root(name: str, location: str, set_name: str) -> None:
    """Make the database at ``location`` the root of a new set ``set_name``."""
    check_name(name)
    check_name(set_name)
    with open_node_db(location) as db:
        if db.is_installed():
            st = db.state()
            if (st.name, st.set_name, st.role) == (name, set_name, Role.ROOT):
                return  # done before
            raise Refused(f"{location} is already node {st.name} ({st.role}) of {st.set_name}")
        db.install()
        with db.transaction() as cur:
            db.put_node(cur, name, location)
            for key, value in (
                ("set_name", set_name),
                ("role", Role.ROOT.value),
                ("position", "0"),
                ("epoch", "0"),
                ("node_name", name),  # last: marks the node as created
            ):
                db.set_local(cur, key, value)
            db.make_tick(cur)


def provider_db(provider: str, via: str, readonly: bool = False) -> NodeDB:
    """Node ``provider`` of the set at ``via``, refused when unknown or tagged dead."""
    """The provider's database, found by name in the node list at ``via`` (a location);
    ``readonly`` when only reading it (see :func:`open_node_db`)."""
    with open_node_db(via) as db:
        nodes = db.nodes()
    if provider not in nodes:
        raise CascadeInputError(f"unknown node {provider!r}: known nodes are {sorted(nodes)}")
    location, dead = nodes[provider]
    if dead:
        raise Refused(f"node {provider!r} is tagged dead: pick another provider")
    return open_node_db(location, readonly=readonly)


def create_subscriber(
    role: Role,
    name: str,
    location: str,
    provider: str,
    provider_location: str,
    *,
    queue_only: bool = False,
) -> NodeState:
    """Add a branch or leaf ``name`` at ``location`` subscribing to ``provider`` (found through
    the node list at ``provider_location``); the new node's state. A re-run finishes the job,
    and must name the same role and provider: else it would register a watermark at a provider
    the node does not receive from (holding its queue back for ever)."""
    check_name(name)
    if role is Role.ROOT:
        raise CascadeInputError("use create-root for a root")
    if queue_only and role is not Role.BRANCH:
        raise CascadeInputError("only a branch can be queue-only (a leaf has no queue)")
    before = installed(location)
    if before is not None and (before.role, before.provider) != (role, provider):
        with open_node_db(provider_location) as via:
            set_name = via.state().set_name
        if (before.name, before.set_name) == (name, set_name):
            raise Refused(
                f"{location} is already node {name}, a {before.role} of {before.provider}: "
                "use change-provider to move it"
            )
    with provider_db(provider, provider_location) as prov:
        pst = prov.state()
        if not pst.role.carries_queue:
            raise Refused(f"{provider} is a leaf: it has no queue to provide")
        nodes = prov.nodes()
        if name in nodes and nodes[name][0] != location:
            raise Refused(f"node name {name!r} is taken by {nodes[name][0]}")
        with open_node_db(location) as db:
            if db.is_installed():
                st = db.state()
                if st.name != name or st.set_name != pst.set_name:
                    raise Refused(f"{location} is already node {st.name} of {st.set_name}")
                if is_queue_only(db) != queue_only:
                    what = "a queue-only branch" if queue_only else "a branch with tables"
                    raise Refused(f"{location} is already node {name}, not {what}")
            else:
                start = prov.last_tick()
                if start is None:
                    raise Refused(f"{provider} has no tick yet: is its ticker running?")
                db.install()
                with db.transaction() as cur:
                    for n, (loc, dead) in nodes.items():
                        db.put_node(cur, n, loc, dead)
                    db.put_node(cur, name, location)
                    if role.carries_queue:
                        db.copy_batch(cur, [], [start])  # the base tick batches start from
                    if queue_only:
                        db.set_local(cur, QUEUE_ONLY, "1")
                    for key, value in (
                        ("set_name", pst.set_name),
                        ("role", role.value),
                        ("provider", provider),
                        ("position", str(start.tick_id)),
                        ("epoch", "0"),
                        ("node_name", name),
                    ):
                        db.set_local(cur, key, value)
            st = db.state()
        with prov.transaction() as cur:
            prov.set_watermark(cur, name, st.position)
    # Every live member learns the new node (the only duplicated data).
    for other, (loc, dead) in nodes.items():
        if dead or other == name:
            continue
        with open_node_db(loc) as odb, odb.transaction() as cur:
            odb.put_node(cur, name, location)
    return st


#: Reads a provider table for an initial copy: (location, table, T) -> the rows, read at the
#: provider's tick T or later, and the ids of the table's events after T that they already show
#: (a :class:`~baton.cascade.model.TableCopy`). Each row's key must be read in the same snapshot
#: as the events of that key it names: else an event would be skipped whose change the copy
#: lacks, or applied twice. The node's worker passes a Spark reader
#: (:func:`baton.spark.copy.spark_rows`); the default reads directly (:func:`direct_rows`).
RowReader = Callable[[str, str, int], TableCopy]


def direct_rows(location: str, table: str, tick: int) -> TableCopy:
    """The :data:`RowReader` that reads the whole table and its events in one snapshot."""
    with open_node_db(location, readonly=True) as db:
        return db.read_copy(table, tick)


def add_table(location: str, table: str) -> str:
    """Subscribe the node at ``location`` to ``table``; the table's new state. At the root:
    capture it (``ok``). Elsewhere: check it against the provider's and register it as
    ``copying``; the node's worker then copies it with Spark (:func:`copy_table`)."""
    with open_node_db(location) as db:
        st = db.state()
        if is_queue_only(db):
            raise Refused(
                f"{st.name} is queue-only: it keeps only the queue and replicates no tables"
            )
        cols, pk = table_shape(db, table, st.name)
        if st.role is Role.ROOT:
            with db.transaction() as cur:
                db.guard(cur, table, False)
                db.capture(cur, table, True)
                db.set_table(cur, table, "ok")
            return "ok"
        current = db.tables().get(table)
        if current is not None:
            return current
        assert st.provider is not None
        with provider_db(st.provider, location, readonly=True) as prov:
            if table not in prov.tables():
                why = " (it is queue-only: it keeps only the queue)" if is_queue_only(prov) else ""
                raise Refused(
                    f"provider {st.provider} does not replicate {table!r}{why}, so it cannot "
                    f"provide its initial copy: move {st.name} to a provider that replicates "
                    "it with change-provider (see candidates), or add it there first"
                )
            pcols, ppk = prov.columns(table)
            if not same_shape((cols, pk), (pcols, ppk)):
                raise Refused(
                    f"{table}: columns {cols} (key {pk}) differ from the provider's {pcols} "
                    f"(key {ppk})"
                )
        state = "copying"
        if st.merge_leaf:
            state = merge_table_state(db, table)
        with db.transaction() as cur:
            db.set_table(cur, table, state, 0)
        return state


def merge_table_state(db: NodeDB, table: str) -> str:
    """The first state of ``table`` added to a merge-leaf (``db``): the combined set's node
    hosting it must replicate the table, with the partition's shape. At a combined root the
    partition's rows are copied in (``copying``, without emptying the table: other partitions
    fill it too); a combined-failover's merge-leaf only tracks, and its host receives the rows
    through the combined set (``ok``)."""
    if table not in db.host_tables():
        raise Refused(
            f"the combined set's node here does not replicate {table!r}: add it there first"
        )
    if db.host_role() is Role.ROOT or db.get_local("tracking") == "unknown":
        return "copying"
    return "ok"


def copy_ready(location: str, table: str) -> bool:
    """Whether the node at ``location`` can copy ``table`` now: it is ``copying`` here and its
    provider's own copy is whole (``ok``). A provider still copying has part of the rows at
    best, and a subscriber that copied them would stay short for good; one catching up may
    show changes of events its queue does not hold yet, which the subscriber's copy could not
    name, and would apply again when they came."""
    with open_node_db(location) as db:
        st = db.state()
        if db.tables().get(table) != "copying" or st.provider is None:
            return False
    with provider_db(st.provider, location, readonly=True) as prov:
        return prov.tables().get(table) == "ok"


def copy_table(
    location: str, table: str, read: RowReader = direct_rows, *, epoch: int | None = None
) -> str:
    """Copy a ``copying`` table from the provider: note the provider's tick T, read its rows
    (at T or later) with the ids of the events after T they already show (see
    :data:`RowReader`), write them, and catch up from T. Each event is applied exactly once:
    those the copy shows are skipped, by the catch-up here and by later batches (the ids are
    stored with the rows, in the same transaction, until the node's position passes them: see
    :meth:`~baton.cascade.db.NodeDB.reflected`); applying one again would write its row version
    twice, which a trigger on the table (an audit table) would see. The table is ``ok`` once
    the node's position covers T and those events, ``catching-up`` until then. Resumable: a
    re-run copies afresh. The new state; ``copying`` still when the provider's own copy of the
    table is not whole yet (see :func:`copy_ready`): nothing is copied then, and the caller
    tries again later.

    The rows are written only if, in the writing transaction, the table is still ``copying``
    from the same provider: another copier (a worker that took over while this one read) may
    have copied it and applied batches since, and writing an older copy over them would apply
    those row versions again. A worker passes its ``epoch``: a newer one's claim on the node
    refuses the write (:class:`FencedOut`), as it refuses a stale worker's batches."""
    with open_node_db(location) as db:
        st = db.state()
        if db.tables().get(table) != "copying":
            return db.tables().get(table) or "absent"
        assert st.provider is not None
        _, pk = db.columns(table)
        cols, _ = db.columns(table)
        with provider_db(st.provider, location, readonly=True) as prov:
            if prov.tables().get(table) != "ok":
                return "copying"  # the provider has not copied it whole yet: wait for it
            pst = prov.state()
            base = prov.last_tick() if pst.role is Role.ROOT else prov.get_tick(pst.position)
            tick = base.tick_id if base else 0
            copy = read(prov.location, table, tick)
            with db.transaction() as cur:
                now_st = db.state()
                if epoch is not None and now_st.epoch > epoch:
                    raise FencedOut(
                        f"worker epoch {epoch} is stale: epoch {now_st.epoch} already claimed "
                        f"{now_st.name}; its copy of {table} is not written"
                    )
                now_state = db.tables().get(table)
                if now_state != "copying" or now_st.provider != st.provider:
                    return now_state or "absent"  # copied meanwhile by another, or moved
                if not st.merge_leaf:  # a merge-leaf's table holds other partitions' rows too
                    old = db.read_rows(table)  # a re-run starts the copy afresh
                    db.delete_keys(cur, table, pk, [[r[cols.index(c)] for c in pk] for r in old])
                db.upsert(cur, table, copy.columns, copy.rows)
                position = db.state().position
                if position > tick:
                    # The subscriber moved past T meanwhile: replay (T, position] for this
                    # table, but for the events the copy already shows.
                    events = [e for e in prov.batch_events(tick, position) if e.table == table]
                    _apply_table_events(db, cur, table, events, copy.reflected)
                # Later batches skip the rest of them; a re-copy replaces the entry.
                ahead = copy.upto if position < copy.upto else 0
                db.set_reflected(cur, table, ahead, copy.reflected if ahead else ())
                state = "catching-up" if position < max(tick, ahead) else "ok"
                db.set_table(cur, table, state, tick)
                if st.merge_leaf and db.host_role() is Role.ROOT:
                    # The copy's rows enter the combined queue (captured) with this: a
                    # merge-leaf taking over from here must not copy again.
                    now = db.tables()
                    ticks = {t: db.table_tick(t) for t in now}
                    partition_tick(db, cur, st, position, now, ticks, db.reflected())
        return state


def _apply_table_events(
    db: NodeDB, cur: object, table: str, events: Iterable[Event], shown: Collection[int] = ()
) -> None:
    """Apply ``events`` to ``table`` as a micro-batch is applied: each key's last event
    (:func:`~baton.cascade.batches.reduce_events`), set-wise, but for those whose id is in
    ``shown`` (the copy already shows them)."""
    reduced = reduce_events(events)
    write_rows(db, cur, rows_by_table(db, reduced, {table: "ok"}, {}, {table: shown}))


def emit(location: str, type_: str, data: dict[str, object], table: str | None = None,
         key: dict[str, object] | None = None) -> int:  # fmt: skip
    """Root: add a custom event; its id."""
    check_event_type(type_)
    with open_node_db(location) as db:
        st = db.state()
        if st.role is not Role.ROOT:
            raise Refused(f"{st.name} is a {st.role}: events are emitted at the root")
        with db.transaction() as cur:
            return db.insert_event(
                cur, type_, table, json.dumps(key) if key else None, json.dumps(data)
            )


def is_queue_only(db: NodeDB) -> bool:
    """Whether the node of ``db`` is a queue-only branch."""
    return db.get_local(QUEUE_ONLY) == "1"


__all__ = [
    "NAME_PATTERN",
    "QUEUE_ONLY",
    "RowReader",
    "add_table",
    "apply_batch",
    "check_event_type",
    "check_name",
    "copy_ready",
    "copy_table",
    "create_root",
    "create_subscriber",
    "direct_rows",
    "emit",
    "installed",
    "is_queue_only",
    "same_shape",
    "table_shape",
]
