"""The apply step of a cascade worker, as a Structured Streaming ``foreachBatch`` function.

For each micro-batch (a whole number of queue batches from the ``baton`` source), Spark reduces
the events per (table, key) to the last one (a window function over the micro-batch) and the
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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from baton.cascade.apply import ApplyResult, apply_batch
from baton.cascade.model import ROW_TYPES, TICK_ROW, Event, Tick
from baton.cascade.nodedb import open_node_db

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _event(row: dict[str, Any]) -> Event:
    return Event(
        ev_id=row["ev_id"],
        time=row["ev_time"],
        type=row["ev_type"],
        table=row["ev_table"],
        key=row["ev_key"],
        data=row["ev_data"],
        txid=row["ev_txid"] or 0,
        tick=row["ev_tick"],
    )


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

        df = df.persist()
        try:
            tick_rows = df.where(F.col("ev_type") == TICK_ROW).select("ev_tick", "ev_data")
            ticks = sorted(
                (
                    Tick(r["ev_tick"], **_tick_fields(r["ev_data"]))
                    for r in tick_rows.toArrow().to_pylist()
                ),
                key=lambda t: t.tick_id,
            )
            if not ticks:
                return
            last_first = Window.partitionBy("ev_table", "ev_key").orderBy(F.col("ev_id").desc())
            reduced = (
                df.where(F.col("ev_type").isin(*sorted(ROW_TYPES)))
                .withColumn("_n", F.row_number().over(last_first))
                .where(F.col("_n") == 1)
                .drop("_n")
            )
            reduced_events = [_event(r) for r in reduced.toArrow().to_pylist()]
            with open_node_db(subscriber) as db:
                carries = db.state().role.carries_queue
            # A branch copies every event; a leaf needs only the non-row ones (the watermark).
            rest = df.where(F.col("ev_type") != TICK_ROW)
            if not carries:
                rest = rest.where(~F.col("ev_type").isin(*sorted(ROW_TYPES)))
            events = [_event(r) for r in rest.toArrow().to_pylist()]
            events.sort(key=lambda e: e.ev_id)
            with open_node_db(subscriber) as db:
                result = apply_batch(db, ticks, reduced_events, events, epoch, provider=provider)
            if on_applied is not None:
                on_applied(result)
        finally:
            df.unpersist()

    return apply_micro_batch


def _tick_fields(data: str) -> dict[str, Any]:
    d = json.loads(data)
    return {"ev_high": int(d["ev_high"]), "time": float(d["time"]), "snapshot": d.get("snapshot")}
