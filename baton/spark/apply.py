"""The apply step: :func:`apply_arrow` applies one micro-batch given as an Arrow table (what the
``batonapply`` sink of :mod:`baton.spark.sink`, used by baton's workers, does in a Spark Python
worker), and :func:`apply_to` is the same step as a ``foreachBatch`` function.

With ``foreachBatch``, for each micro-batch (a whole number of queue batches from the ``baton``
source), Spark reduces the events per (table, key) to the last one (a window function) and the
reduced rows come to the driver as Arrow; :func:`baton.cascade.apply.apply_batch` then applies
them set-wise in one transaction on the subscriber's database, together with the queue copy (on
a branch), the position and the epoch check. Spark replays the last micro-batch after a crash;
the position stored with the data makes the replay a no-op.

Use it in your own jobs::

    query = (spark.readStream.format("baton").option("provider", p).option("subscriber", s)
             .load().writeStream.foreachBatch(apply_to(s, epoch)).start())
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from baton.cascade.apply import ApplyResult, apply_batch
from baton.cascade.model import ROW_TYPES, TICK_ROW, Event, Tick
from baton.cascade.nodedb import CascadeError, open_node_db

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


log = logging.getLogger("baton.cascade")


def _events(table: pa.Table) -> list[Event]:
    """The rows of ``table`` (the source's columns) as events, in ``ev_id`` order."""
    import pyarrow.compute as pc

    table = table.sort_by("ev_id")
    columns = [
        table.column(name).to_pylist()
        for name in ("ev_id", "ev_time", "ev_type", "ev_table", "ev_key", "ev_data")
    ]
    columns.append(pc.fill_null(table.column("ev_txid"), 0).to_pylist())
    columns.append(table.column("ev_tick").to_pylist())
    return list(map(Event._make, zip(*columns, strict=True)))


def apply_arrow(
    table: pa.Table, subscriber: str, epoch: int, provider: str | None, whole: bool = False
) -> ApplyResult | None:
    """Apply one micro-batch given as an Arrow table of the source's columns (plus ``_last``,
    marking each key's last row event, when Spark computed it; otherwise it is computed here).
    ``whole``: the table must hold every event of the micro-batch (a leaf's may hold only the
    marked rows). None when the table holds no tick (an empty micro-batch)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    with open_node_db(subscriber) as db:
        carries = db.state().role.carries_queue
    is_tick = pc.equal(table.column("ev_type"), TICK_ROW)
    tick_table = table.filter(is_tick)
    if tick_table.num_rows == 0:
        return None
    datas = [json.loads(d) for d in tick_table.column("ev_data").to_pylist()]
    ticks = sorted(
        (
            Tick(tick_id, **_tick_fields(d))
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
    rows = pc.is_in(rest.column("ev_type"), value_set=pa.array(sorted(ROW_TYPES)))
    if "_last" in rest.column_names:
        last = pc.fill_null(rest.column("_last"), False)
    else:
        # Each key's last row event: the highest id per (table, key), a hash aggregation.
        row_events = rest.filter(rows)
        top = row_events.group_by(["ev_table", "ev_key"]).aggregate([("ev_id", "max")])
        last = pc.and_(rows, pc.is_in(rest.column("ev_id"), value_set=top.column("ev_id_max")))
    reduced = _events(rest.filter(last))
    events = _events(rest if carries else rest.filter(pc.invert(rows)))
    with open_node_db(subscriber) as db:
        return apply_batch(db, ticks, reduced, events, epoch, provider=provider)


def apply_to(
    subscriber: str,
    epoch: int,
    on_applied: Callable[[ApplyResult], None] | None = None,
    provider: str | None = None,
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function applying micro-batches to the node at ``subscriber`` with
    worker ``epoch``; ``on_applied`` is called after each committed (or skipped) batch;
    ``provider`` (the node read from) must still be the subscriber's provider at commit."""

    def apply_micro_batch(df: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        started = time.monotonic()
        with open_node_db(subscriber) as db:
            carries = db.state().role.carries_queue
        # One Spark job per micro-batch (each job has a fixed cost of 0.1-0.2 s): the reduction
        # per key marks the row events that are their key's last in the batch, and the driver
        # gets the ticks, the marked rows and, for a branch (which copies the queue), every
        # event, as one Arrow table.
        row_event = F.col("ev_type").isin(*sorted(ROW_TYPES))
        last_first = Window.partitionBy("ev_table", "ev_key").orderBy(F.col("ev_id").desc())
        marked = df.withColumn("_last", row_event & (F.row_number().over(last_first) == 1))
        if not carries:
            # A leaf needs only the reduced rows, the ticks and the non-row events (watermark).
            marked = marked.where(F.col("_last") | ~row_event)
        table = marked.toArrow()
        collected = time.monotonic()
        result = apply_arrow(table, subscriber, epoch, provider)
        if result is None:
            return
        log.debug(
            "micro-batch",
            extra={
                "node": subscriber,
                "events": result.events,
                "spark_s": round(collected - started, 3),
                "apply_s": round(time.monotonic() - collected, 3),
            },
        )
        if on_applied is not None:
            on_applied(result)

    return apply_micro_batch


def _tick_fields(d: dict[str, Any]) -> dict[str, Any]:
    return {"ev_high": int(d["ev_high"]), "time": float(d["time"]), "snapshot": d.get("snapshot")}
