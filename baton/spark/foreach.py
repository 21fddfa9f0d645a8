"""The apply step as a ``foreachBatch`` function, for your own Spark jobs: :func:`apply_to`.

Each micro-batch (a whole number of queue batches from the ``baton`` source) comes to the
driver as Arrow and is applied by :func:`baton.spark.sink.apply_arrow`, the same step the
``batonapply`` sink runs in a Python worker (which baton's own workers use: no row goes through
the driver there). Spark replays the last micro-batch after a crash; the position stored with
the data makes the replay a no-op.

::

    query = (spark.readStream.format("baton").option("provider", p).option("subscriber", s)
             .load().writeStream.foreachBatch(apply_to(s, epoch)).start())
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from baton.cascade.apply import ApplyResult
from baton.spark.sink import apply_arrow

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("baton.cascade")


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
        started = time.monotonic()
        table = df.toArrow()  # one Spark job per micro-batch (each has a fixed cost)
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


__all__ = ["apply_to"]
