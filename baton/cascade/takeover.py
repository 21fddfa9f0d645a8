"""Unplanned: ``failover`` (the root is gone: the live branch with the highest tick takes
over, every subscriber follows it) and ``resurrect`` (the old root comes back as a branch,
its events after the fork saved).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from baton.cascade import decide, sync_mode
from baton.cascade.codec import decode
from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.db.base import split_location
from baton.cascade.handover import demote, promote
from baton.cascade.model import WATERMARK, Role
from baton.cascade.set_ops import (
    CascadeSet,
    find_root,
    live_root,
    prune_subscribers,
    release_dead,
    root_since,
    seen_of,
    tag,
)
from baton.errors import (
    CascadeError,
    Refused,
    SyncUnsafe,
)


def failover(
    c: CascadeSet, dead_root: str, accept_loss: bool = False
) -> tuple[str, int, list[str]]:
    """Unplanned: ``dead_root`` is gone. Tag it dead, promote the live queue-carrying node with
    the highest tick, and redirect every node that received from the dead root to the new root.
    Returns (new root, fork tick, notes about nodes that need attention).

    Refused, before anything is tagged, when no live branch carries the queue; and while
    ``dead_root`` is not tagged dead yet (a failover tags first), when it is reachable and not
    the root or another live root exists: use tag-dead for a node that is not the root. Once it
    is tagged, a re-run finishes the failover (or returns the new root if it is done).

    Synchronous mode: refused (:class:`SyncUnsafe`, before anything is tagged) when writers
    were acknowledged at a tick no live branch has reached (see :mod:`baton.cascade.sync_mode`:
    with K confirming branches, only after losing the root and K of them), unless
    ``accept_loss``."""
    c.location(dead_root)  # an unknown name is refused before anything changes
    try:
        role: Role | None = c.state(dead_root).role
    except CascadeError:
        role = None  # unreachable, as a dead root usually is, or not a node any more
    if not c.dead(dead_root):
        if role is not None and role is not Role.ROOT:
            raise Refused(f"{dead_root} is a {role}, not the root: use tag-dead for it")
        other = live_root(c, exclude=dead_root)
        if other is not None:
            raise Refused(f"{dead_root} is not the root ({other} is): use tag-dead for it")
    elif role is not None and role is not Role.ROOT:
        raise Refused(f"{dead_root} is not the root: failover replaces a root")
    done = live_root(c, exclude=dead_root)
    if done is not None:
        return done, root_since(c, done), []  # already failed over
    new_root = decide.new_root(_carriers(c, dead_root), dead_root)
    if new_root is None:
        raise Refused("no live branch carries the queue: nothing can become the root")
    if not accept_loss:
        _check_acked(c, dead_root)
    tag(c, dead_root, True)
    was_under = c.state(new_root).provider
    # Fence first: from here no node applies another batch of the dead root (whose database
    # may still be readable, or come back). apply_batch refuses a batch from a provider that
    # is no longer the node's, in the transaction that would apply it.
    unfenced = _fence_from(c, dead_root, new_root)
    _catch_up_furthest(c, dead_root, new_root)
    if unfenced:
        # A node missed (its database busy or unreachable for a moment) may have applied
        # more of the dead root's batches meanwhile: fence it again, and catch the new root
        # up to it too if it got further.
        unfenced = _fence_from(c, dead_root, new_root)
        _catch_up_furthest(c, dead_root, new_root)
    with c.db(new_root) as db:
        last = db.last_tick()
    # The fork: the new root's last tick, which stays its last until it is promoted (it has
    # no provider since the fence, and no ticker until it is the root).
    fork = last.tick_id if last else 0
    # Before the promotion, a position past the fork can only be the dead root's ticks.
    # After it, the new root ticks at once and the nodes fenced onto it apply those ticks
    # (with the same ids): a node read then would be taken for ahead, rewound, and would
    # apply the new root's first ticks twice.
    notes = _rewind_past(c, dead_root, new_root, fork, unfenced)
    with c.db(new_root) as db:
        fork = promote(db)
    sync_mode.forget_above(c, fork)
    if was_under not in (None, dead_root) and not c.dead(was_under):
        # The new root received from another branch: that one no longer holds its queue for
        # it (it receives from the new root now, or will).
        with suppress(CascadeError, OSError), c.db(was_under) as pdb, pdb.transaction() as cur:
            pdb.drop_subscriber(cur, new_root)
    _bury_merge_leaves(c, new_root, dead_root)
    release_dead(c, dead_root)
    return new_root, fork, notes


def _check_acked(c: CascadeSet, dead_root: str) -> None:
    """Refuse (:class:`SyncUnsafe`) a failover that would lose a transaction acknowledged in
    synchronous mode: no live branch at or past the highest acknowledged tick recorded."""
    acked = sync_mode.acked_of(c, exclude=dead_root)
    short = decide.loses_acked(_carriers(c, dead_root), dead_root, acked)
    if short is not None:
        raise SyncUnsafe(
            f"failover refused: writers were acknowledged in sync mode at tick {acked}, and "
            f"the highest live branch is at tick {short}: promoting it would lose acknowledged "
            "transactions. Bring back a branch that has them (see 'baton cascade status'), or "
            "run failover with --accept-loss to promote it anyway",
            acked,
            short,
        )


def _carriers(c: CascadeSet, dead_root: str) -> dict[str, decide.Seen]:
    """Every live member but ``dead_root``, as a failover reads it."""
    return {name: seen_of(c, name) for name, (_, dead) in sorted(c.nodes.items()) if not dead}


def _fence_from(c: CascadeSet, dead_root: str, new_root: str) -> dict[str, str]:
    """Every reachable node receiving from ``dead_root`` now receives from ``new_root``, and
    ``new_root`` from no one (it is promoted next): their workers stop applying the dead
    root's batches at once, so the failover sees positions that no longer move. Returns the
    nodes it could not fence (they could not be read or written), with why: they may still
    apply the dead root's batches."""
    missed: dict[str, str] = {}
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == dead_root:
            continue
        try:
            with open_node_db(loc) as db, db.transaction() as cur:
                # Read in the transaction that writes: a batch being applied commits before
                # or after it, never in between.
                if db.state().provider == dead_root:
                    db.set_local(cur, "provider", None if name == new_root else new_root)
        except (CascadeError, OSError) as exc:
            missed[name] = str(exc)
    return missed


def _catch_up_furthest(c: CascadeSet, dead_root: str, new_root: str) -> None:
    """Another node got further from the dead root than ``new_root``: bring ``new_root`` up
    to it, so no node has ticks the new root lacks (nothing rewound, nothing applied twice)."""
    ahead = decide.furthest(_carriers(c, dead_root), dead_root)
    if ahead is not None and ahead != new_root:
        catch_up(c, new_root, ahead)


def _rewind_past(
    c: CascadeSet, dead_root: str, new_root: str, fork: int, unfenced: Mapping[str, str]
) -> list[str]:
    """Before ``new_root`` is promoted at tick ``fork``: every other live node past the fork
    (it applied ticks the set lost with the dead root: a leaf, which has no queue to catch
    the new root up from, or a node the fence could not reach) continues from the fork; one
    still receiving from ``dead_root`` is fenced now, in the transaction that reads its
    position. ``new_root`` holds its queue for every node receiving from it. Returns the
    notes about the nodes that need attention (``unfenced``: the fence missed them, why)."""
    notes: list[str] = []
    held: dict[str, int] = {}
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == new_root:
            continue
        missed = f" (the fence could not reach it: {unfenced[name]})" if name in unfenced else ""
        try:
            with open_node_db(loc) as db, db.transaction() as cur:
                st = db.state()
                provider = new_root if st.provider == dead_root else st.provider
                if st.position > fork:
                    # Its tables may differ from the new root's for the keys those ticks
                    # changed. Continue from the fork (dropping the lost ticks from its
                    # queue: the new root's ticks after the fork are other ones).
                    if st.role.carries_queue:
                        db.discard_after(cur, fork)
                    db.set_local(cur, "position", str(fork))
                    provider = new_root
                if provider != st.provider:
                    db.set_local(cur, "provider", provider)
        except (CascadeError, OSError):
            if missed:
                notes.append(
                    f"{name}: not fenced, it may still apply {dead_root}'s batches{missed}; "
                    f"once reachable, run change-provider {name} {new_root} and 'check'"
                )
            else:
                notes.append(f"{name}: unreachable, redirect it later with change-provider")
            continue
        if st.position > fork:
            notes.append(
                f"{name}: had applied up to tick {st.position} (> {fork}); rewound to {fork}"
                f"{missed}, run 'check' and repair the differences"
            )
        if provider == new_root:
            held[name] = min(st.position, fork)
    if held:
        with c.db(new_root) as ndb, ndb.transaction() as cur:
            for name, position in held.items():
                ndb.set_watermark(cur, name, position)
    return notes


def catch_up(c: CascadeSet, node: str, source: str) -> int:
    """Apply to branch ``node``, in one batch, every tick ``source`` (a node that carries the
    same queue further) has after ``node``'s position, as its worker would; the new position.
    A failover uses it before promoting ``node``."""
    # Imported here: the apply step's queue-event handlers use the set operations.
    from baton.cascade.apply import apply_batch
    from baton.cascade.batches import reduce_events

    with c.db(node) as db:
        st = db.state()
        with open_node_db(c.location(source), readonly=True) as src:
            last = src.last_tick()
            if last is None or last.tick_id <= st.position:
                return st.position
            ticks = src.ticks(st.position, last.tick_id)
            events = list(src.batch_events(st.position, last.tick_id))
        result = apply_batch(db, ticks, reduce_events(events), events, st.epoch)
    return result.position


def _bury_merge_leaves(c: CascadeSet, new_root: str, dead_root: str) -> None:
    """The dead combined root's merge-leaves, tagged dead in their partition sets (found
    through the new root's merge-leaves): they no longer hold their partitions' queues."""
    dead_base = split_location(c.location(dead_root))[0]
    with c.db(new_root) as db:
        parts = sorted(db.merge_leaves())
    for part in parts:
        pc = CascadeSet(f"{c.location(new_root)}#{part}")
        for name, (loc, dead) in sorted(pc.nodes.items()):
            if not dead and split_location(loc)[0] == dead_base:
                tag(pc, name, True)


def resurrect(c: CascadeSet, old_root: str, out: Path) -> int:
    """An old root came back after a failover. Its events after the fork point never reached
    the set: write them to ``out`` (JSON lines), drop its ticks after the fork, and make it a
    branch of the current root. The keys those events touched are copied again from the new
    root as the node catches up (full row images). Returns the number of events saved."""
    new_root = find_root(c, exclude=old_root)
    fork = root_since(c, new_root)
    location = c.location(old_root)
    with open_node_db(location) as db:
        st = db.state()
        if st.role is not Role.ROOT:
            if st.provider == new_root:
                return 0  # done before
            raise Refused(f"{old_root} is a {st.role}, not an old root")
        # Stop capturing first: every event to save is then in the queue, and the repair
        # below is not captured as new events.
        with db.transaction() as cur:
            for table in db.tables():
                db.capture(cur, table, False)
                db.guard(cur, table, True, db.guard_message(table, new_root))
        # The old root's own watermark events are bookkeeping, not changes: nothing is lost
        # with them (the set's watermark moves on without them).
        lost = [e for e in db.events_after(fork) if e.type != WATERMARK]
        if lost:  # a re-run after the discard finds none and keeps the file
            with out.open("w") as f:
                for e in lost:
                    f.write(json.dumps(_event_dict(e)) + "\n")
        touched: dict[str, set[str]] = {}
        for e in lost:
            if e.table is not None and e.key is not None and e.table in db.tables():
                touched.setdefault(e.table, set()).add(e.key)
        with open_node_db(c.location(new_root)) as ndb:
            # Hold the set's queue at the fork first, so it cannot be trimmed while we work.
            base = ndb.get_tick(fork) or ndb.last_tick()
            with ndb.transaction() as cur:
                ndb.set_watermark(cur, old_root, base.tick_id if base else fork)
            if ndb.get_tick(fork) is None:
                # The set trimmed its queue past the fork meanwhile: rejoin with a full copy
                # of the tables instead of a catch-up.
                _rejoin_by_copy(db, ndb, new_root)
                resumed = True
            else:
                fresh = {t: _current_rows(ndb, t, keys) for t, keys in touched.items()}
                resumed = False
        if not resumed:
            with db.transaction() as cur:
                db.discard_after(cur, fork)
                db.set_local(cur, "switch_tick", None)
                db.set_local(cur, "switch_to", None)
                # Undo what the lost events did: those keys get the set's current rows (the
                # catch-up from the fork then replays the set's own changes to them in order).
                for table, (cols, pk, keys, rows) in fresh.items():
                    db.delete_keys(cur, table, pk, keys)
                    db.upsert(cur, table, cols, rows)
            demote(db, new_root, fork)
    tag(c, old_root, False)
    prune_subscribers(c, old_root)
    with open_node_db(location) as db:
        position = db.state().position
    with open_node_db(c.location(new_root)) as ndb, ndb.transaction() as cur:
        ndb.set_watermark(cur, old_root, position)
    return len(lost)


def _rejoin_by_copy(db: NodeDB, root: NodeDB, root_name: str) -> None:
    """Make ``db`` a branch of ``root`` from ``root``'s latest tick T: every replicated table
    copied (rows read after T was noted, so they are at T or later, with the events after T
    they already show, which the catch-up from T skips as after
    :func:`~baton.cascade.node_ops.copy_table`), the queue restarted at T."""
    base = root.last_tick()
    assert base is not None
    copies = {}
    whole = {t for t, state in root.tables().items() if state == "ok"}
    for table in db.tables():
        if table in whole:  # else copied by the node's worker once the root has it whole
            copies[table] = root.read_copy(table, base.tick_id)
    with db.transaction() as cur:
        db.discard_after(cur, 0)
        db.copy_batch(cur, [], [base])
        db.set_local(cur, "switch_tick", None)
        db.set_local(cur, "switch_to", None)
        for table, copy in copies.items():
            _, pk = db.columns(table)
            old = db.read_rows(table)
            mine, _ = db.columns(table)
            db.delete_keys(cur, table, pk, [[r[mine.index(k)] for k in pk] for r in old])
            db.upsert(cur, table, copy.columns, copy.rows)
            db.set_reflected(cur, table, copy.upto, copy.reflected)
            # Position T: caught up once past the events the copy shows.
            db.set_table(cur, table, "catching-up" if copy.reflected else "ok", base.tick_id)
        for table in set(db.tables()) - set(copies):
            db.set_table(cur, table, "copying", 0)
    demote(db, root_name, base.tick_id)


def _current_rows(
    db: NodeDB, table: str, keys: set[str]
) -> tuple[list[str], list[str], list[list[object]], list[tuple[object, ...]]]:
    cols, pk = db.columns(table)
    key_values = [[decode(k)[c] for c in pk] for k in sorted(keys)]
    return cols, pk, key_values, db.read_keys(table, pk, key_values)


def _event_dict(e: object) -> dict[str, object]:
    fields = ("ev_id", "time", "type", "table", "key", "data", "txid", "tick")
    return {f: getattr(e, f) for f in fields}


__all__ = [
    "catch_up",
    "failover",
    "resurrect",
]
