"""``spark.readStream.format("baton")``: a node's queue as a Spark stream (Python data source).

Each micro-batch is a whole number of queue batches: offsets are tick ids (``{"tick": N}``) and
a micro-batch reads the events of the ticks after its start up to its end, in event-id order,
plus one row per tick (the wire format is :mod:`baton.spark.rows`).

Options:

``provider``      location of the node database to read (required), e.g. ``sqlite:///data/s1.db``
``subscriber``    location of the consuming node's database: the stream starts at the position
                  stored there (so a worker on a new host resumes from the data, not from a
                  checkpoint left elsewhere)
``startingTick``  without ``subscriber``: ``latest`` (default), ``earliest`` or a tick id
``maxTicks``      at most this many ticks per micro-batch (default 1000)
``maxEvents``     a micro-batch ends at the first tick that takes it to about this many events
                  (default 50000; at least one tick). Smaller micro-batches let the nodes of a
                  cascade work at the same time (a leaf applies batch k while its branch
                  applies k + 1) and bound the memory of one

Columns: ``ev_id long, ev_tick long, ev_txid long, ev_time double, ev_type string,
ev_table string, ev_key string, ev_data string`` (key and data are JSON objects as text).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from baton.cascade.batches import batch_ticks, next_end
from baton.errors import CascadeError
from baton.spark.rows import ARROW_ROWS, SCHEMA, event_row, record_batch, tick_rows

log = logging.getLogger("baton.spark")


class TickRange(InputPartition):
    """The ticks after ``start`` up to ``end`` of the provider."""

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end


class BatonSource(DataSource):
    """The ``baton`` data source (streaming read)."""

    @classmethod
    def name(cls) -> str:
        return "baton"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return BatonStreamReader(dict(self.options))


def _option(options: dict[str, str], key: str) -> str | None:
    # Spark lower-cases option names on some paths: accept both spellings.
    return options.get(key, options.get(key.lower()))


class BatonStreamReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        provider = _option(options, "provider")
        if not provider:
            raise CascadeError("the baton source needs option provider=<node location>")
        self.provider = provider
        self.subscriber = _option(options, "subscriber")
        self.starting = _option(options, "startingTick") or "latest"
        self.max_ticks = int(_option(options, "maxTicks") or 1000)
        self.max_events = int(_option(options, "maxEvents") or 50_000)

    def _db(self, location: str) -> Any:
        from baton.cascade.db import open_node_db

        # The provider is another node: read it without ever taking its write lock.
        return open_node_db(location, readonly=location == self.provider, existing=True)

    def initialOffset(self) -> dict[str, int]:
        if self.subscriber:
            with self._db(self.subscriber) as db:
                return {"tick": db.state().position}
        with self._db(self.provider) as db:
            last = db.last_tick()
            if self.starting == "latest":
                return {"tick": last.tick_id if last else 0}
            if self.starting == "earliest":
                first = db.ticks(0, last.tick_id if last else 0)
                return {"tick": first[0].tick_id if first else 0}
            return {"tick": int(self.starting)}

    def latestOffset(self, start: dict[str, int], limit: Any = None) -> dict[str, int]:
        with self._db(self.provider) as db:
            return {"tick": next_end(db, int(start["tick"]), self.max_ticks, self.max_events)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [TickRange(int(start["tick"]), int(end["tick"]))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TickRange)
        if partition.end <= partition.start:
            return  # Spark may plan an empty first micro-batch
        with self._db(self.provider) as db:
            try:
                ticks = batch_ticks(db, self.provider, partition.start, partition.end)
            except CascadeError:
                if self._applied(partition):
                    return  # an empty micro-batch: the sink applies nothing
                raise
            rows: list[tuple[Any, ...]] = []
            count = 0
            for e in db.batch_events(partition.start, partition.end):
                rows.append(event_row(e))
                if len(rows) >= ARROW_ROWS:
                    count += len(rows)
                    yield record_batch(rows)
                    rows = []
            count += len(rows)
            # The tick rows come last and carry the micro-batch's event count, so that a sink
            # can tell it holds the whole micro-batch.
            yield record_batch(rows + tick_rows(ticks, count))

    def _applied(self, partition: TickRange) -> bool:
        """Whether the subscriber applied this micro-batch already: Spark replays the last
        micro-batch after a failure (a worker killed, say), and by then the provider may have
        trimmed its ticks, since every node had them. Checked only when the ticks are missing,
        so the usual read opens no second database."""
        if not self.subscriber:
            return False
        with self._db(self.subscriber) as db:
            position = db.state().position
        if position < partition.end:
            return False
        log.warning(
            "micro-batch replay skipped: applied here already, and trimmed at the provider",
            extra={"ticks": f"{partition.start + 1}..{partition.end}", "position": position},
        )
        return True

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the consumer's position lives in its own database."""
