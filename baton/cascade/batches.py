"""One cascade batch, whichever way it travels: through Spark (the ``baton`` source's
micro-batch, decoded by the ``batonapply`` sink) or read straight from the provider by a
low-latency worker's task. Both cut the same tick ranges, reduce the events by the same rule
and keep the same events, here; :func:`baton.cascade.apply.apply_batch` then applies it and
says what it did as an :class:`Outcome`.

- :func:`next_end`: where the next batch after a position ends (at most ``max_ticks`` ticks,
  about ``max_events`` events);
- :func:`batch_ticks`: the ticks of a range, every one, or an error naming what is missing;
- :func:`reduce_events`: the last row event of each (table, key), the cascade's one rule (a
  table copy's catch-up uses it too);
- :func:`make_batch` and :func:`read_batch`: a :class:`Batch` from its ticks and events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from operator import itemgetter

from baton.cascade.db import NodeDB
from baton.cascade.model import ROW_TYPES, Event, Tick
from baton.errors import CascadeError


class Outcome(StrEnum):
    """What became of a batch (or of a worker's following), as values, never as text."""

    APPLIED = "applied"
    IDLE = "idle"
    """Nothing new at the provider (a low-latency task looks again)."""
    NO_TICK = "no tick"
    """An empty micro-batch: nothing to apply."""
    ALREADY_APPLIED = "already applied"
    """A replay (Spark replays the last micro-batch after a failure)."""
    PROVIDER_CHANGED = "provider changed"
    PAUSED = "paused"
    TRACKING = "tracking"
    """A combined-failover's merge-leaf: its position moves with the combined set."""
    FENCED = "fenced"
    """A newer epoch applied to the node: this worker applies nothing ever again."""
    PROMOTED = "promoted"
    """The node became the root: there is nothing to follow."""

    @property
    def ends_following(self) -> bool:
        """Whether a worker stops following its provider on it (and the service looks at
        the node's state to restart, stop, or tick)."""
        return self in _ENDS


_ENDS = frozenset(
    {Outcome.PROVIDER_CHANGED, Outcome.PAUSED, Outcome.TRACKING, Outcome.FENCED, Outcome.PROMOTED}
)


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch to apply: its ticks, the last row event of each (table, key), and the events
    the node keeps (every one where the queue is carried or merged; else only the non-row
    ones: watermarks, scripts, sequences)."""

    ticks: list[Tick]
    reduced: list[Event]
    events: list[Event]


_ID = itemgetter(0)


def reduce_events(events: Iterable[Event]) -> list[Event]:
    """The last row event of every (table, key), in id order (what a batch leaves behind)."""
    last: dict[tuple[str, str], Event] = {}
    # Fields by position (ev_id 0, type 2, table 3, key 4): a named field is a Python-level
    # lookup, and this runs once for every event of a batch.
    for e in events:
        if e[2] in ROW_TYPES and e[3] is not None and e[4] is not None:
            k = (e[3], e[4])
            current = last.get(k)
            if current is None or e[0] > current[0]:
                last[k] = e
    return sorted(last.values(), key=_ID)


def make_batch(ticks: list[Tick], events: list[Event], needs_events: bool) -> Batch:
    """The batch of ``ticks`` with ``events`` (in id order); ``needs_events``: the node keeps
    every event (:attr:`~baton.cascade.model.NodeState.needs_events`)."""
    reduced = reduce_events(events)
    if not needs_events:
        events = [e for e in events if e[2] not in ROW_TYPES]
    return Batch(ticks, reduced, events)


def next_end(db: NodeDB, begin: int, max_ticks: int, max_events: int) -> int:
    """The last tick of the next batch after tick ``begin`` on the provider ``db``: every tick
    there is, but at most ``max_ticks`` and ending at the first tick that takes it to about
    ``max_events`` events (at least one tick). ``begin`` when nothing new was ticked."""
    last = db.last_tick()
    latest = last.tick_id if last else 0
    end = max(begin, min(latest, begin + max_ticks))
    if end > begin and last is not None and last.ev_high > max_events:
        # Event ids grow with ticks (ev_high is the highest id a tick covers), so the id
        # distance is about the number of events between two ticks.
        ticks = db.ticks(max(begin - 1, 0), end)
        low = 0 if begin == 0 else ticks[0].ev_high if ticks else None
        if low is not None and (begin == 0 or ticks[0].tick_id == begin):
            for t in ticks:
                if t.tick_id > begin and t.ev_high - low >= max_events:
                    return int(t.tick_id)
    return end


def batch_ticks(db: NodeDB, provider: str, start: int, end: int) -> list[Tick]:
    """The ticks after ``start`` up to ``end`` on the provider ``db``, every one of them, or
    :class:`CascadeError` (trimmed, or not a provider of that range)."""
    ticks = db.ticks(start, end)
    if not (ticks and ticks[-1].tick_id == end and ticks[0].tick_id == start + 1):
        have = ticks[-1].tick_id if ticks else "none"
        raise CascadeError(
            f"{provider} lacks ticks {start + 1}..{end} (has up to {have}): trimmed or not a "
            "provider"
        )
    return list(ticks)


def read_batch(src: NodeDB, provider: str, start: int, end: int, needs_events: bool) -> Batch:
    """The batch after tick ``start`` up to ``end``, read from the provider ``src``."""
    ticks = batch_ticks(src, provider, start, end)
    return make_batch(ticks, list(src.batch_events(start, end)), needs_events)


__all__ = [
    "Batch",
    "Outcome",
    "batch_ticks",
    "make_batch",
    "next_end",
    "read_batch",
    "reduce_events",
]
