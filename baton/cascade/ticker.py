"""The root's ticker: makes ticks (batch boundaries) and publishes the global watermark.

A tick is made when any of these holds (checked every ``period``):

- at least ``max_count`` events wait (a batch never grows past about that many events);
- the oldest waiting event is ``max_lag`` seconds old (bounds the lag an event can sit unticked);
- nothing was ticked for ``idle`` seconds (subscribers see the set is alive, and watermarks move).

Defaults aim at low lag: period 0.05 s, max_count 10,000, max_lag 0.01 s, idle 2 s (PgQ's are
1 s, 500, 3 s and 60 s). With max_lag below the period, a tick comes at every step that finds
events waiting, so an event waits at most one period for its tick. (A max_lag equal to the
period made an event committed just after a step wait for the step after next: up to two
periods, the largest part of the lag at 2,000 changes/s.) A micro-batch takes every tick
available, so frequent ticks cost little downstream.

The global watermark is the lowest tick every subscriber of the root reports (each branch
reports the lowest of its own position and its subscribers'). When it rises the root writes a
``baton.watermark`` event, which travels down the cascade so every node trims its queue below it
(seed 004: nothing is deleted until everyone has it).

When a tick is due, the root's registered sequences' last values go first, as one ``baton.seq``
event if they changed (:func:`baton.cascade.queue_events.send_values`), so that every node keeps
its sequences at least as high as the root's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from baton.cascade import queue_events
from baton.cascade.db import NodeDB
from baton.cascade.model import WATERMARK, Role, Tick
from baton.errors import CascadeError


@dataclass(frozen=True, slots=True)
class TickerConfig:
    period: float = 0.05
    max_count: int = 10_000
    max_lag: float = 0.01
    idle: float = 2.0


def _still_root(db: NodeDB) -> bool:
    """Checked again under the write lock: a switchover may have begun, or ended with this node
    demoted, since the caller looked. An event or tick written by a node that is no longer the
    root would collide with the new root's ids when it follows it."""
    return db.state().role is Role.ROOT and db.get_local("switch_tick") is None


def tick_once(db: NodeDB, cfg: TickerConfig, now: float) -> Tick | None:
    """Make a tick if one is due (see the module docstring); the tick or None."""
    st = db.state()
    if st.role is not Role.ROOT:
        raise CascadeError(f"{st.name} is a {st.role}: only the root makes ticks")
    if db.get_local("switch_tick") is not None:
        return None  # a switchover is handing the root role over: the last tick is made
    count, oldest = db.pending()
    last = db.last_tick()
    due = (
        count >= cfg.max_count
        or (count > 0 and oldest is not None and now - oldest >= cfg.max_lag)
        or last is None
        or now - last.time >= cfg.idle
    )
    if not due:
        return None
    # The sequences' values travel in this tick's batch (at most one event per tick).
    queue_events.send_values(db, _still_root)
    with db.transaction() as cur:
        if not _still_root(db):
            return None
        return db.make_tick(cur)


def publish_watermark(db: NodeDB) -> int | None:
    """Root: if the lowest subscriber watermark rose, emit it and trim; the new value."""
    st = db.state()
    if db.get_local("switch_tick") is not None:
        return None  # handing the root role over: no new event may follow the last tick
    marks = db.watermarks()
    last = db.last_tick()
    if last is None or not marks:
        # No subscriber known: nothing may be deleted. (A root taking over in a switchover or
        # failover has no entries for a moment, before the old root's and the redirected
        # nodes' are written; trimming to its last tick then cut the queue from under nodes
        # that still needed it.) The first subscriber starts from the last tick anyway.
        return None
    low = min(marks.values())
    if low <= st.global_watermark:
        return None
    with db.transaction() as cur:
        if not _still_root(db):
            return None
        db.insert_event(cur, WATERMARK, None, None, json.dumps({"tick": low}))
        db.set_local(cur, "global_watermark", str(low))
        db.trim(cur, low)
    return low
