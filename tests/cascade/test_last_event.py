"""A key's last event is one rule (:func:`baton.cascade.batches.reduce_events`) on both paths that
reduce a batch: the Spark sink, which gets a micro-batch as Arrow rows in the ``baton`` source's
wire format (:func:`baton.spark.rows.decode`), and a table copy's catch-up, which reads queue
events from the provider (:func:`baton.cascade.node_ops.copy_table`). No JVM: the wire format is
built as the source builds it."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from baton.cascade.batches import reduce_events
from baton.cascade.model import ROW_TYPES, WATERMARK, Event, Tick
from baton.spark import rows

TYPES = [*sorted(ROW_TYPES), "app.note", WATERMARK]


@st.composite
def batches(draw: st.DrawFn) -> list[Event]:
    """Events of one micro-batch: row events of a few keys of two tables (so keys repeat),
    and custom and watermark events, with unique ids in any order."""
    n = draw(st.integers(0, 40))
    ids = draw(st.permutations(range(1, n + 1)))
    out = []
    for ev_id in ids:
        type_ = draw(st.sampled_from(TYPES))
        if type_ in ROW_TYPES:
            table: str | None = draw(st.sampled_from(["a", "b"]))
            k = draw(st.integers(0, 3))
            key: str | None = json.dumps({"id": k})
            data = None if type_ == "D" else json.dumps({"id": k, "v": ev_id})
        else:
            table = key = None
            data = json.dumps({"tick": ev_id})
        out.append(Event(ev_id, 1.5, type_, table, key, data, 1000 + ev_id, 7))
    return out


def as_micro_batch(events: list[Event]) -> pa.Table:
    """``events`` as the ``baton`` source hands a micro-batch to a sink."""
    tick = Tick(7, len(events), 2.5, None)
    found = [rows.event_row(e) for e in events] + rows.tick_rows([tick], len(events))
    return pa.Table.from_batches([rows.record_batch(found)])


def last_per_key(events: list[Event]) -> list[Event]:
    """The rule written out: for each (table, key) with a row event, the one with the highest
    id; in id order."""
    keys = {(e.table, e.key) for e in events if e.type in ROW_TYPES}
    last = [
        max((e for e in events if e.type in ROW_TYPES and (e.table, e.key) == k),
            key=lambda e: e.ev_id)
        for k in keys
    ]  # fmt: skip
    return sorted(last, key=lambda e: e.ev_id)


@settings(max_examples=200, deadline=None)
@given(batches())
def test_the_sink_and_the_catch_up_find_the_same_last_events(events: list[Event]) -> None:
    expected = last_per_key(events)
    # The copy's catch-up reduces the provider's events as they come from its queue.
    assert reduce_events(events) == expected
    for carries_queue in (True, False):
        batch = rows.decode(as_micro_batch(events), carries_queue)
        assert batch is not None
        assert batch.reduced == expected
        in_order = sorted(events, key=lambda e: e.ev_id)
        copied = in_order if carries_queue else [e for e in in_order if e.type not in ROW_TYPES]
        assert batch.events == copied
