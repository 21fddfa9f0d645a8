"""Prometheus series of the cascade members a node agent serves, read at scrape time.

The collector starts no thread and polls nothing: each scrape asks the agent which cascade
members it holds (:class:`Served`), and reads what the services already write into each node
database (its state, its heartbeat, the root's ticks, the counts of its applied batches:
:mod:`baton.cascade.apply_stats`). A member the agent holds as standby is
exported too, so a dashboard sees both ends of a worker's placement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from baton.cascade import apply_stats, beat
from baton.cascade.apply_stats import EVENT_BUCKETS, SECOND_BUCKETS, ApplyStats
from baton.cascade.beat import ServiceState
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.errors import CascadeError


class WorkerState(StrEnum):
    """A cascade member's worker as this node sees it."""

    RUNNING = "running"
    """This node leads the member and its service beats."""
    STANDBY = "standby"
    """This node holds the member as a follower, ready to take it over."""
    STOPPED = "stopped"
    """This node leads the member but its service is not running (stopped, silent, never)."""


@dataclass(frozen=True, slots=True)
class Served:
    """One cascade member held by this node agent."""

    location: str
    """The member's node database."""
    leading: bool
    """Whether this agent leads it (runs its service) rather than standing by."""


#: Every series name the collector may export (the dashboard test checks panels against it).
SERIES: tuple[str, ...] = (
    "baton_cascade_member_role",
    "baton_cascade_worker_state",
    "baton_cascade_applied_tick",
    "baton_cascade_lag_ticks",
    "baton_cascade_lag_seconds",
    "baton_cascade_paused",
    "baton_cascade_set_root",
    "baton_cascade_global_watermark",
    "baton_cascade_tables",
    "baton_cascade_events_applied_total",
    "baton_cascade_batch_events_bucket",
    "baton_cascade_batch_events_count",
    "baton_cascade_batch_events_sum",
    "baton_cascade_apply_seconds_bucket",
    "baton_cascade_apply_seconds_count",
    "baton_cascade_apply_seconds_sum",
)

_MEMBER = ["node", "set", "member"]


@dataclass(frozen=True, slots=True)
class _Reading:
    set_name: str
    member: str
    role: Role
    position: int
    paused: bool
    service: ServiceState
    global_watermark: int
    lag_ticks: int | None
    lag_seconds: float | None
    root: str | None
    applied: ApplyStats
    tables: dict[str, int]
    """Replicated tables per state (``copying``, ``catching-up``, ``ok``)."""


def _member_name(nodes: dict[str, tuple[str, bool]], location: str) -> str:
    return next((name for name, (loc, _) in nodes.items() if loc == location), location)


def _read(location: str, now: float) -> _Reading | None:
    """One member's state from its own database and its root's ticks (None: unreadable)."""
    try:
        with open_node_db(location) as db:
            st = db.state()
            served = beat.read(db)
            applied = apply_stats.read(db)
            tables: dict[str, int] = {}
            for table_state in db.tables().values():
                tables[table_state] = tables.get(table_state, 0) + 1
            nodes = db.nodes()
            last = db.last_tick() if st.role is Role.ROOT else None
        root = None
        root_loc = None
        if st.role is Role.ROOT:
            root, root_loc = _member_name(nodes, location), location
        else:
            for name, (loc, dead) in sorted(nodes.items()):
                if dead:
                    continue
                try:
                    with open_node_db(loc) as other:
                        if other.state().role is Role.ROOT:
                            root, root_loc = name, loc
                            last = other.last_tick()
                            break
                except (CascadeError, OSError):
                    continue
    except (CascadeError, OSError):
        return None
    position = last.tick_id if st.role is Role.ROOT and last is not None else st.position
    lag_t: int | None = None
    lag_s: float | None = None
    if last is not None and root_loc is not None:
        lag_t = max(0, last.tick_id - position)
        lag_s = 0.0
        if lag_t:
            try:
                with open_node_db(root_loc) as rdb:
                    nxt = rdb.get_tick(position + 1)
            except (CascadeError, OSError):
                nxt = None
            lag_s = None if nxt is None else max(0.0, now - nxt.time)
    return _Reading(
        set_name=st.set_name,
        member=_member_name(nodes, location),
        role=st.role,
        position=position,
        paused=st.paused,
        service=ServiceState.NEVER if served is None else served.state(now),
        global_watermark=st.global_watermark,
        lag_ticks=lag_t,
        lag_seconds=lag_s,
        root=root,
        applied=applied,
        tables=tables,
    )


class _Families:
    """The collector's families for one scrape."""

    def __init__(self) -> None:
        self.role = GaugeMetricFamily(
            "baton_cascade_member_role",
            "1 for the member's role (root, branch, leaf)",
            labels=[*_MEMBER, "role"],
        )
        self.state = GaugeMetricFamily(
            "baton_cascade_worker_state",
            "1 for the state of the member's worker on this node (running, standby, stopped)",
            labels=[*_MEMBER, "state"],
        )
        self.tick = GaugeMetricFamily(
            "baton_cascade_applied_tick",
            "The last tick the member applied (the root: the last tick it made)",
            labels=_MEMBER,
        )
        self.lag_ticks = GaugeMetricFamily(
            "baton_cascade_lag_ticks", "Ticks the member is behind its root", labels=_MEMBER
        )
        self.lag_seconds = GaugeMetricFamily(
            "baton_cascade_lag_seconds",
            "Age of the oldest tick the member has not applied (0 when caught up)",
            labels=_MEMBER,
        )
        self.paused = GaugeMetricFamily(
            "baton_cascade_paused", "1 while the member is paused", labels=_MEMBER
        )
        self.root = GaugeMetricFamily(
            "baton_cascade_set_root",
            "1 for the set's root as a member of it served here sees it",
            labels=["node", "set", "root"],
        )
        self.watermark = GaugeMetricFamily(
            "baton_cascade_global_watermark",
            "The set's global watermark as a member served here last learned it",
            labels=["node", "set"],
        )
        self.tables = GaugeMetricFamily(
            "baton_cascade_tables",
            "Replicated tables of the member per state: copying, catching-up (copied, its "
            "batches not yet past the copy), ok (copy progress: ok over the sum)",
            labels=[*_MEMBER, "state"],
        )
        self.events = CounterMetricFamily(
            "baton_cascade_events_applied",
            "Events the member applied (rate: events/s; a leaf: rows applied)",
            labels=_MEMBER,
        )
        self.sizes = HistogramMetricFamily(
            "baton_cascade_batch_events",
            "Events per applied batch (a leaf: rows applied)",
            labels=_MEMBER,
        )
        self.durations = HistogramMetricFamily(
            "baton_cascade_apply_seconds",
            "Duration of applying one batch, up to its commit",
            labels=_MEMBER,
        )

    def all(self) -> list[Metric]:
        return [
            self.role,
            self.state,
            self.tick,
            self.lag_ticks,
            self.lag_seconds,
            self.paused,
            self.root,
            self.watermark,
            self.tables,
            self.events,
            self.sizes,
            self.durations,
        ]


class CascadeCollector(Collector):
    """Exports, labelled with ``node`` (this agent's id), each served member's role, worker
    state, applied tick, lag, pause, tables by copy state and applied batches (events, sizes,
    durations), and per set its root and global watermark. A member whose database cannot be
    read is left out."""

    def __init__(self, node_id: str, served: Callable[[], Sequence[Served]]) -> None:
        self.node_id = node_id
        self.served = served

    def describe(self) -> Iterable[Metric]:
        # Declared up front so the registry knows the names without reading any database.
        return self._families()

    def _families(self) -> list[Metric]:
        return _Families().all()

    def collect(self) -> Iterator[Metric]:
        f = _Families()
        now = time.time()
        sets_done: set[str] = set()
        for served in self.served():
            r = _read(served.location, now)
            if r is None:
                continue
            key = [self.node_id, r.set_name, r.member]
            for value in Role:
                f.role.add_metric([*key, value.value], 1.0 if r.role is value else 0.0)
            if not served.leading:
                current = WorkerState.STANDBY
            elif r.service is ServiceState.RUNNING:
                current = WorkerState.RUNNING
            else:
                current = WorkerState.STOPPED
            for ws in WorkerState:
                f.state.add_metric([*key, ws.value], 1.0 if ws is current else 0.0)
            f.tick.add_metric(key, float(r.position))
            if r.lag_ticks is not None:
                f.lag_ticks.add_metric(key, float(r.lag_ticks))
            if r.lag_seconds is not None:
                f.lag_seconds.add_metric(key, r.lag_seconds)
            f.paused.add_metric(key, 1.0 if r.paused else 0.0)
            for table_state, count in sorted(r.tables.items()):
                f.tables.add_metric([*key, table_state], float(count))
            if r.role is not Role.ROOT:  # the root applies nothing: it makes the ticks
                a = r.applied
                f.events.add_metric(key, float(a.events))
                size_buckets = a.cumulative(a.event_buckets, EVENT_BUCKETS)
                f.sizes.add_metric(key, size_buckets, float(a.events))
                second_buckets = a.cumulative(a.second_buckets, SECOND_BUCKETS)
                f.durations.add_metric(key, second_buckets, a.seconds)
            if r.set_name not in sets_done:
                sets_done.add(r.set_name)
                if r.root is not None:
                    f.root.add_metric([self.node_id, r.set_name, r.root], 1.0)
                f.watermark.add_metric([self.node_id, r.set_name], float(r.global_watermark))
        yield from f.all()
