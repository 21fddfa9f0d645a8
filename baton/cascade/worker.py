"""A cascade worker: the Spark Structured Streaming query that keeps one subscriber node (branch
or leaf) applied from its provider, and reports its watermark upwards.

The query reads ``format("baton")`` from the provider with the subscriber's stored position as
its start and applies with :func:`baton.spark.apply.apply_to`. Its checkpoint is scratch (a
fresh directory per start): where to resume is the position in the subscriber's database, so a
worker started on another host continues exactly where the data says. When the node's provider
changes (``change-provider``, failover), the worker restarts its query on the new provider.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from baton.cascade.apply import ApplyResult
from baton.cascade.nodedb import CascadeError, FencedOut, open_node_db
from baton.spark.apply import apply_to

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("baton.cascade")


def db_tables(location: str) -> dict[str, str]:
    with open_node_db(location) as db:
        return db.tables()


class Worker:
    """Runs the apply query of the node at ``location`` with fencing ``epoch``."""

    def __init__(
        self,
        spark: SparkSession,
        location: str,
        epoch: int,
        trigger: str = "0 seconds",
        max_ticks: int = 1000,
    ) -> None:
        self.spark = spark
        self.location = location
        self.epoch = epoch
        self.trigger = trigger
        self.max_ticks = max_ticks
        self.query: StreamingQuery | None = None
        self.provider: str | None = None
        self.applied = 0
        self.last_result: ApplyResult | None = None
        self.error: BaseException | None = None
        self.failures = 0
        self._failed_at = -1
        self._lock = threading.Lock()
        #: Held while a micro-batch is applied; ``stop`` waits for it, because interrupting
        #: Spark inside a foreachBatch call makes it fail noisily (and the batch is redone).
        self._busy = threading.Lock()
        self._stopping = threading.Event()
        self._scratch = Path(tempfile.mkdtemp(prefix="baton-worker-"))
        self._checkpoint: Path | None = None
        # Scratch only (the position lives in the node database): removed with the worker, or
        # at interpreter exit at the latest.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)

    def _provider_location(self) -> tuple[str, str]:
        with open_node_db(self.location) as db:
            st = db.state()
            nodes = db.nodes()
        if st.provider is None:
            raise CascadeError(f"{st.name} is a {st.role}: it has no provider to follow")
        if st.provider not in nodes:
            raise CascadeError(f"{st.name}: provider {st.provider} is not in the node list")
        return st.provider, nodes[st.provider][0]

    def start(self) -> None:
        provider, location = self._provider_location()
        self.provider = provider
        checkpoint = self._scratch / f"checkpoint-{time.monotonic_ns()}"
        self._checkpoint = checkpoint
        reader = (
            self.spark.readStream.format("baton")
            .option("provider", location)
            .option("subscriber", self.location)
            .option("maxTicks", str(self.max_ticks))
            .load()
        )
        self.query = (
            reader.writeStream.foreachBatch(
                self._gated(apply_to(self.location, self.epoch, self._applied, provider))
            )
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=self.trigger)
            .queryName(f"baton-worker-{time.monotonic_ns()}")
            .start()
        )
        log.info("worker started", extra={"location": self.location, "provider": provider})

    def _gated(self, fn: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
        def run(df: DataFrame, batch_id: int) -> None:
            if self._stopping.is_set():
                return  # nothing applied: the next start resumes from the stored position
            with self._busy:
                fn(df, batch_id)

        return run

    def _applied(self, result: ApplyResult) -> None:
        if result.detail in ("paused", "provider changed"):
            self._stopping.set()  # skip what Spark planned past the position; check() restarts
        with self._lock:
            self.applied += int(result.applied)
            self.last_result = result
        self.report_watermark()

    def report_watermark(self) -> None:
        """Tell the provider the lowest tick this node and its subscribers have applied."""
        with open_node_db(self.location) as db:
            st = db.state()
            marks = db.watermarks()
        if st.provider is None:
            return  # promoted meanwhile: a root reports to no one
        mark = min([st.position, *marks.values()])
        _, location = self._provider_location()
        with open_node_db(location) as prov, prov.transaction() as cur:
            prov.set_watermark(cur, st.name, mark)

    def check(self) -> None:
        """Keep the query in line with the node: stopped while paused, restarted after a
        failure or a provider change. Raises :class:`FencedOut` when a newer worker took over,
        and :class:`CascadeError` after repeated failures without progress."""
        with open_node_db(self.location) as db:
            st = db.state()
        if st.paused or st.provider is None:
            self.stop()  # paused, or promoted to root: nothing to apply
            return
        copying = [t for t, state in db_tables(self.location).items() if state == "copying"]
        if copying:
            # The initial copy of a new table, by Spark, between micro-batches (the query is
            # stopped so the copy and the batches never interleave).
            from baton.cascade.ops import copy_table
            from baton.spark.copy import spark_rows

            self.stop()
            for table in copying:
                state = copy_table(self.location, table, spark_rows(self.spark))
                log.info("table copied", extra={"table": table, "state": state})
        if self.query is None:
            self.start()
            return
        if not self.query.isActive:
            exc = self.query.exception()
            message = str(exc) if exc is not None else "stopped"
            self.query = None
            if "is stale" in message:
                raise FencedOut(f"worker for {st.name} at epoch {self.epoch}: {message}")
            self.failures = self.failures + 1 if st.position == self._failed_at else 1
            self._failed_at = st.position
            if self.failures > 3:
                self.error = exc
                raise CascadeError(f"worker for {st.name} keeps failing: {message}")
            log.warning("worker query failed; restarting", extra={"error": message[:300]})
            self.start()
            return
        provider, _ = self._provider_location()
        if provider != self.provider or self._stopping.is_set():
            # A provider change, or batches skipped past the position while paused: read again
            # from the position stored in the node.
            log.info("worker restarts", extra={"provider": provider, "was": self.provider})
            self.stop()
            self.start()

    def stop(self) -> None:
        if self.query is not None:
            self._stopping.set()
            with self._busy:  # let a batch being applied finish
                self.query.stop()
            self.query = None
            self._stopping.clear()
        if self._checkpoint is not None:
            shutil.rmtree(self._checkpoint, ignore_errors=True)  # the next start makes its own
            self._checkpoint = None

    def close(self) -> None:
        """Stop, and remove the scratch directory."""
        self.stop()
        self._cleanup()
