"""The values of the cascade: events, ticks, node roles and a node's own state.

A **set** is a group of node databases that carry the same events, batch boundaries and tick ids
(seed 004). Its **root** captures events and makes ticks; a **branch** keeps a full copy of the
queue (so it can be anyone's provider) and applies the tables it subscribes to; a **leaf** only
applies tables. A **batch** is the events between two consecutive ticks.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: Row-change event types. Any other type is a custom event: carried and copied, not applied.
INSERT, UPDATE, DELETE = "I", "U", "D"
ROW_TYPES = frozenset({INSERT, UPDATE, DELETE})
#: The root's global watermark travels down as an event of this type (data: the tick id).
WATERMARK = "baton.watermark"
#: A merge-leaf adds one to the combined set's queue with each partition batch it merges
#: (data: the partition set and its tick), so that every node of the combined set knows how
#: far the combined set holds each partition (seed 004: "send tick_id to queue").
PARTITION_TICK = "baton.partition-tick"
#: The node's local key marking a pause as a compare's or repair's (set and cleared by
#: :mod:`baton.cascade.table_diff`; an operator's pause or resume clears it).
PAUSE_MARK = "compare"


class Role(enum.StrEnum):
    ROOT = "root"
    BRANCH = "branch"
    LEAF = "leaf"

    @property
    def carries_queue(self) -> bool:
        return self is not Role.LEAF


@dataclass(frozen=True, slots=True)
class Tick:
    """A tick: a batch boundary. ``ev_high`` is the highest event id the root had committed
    when it made the tick (SQLite); ``snapshot`` is the root's transaction snapshot at the tick
    (PostgreSQL), so a batch never misses an event that commits after the tick with a lower id."""

    tick_id: int
    ev_high: int
    time: float
    snapshot: str | None = None


class Event(NamedTuple):
    """One queue event. ``key`` and ``data`` are JSON objects (text); ``tick`` is the tick whose
    batch holds it (None at the root until a tick covers it). A named tuple, not a dataclass:
    the apply step builds hundreds of thousands per second."""

    ev_id: int
    time: float
    type: str
    table: str | None
    key: str | None
    data: str | None
    txid: int = 0
    tick: int | None = None


@dataclass(frozen=True, slots=True)
class TableCopy:
    """A provider's table as an initial copy read it, after the provider's tick T was noted.

    The rows are read at T or later, so they may already show some of the table's events after
    T. ``reflected`` names exactly those (their ids): read in the same snapshot as the rows, or
    per key range in the snapshot that read that range's rows (see
    :meth:`baton.cascade.db.NodeDB.read_copy`). The subscriber skips them when they arrive in
    its batches, so that each row version is written once (invariant 3: a trigger on the
    subscriber's table sees every change exactly once)."""

    columns: list[str]
    rows: list[Sequence[Any]]
    #: Ids of the table's row events after T whose changes the rows already show.
    reflected: frozenset[int] = field(default_factory=frozenset)
    #: A provider tick whose batches, up to it, hold every reflected event (0: none). Until the
    #: subscriber's position reaches it, its copy shows changes its position does not cover yet.
    upto: int = 0


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's own state, kept in its database."""

    name: str
    set_name: str
    role: Role
    provider: str | None
    #: The last tick whose batch this node has applied (and copied, for a branch).
    position: int
    #: The highest worker epoch that applied here; a lower one is refused.
    epoch: int
    paused: bool
    #: The lowest tick every node of the set has applied (events below it may be deleted).
    global_watermark: int
    #: For a merge-leaf (a leaf hosted in a node of another set, the combined set, whose queue
    #: it fills): that set's name.
    combined: str | None = None

    @property
    def merge_leaf(self) -> bool:
        return self.combined is not None

    @property
    def needs_events(self) -> bool:
        """Whether applying a batch here needs every event, not only each key's last: a node
        that carries the queue copies them, a merge-leaf queues them in its combined set."""
        return self.role.carries_queue or self.merge_leaf
