"""The micro-batch wire format of the ``baton`` source, in one place: its schema, how the source
encodes queue events and ticks as Arrow rows, and how the apply step decodes them.

A micro-batch is a whole number of queue batches: the events of the ticks after its start up to
its end, in event-id order, then one row per tick (type :data:`TICK_ROW`, data ``{"ev_high",
"time", "snapshot", "events"}``, ``events`` being the micro-batch's number of events) so that a
sink knows every tick the micro-batch covers, even a tick with no events, and can check that it
holds every event.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from baton.cascade.batches import Batch, make_batch
from baton.cascade.model import Event, Tick
from baton.errors import CascadeError

if TYPE_CHECKING:
    import pyarrow as pa

#: Marks the row of each tick a micro-batch covers (a sink's view of batch boundaries).
TICK_ROW = "baton.tick"

NAMES = ("ev_id", "ev_tick", "ev_txid", "ev_time", "ev_type", "ev_table", "ev_key", "ev_data")
_TYPES = ("int64", "int64", "int64", "float64", "string", "string", "string", "string")
#: The source's Spark schema (key and data are JSON objects as text).
SCHEMA = (
    "ev_id long, ev_tick long, ev_txid long, ev_time double, ev_type string, "
    "ev_table string, ev_key string, ev_data string"
)
#: Rows per Arrow record batch handed to Spark.
ARROW_ROWS = 20_000


def event_row(e: Event) -> tuple[Any, ...]:
    """One queue event as a source row."""
    return (e.ev_id, e.tick, e.txid, e.time, e.type, e.table, e.key, e.data)


def tick_rows(ticks: list[Tick], events: int) -> list[tuple[Any, ...]]:
    """The rows closing a micro-batch of ``events`` events: one per tick it covers."""
    return [
        (0, t.tick_id, 0, t.time, TICK_ROW, None, None,
         json.dumps({"ev_high": t.ev_high, "time": t.time, "snapshot": t.snapshot,
                     "events": events}))
        for t in ticks
    ]  # fmt: skip


def record_batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """Source rows as an Arrow record batch (several times cheaper to hand to the JVM than
    tuples)."""
    import pyarrow as pa

    columns = list(zip(*rows, strict=True))
    arrays = [pa.array(col, type=typ) for col, typ in zip(columns, _TYPES, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=list(NAMES))


def _events(table: pa.Table) -> list[Event]:
    """The rows of ``table`` as events, in ``ev_id`` order."""
    import pyarrow.compute as pc

    table = table.sort_by("ev_id")
    columns = [
        table.column(name).to_pylist()
        for name in ("ev_id", "ev_time", "ev_type", "ev_table", "ev_key", "ev_data")
    ]
    columns.append(pc.fill_null(table.column("ev_txid"), 0).to_pylist())
    columns.append(table.column("ev_tick").to_pylist())
    return list(map(Event._make, zip(*columns, strict=True)))


def decode(table: pa.Table, needs_events: bool, whole: bool = True) -> Batch | None:
    """Decode a micro-batch given as an Arrow table of the source's columns; None when it
    holds no tick (an empty micro-batch). ``whole``: refuse a table that lacks some of the
    micro-batch's events (a repartitioned read), since applying part of one would skip the
    rest for good. Each key's last event is found by the cascade's one rule,
    :func:`baton.cascade.apply.reduce_events` (the copy's catch-up uses it too)."""
    import pyarrow.compute as pc

    is_tick = pc.equal(table.column("ev_type"), TICK_ROW)
    tick_table = table.filter(is_tick)
    if tick_table.num_rows == 0:
        return None
    datas = [json.loads(d) for d in tick_table.column("ev_data").to_pylist()]
    ticks = sorted(
        (
            Tick(tick_id, int(d["ev_high"]), float(d["time"]), d.get("snapshot"))
            for tick_id, d in zip(tick_table.column("ev_tick").to_pylist(), datas, strict=True)
        ),
        key=lambda t: t.tick_id,
    )
    rest = table.filter(pc.invert(is_tick))
    if whole and "events" in datas[0] and rest.num_rows != int(datas[0]["events"]):
        raise CascadeError(
            f"micro-batch ending at tick {ticks[-1].tick_id} came in parts ({rest.num_rows} of "
            f"{datas[0]['events']} events): read it without repartitioning; nothing applied"
        )
    return make_batch(ticks, _events(rest), needs_events)


__all__ = [
    "ARROW_ROWS",
    "NAMES",
    "SCHEMA",
    "TICK_ROW",
    "decode",
    "event_row",
    "record_batch",
    "tick_rows",
]
