"""What a node's applied batches amounted to: cumulative counts, kept in the node database.

Each batch :func:`~baton.cascade.apply.apply_batch` applies adds its size and duration here, in
its own transaction, under the local key ``apply_stats``: the counts are exact (a batch rolled
back leaves them as they were), survive worker restarts and moves, and any process can read
them. The node agent's metrics export them as the histograms ``baton_cascade_batch_events``
and ``baton_cascade_apply_seconds`` and the counter ``baton_cascade_events_applied_total`` at
scrape time: the apply path itself (in Spark's Python workers) needs no metrics endpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from baton.cascade.db import NodeDB

_KEY = "apply_stats"

#: Upper bounds of the batch-size buckets (events per batch).
EVENT_BUCKETS: tuple[float, ...] = (1, 10, 100, 1_000, 10_000, 100_000)
#: Upper bounds of the apply-duration buckets (seconds).
SECOND_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _zeros(bounds: tuple[float, ...]) -> list[int]:
    return [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)


@dataclass(slots=True)
class ApplyStats:
    """Cumulative counts of the applied batches (bucket counts are per bucket, not summed)."""

    batches: int = 0
    events: int = 0
    seconds: float = 0.0
    event_buckets: list[int] = field(default_factory=lambda: _zeros(EVENT_BUCKETS))
    second_buckets: list[int] = field(default_factory=lambda: _zeros(SECOND_BUCKETS))

    def add(self, events: int, seconds: float) -> None:
        self.batches += 1
        self.events += events
        self.seconds += seconds
        self.event_buckets[_bucket(EVENT_BUCKETS, events)] += 1
        self.second_buckets[_bucket(SECOND_BUCKETS, seconds)] += 1

    @staticmethod
    def cumulative(counts: list[int], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
        """Prometheus histogram buckets: (upper bound, count at or below it), ending at +Inf."""
        out = []
        total = 0
        for bound, count in zip((*bounds, float("inf")), counts, strict=True):
            total += count
            out.append(("+Inf" if bound == float("inf") else str(float(bound)), float(total)))
        return out


def _bucket(bounds: tuple[float, ...], value: float) -> int:
    return next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))


def read(db: NodeDB) -> ApplyStats:
    """The node's counts (zero if it never applied a batch, or the value is not readable)."""
    raw = db.get_local(_KEY)
    if raw is None:
        return ApplyStats()
    try:
        data: dict[str, Any] = json.loads(raw)
        stats = ApplyStats(
            batches=int(data["batches"]),
            events=int(data["events"]),
            seconds=float(data["seconds"]),
            event_buckets=[int(n) for n in data["event_buckets"]],
            second_buckets=[int(n) for n in data["second_buckets"]],
        )
    except (ValueError, KeyError, TypeError):
        # Written by another version with other buckets: start again rather than fail a batch.
        return ApplyStats()
    if len(stats.event_buckets) != len(EVENT_BUCKETS) + 1:
        return ApplyStats()
    if len(stats.second_buckets) != len(SECOND_BUCKETS) + 1:
        return ApplyStats()
    return stats


def record(db: NodeDB, cur: Any, events: int, seconds: float) -> None:
    """Add one batch of ``events`` applied in ``seconds``, in the batch's transaction ``cur``."""
    stats = read(db)
    stats.add(events, seconds)
    value = {
        "batches": stats.batches,
        "events": stats.events,
        "seconds": round(stats.seconds, 6),
        "event_buckets": stats.event_buckets,
        "second_buckets": stats.second_buckets,
    }
    db.set_local(cur, _KEY, json.dumps(value, separators=(",", ":")))
