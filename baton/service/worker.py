"""A cascade worker: the Spark Structured Streaming query that keeps one subscriber node (branch
or leaf) applied from its provider, and reports its watermark upwards.

The query reads ``format("baton")`` from the provider with the subscriber's stored position as
its start and writes to the ``batonapply`` sink (:mod:`baton.spark.sink`), which applies each
micro-batch in one fenced transaction; at every :meth:`Worker.check` the worker also pulls its
own subscribers' watermarks (:mod:`baton.cascade.watermark`). Its checkpoint is scratch (a
fresh directory per start): where to resume is the position in the subscriber's database, so a
worker started on another host continues exactly where the data says. When the node's provider
changes (``change-provider``, failover), the worker restarts its query on the new provider.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from baton.cascade.apply import claim_epoch
from baton.cascade.batches import Outcome
from baton.cascade.copy_progress import CopyProgress
from baton.cascade.db import open_node_db
from baton.cascade.node_ops import copy_ready, copy_table
from baton.cascade.watermark import PULL_INTERVAL, Every, pull_watermarks
from baton.errors import CascadeError, CascadeInputError, FencedOut, NoTaskSlot
from baton.service.mode import MODES, Mode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from baton.service.task import TaskQuery

log = logging.getLogger("baton.cascade")

MICRO_BATCH = Mode.MICRO_BATCH
LOW_LATENCY = Mode.LOW_LATENCY
AUTO = Mode.AUTO
#: Sessions (by id) that have run a worker's first micro-batch; see :meth:`Worker.start`.
_WARM: set[int] = set()
_FIRST_START = threading.Lock()
#: How long the first start in a session waits for its first micro-batch before letting others
#: start.
FIRST_BATCH_WAIT = 60.0
#: How long ``stop`` lets a running micro-batch finish.
STOP_GRACE = 5.0
#: How often an ``auto`` worker that fell back to micro-batches looks for a task slot that
#: has come free since (another worker stopped, say), to move to a low-latency task.
TASK_RETRY = 10.0
#: Seconds after a worker's start at which an application the cluster gave no executor is
#: said to be waiting for one (it applies nothing until it has one).
STARVED_AFTER = 10.0


def db_tables(location: str) -> dict[str, str]:
    with open_node_db(location) as db:
        return db.tables()


#: Every worker query is named ``baton-worker/<set>/<node>/e<epoch>/<start>``: whoever serves
#: the node next finds the queries a dead predecessor left running on a Spark Connect server
#: (which outlives its clients) and stops those of older epochs before starting its own. The
#: start time keeps names unique within a session (Spark refuses two active queries of one name).
QUERY_PREFIX = "baton-worker/"
_QUERY_NAME = re.compile(r"baton-worker/(?P<set>[^/]+)/(?P<node>[^/]+)/e(?P<epoch>\d+)(/[^/]*)?")


def query_name(set_name: str, node: str, epoch: int) -> str:
    return f"{QUERY_PREFIX}{set_name}/{node}/e{epoch}/{time.time_ns()}"


def query_owner(name: str | None) -> tuple[str, str, int] | None:
    """(set, node, epoch) of a worker query's name; None for any other query."""
    found = _QUERY_NAME.fullmatch(name or "")
    if found is None:
        return None
    return found["set"], found["node"], int(found["epoch"])


def _first_line(exc: BaseException) -> str:
    """The message of a failed query without the JVM and Python stack traces Spark appends."""
    text = str(getattr(exc, "desc", None) or exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


class Worker:
    """Runs the apply query of the node at ``location`` with fencing ``epoch``."""

    def __init__(
        self,
        spark: SparkSession,
        location: str,
        epoch: int,
        *,
        trigger: str = "0 seconds",
        max_ticks: int = 1000,
        mode: str = Mode.MICRO_BATCH,
        halt: threading.Event | None = None,
    ) -> None:
        """``halt``: set by the worker's owner when it stops it (a lost leadership); a start
        waiting for its session's first micro-batch then gives up the wait, so the stop is
        not held back by it."""
        if mode not in MODES:
            raise CascadeInputError(f"bad worker mode {mode!r}: use one of {', '.join(MODES)}")
        mode = Mode(mode)
        self.mode = mode
        self.spark = spark
        self.location = location
        self.epoch = epoch
        self.trigger = trigger
        self.max_ticks = max_ticks
        self._halt = halt or threading.Event()
        self.query: StreamingQuery | TaskQuery | None = None
        self.provider: str | None = None
        self.error: BaseException | None = None
        self.failures = 0
        self._failed_at = -1
        self._waiting: list[str] = []
        self._pull = Every(PULL_INTERVAL)
        self._name = ""
        self._scratch = Path(tempfile.mkdtemp(prefix="baton-worker-"))
        self._checkpoint: Path | None = None
        # Scratch only (the position lives in the node database): removed with the worker, or
        # at interpreter exit at the latest.
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)
        self._created = time.monotonic()
        self._executors_looked_at = False
        #: This worker's epoch is the node's (:func:`claim_epoch`, on its first check).
        self._claimed = False
        #: An ``auto`` worker said it found no slot to spare (said once, not at every start).
        self._said_no_slot = False
        #: An ``auto`` worker in micro-batches looks for a free task slot this often.
        self.task_retry = Every(TASK_RETRY)
        #: The cluster had given the application no executor :data:`STARVED_AFTER` seconds
        #: after the start (it can apply nothing until it has one).
        self.starved = False

    def _provider_location(self) -> tuple[str, str]:
        with open_node_db(self.location) as db:
            st = db.state()
            nodes = db.nodes()
        if st.provider is None:
            raise CascadeError(f"{st.name} is a {st.role}: it has no provider to follow")
        if st.provider not in nodes:
            raise CascadeError(f"{st.name}: provider {st.provider} is not in the node list")
        self._name = query_name(st.set_name, st.name, self.epoch)
        return st.provider, nodes[st.provider][0]

    def _stop_predecessors(self) -> None:
        """Over Spark Connect, stop the session's queries of older workers of this node (the
        server keeps running the queries of a client that died; its session is found again by
        name, see ``build_session(connect_session=...)``). A newer worker's query means this
        one is stale: :class:`FencedOut`. A classic session's queries die with its process,
        so there the epoch fence alone decides (tests run stale workers beside new ones)."""
        from baton.spark.session import is_connect

        if not is_connect(self.spark):
            return
        mine = query_owner(self._name)
        assert mine is not None
        for query in self.spark.streams.active:
            owner = query_owner(query.name)
            if owner is None or owner[:2] != mine[:2]:
                continue
            if owner[2] > self.epoch:
                raise FencedOut(
                    f"worker for {mine[1]} at epoch {self.epoch} is stale: the query of epoch "
                    f"{owner[2]} runs"
                )
            log.info(
                "stopping the query of an older worker",
                extra={"query": query.name, "epoch": self.epoch},
            )
            with contextlib.suppress(Exception):  # it may end by itself meanwhile
                query.stop()

    def start(self) -> None:
        from baton.spark.session import activate

        with open_node_db(self.location) as db:
            claim_epoch(db, self.epoch)  # before reading: an older worker is fenced from here
        provider, location = self._provider_location()
        self.provider = provider
        activate(self.spark)
        if self.mode in (LOW_LATENCY, AUTO):
            from baton.service.task import Follow, TaskQuery

            spec = Follow(self.location, provider, location, self.epoch, self.max_ticks)
            try:
                self.query = TaskQuery(self.spark, spec, spare=1 if self.mode is AUTO else 0)
            except NoTaskSlot as exc:
                if self.mode is LOW_LATENCY:
                    raise  # asked for: the service says so and tries again
                if not self._said_no_slot:  # auto: micro-batches rather than nothing
                    log.warning(
                        "worker applies in micro-batches: no Spark task slot to spare for a "
                        "low-latency task (one is kept for copies and micro-batches); give "
                        "Spark more slots for low latency",
                        extra={"location": self.location, "error": str(exc)},
                    )
                    self._said_no_slot = True
            else:
                log.info(
                    "worker started",
                    extra={
                        "location": self.location,
                        "provider": provider,
                        "mode": LOW_LATENCY.value,
                    },
                )
                return
        self._stop_predecessors()
        checkpoint = self._scratch / f"checkpoint-{time.monotonic_ns()}"
        self._checkpoint = checkpoint
        reader = (
            self.spark.readStream.format("baton")
            .option("provider", location)
            .option("subscriber", self.location)
            .option("maxTicks", str(self.max_ticks))
            .load()
        )
        with _FIRST_START:
            self.query = self._start_query(reader, provider, checkpoint)
            if id(self.spark) not in _WARM:
                # The first Python data source tasks in a JVM, started by two queries at the
                # same time, failed to deserialise (java.io.OptionalDataException, Spark 4.3.0,
                # seen when two workers of one process started together): let the first query
                # of a session run a micro-batch before any other starts.
                deadline = time.monotonic() + FIRST_BATCH_WAIT
                while (
                    self.query.isActive
                    and self.query.lastProgress is None
                    and time.monotonic() < deadline
                ):
                    self._look_at_executors()
                    if self.starved or self._halt.wait(0.05):
                        break
                if not self._halt.is_set() and not self.starved:
                    # Halted or starved: no first micro-batch ran, the next start waits instead.
                    _WARM.add(id(self.spark))
        log.info("worker started", extra={"location": self.location, "provider": provider})

    def _start_query(self, reader: DataFrame, provider: str, checkpoint: Path) -> StreamingQuery:
        return (
            reader.writeStream.format("batonapply")
            .option("subscriber", self.location)
            .option("epoch", str(self.epoch))
            .option("provider", provider)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=self.trigger)
            .queryName(self._name)
            .start()
        )

    def _look_at_executors(self) -> None:
        """Once, :data:`STARVED_AFTER` seconds after the start: a cluster application with no
        executor applies nothing, and Spark says why only in its own log. A driver that is
        frozen (SIGSTOP, a hung host) keeps its executors, since its master still sees it
        connected, so a standby that took over may wait here until the old driver is killed."""
        if self._executors_looked_at or time.monotonic() - self._created < STARVED_AFTER:
            return
        from baton.spark.session import executors

        self._executors_looked_at = True
        if executors(self.spark) == 0:
            self.starved = True
            log.warning(
                "spark application has no executor: the cluster has no free cores or memory "
                "for it (a frozen driver keeps its executors until it is killed); give the "
                "workers room for every server's and standby's application",
                extra={"location": self.location, "master": self.spark.sparkContext.master},
            )

    def pull_watermarks(self) -> None:
        """Read how far this node's own subscribers have applied (a branch keeps its queue
        down to there); at most every :data:`PULL_INTERVAL` seconds."""
        if self._pull.due():
            with open_node_db(self.location) as db:
                pull_watermarks(db)

    def check(self) -> None:
        """Keep the query in line with the node: stopped while paused, restarted after a
        failure or a provider change. Raises :class:`FencedOut` when a newer worker took over,
        and :class:`CascadeError` after repeated failures without progress."""
        with open_node_db(self.location) as db:
            st = db.state()
            # A combined-failover's merge-leaf only tracks (its position moves with the
            # combined set) until its host becomes the combined root, and a combined root's
            # stops merging once a switchover is under way: the sink would refuse every batch.
            tracking = db.only_tracks(st)
            if not self._claimed and st.epoch <= self.epoch:
                # Claimed before any Spark job of this worker (a table copy comes first): an
                # older worker's task still running for this node, say a killed client's on a
                # Spark Connect server, holds a task slot until its next look sees this epoch.
                claim_epoch(db, self.epoch)
                self._claimed = True
        if st.epoch > self.epoch:
            # A newer worker applied here: this one's batches are all refused from now on.
            self.stop()
            raise FencedOut(
                f"worker for {st.name} at epoch {self.epoch} is stale: epoch {st.epoch} applied"
            )
        if st.paused or st.provider is None or tracking:
            self.stop()  # paused, promoted to root, or tracking: nothing to apply
            return
        copying = [t for t, state in db_tables(self.location).items() if state == "copying"]
        ready = [t for t in copying if copy_ready(self.location, t)]
        if ready:
            # The initial copy of a new table, by Spark, between micro-batches (the query is
            # stopped so the copy and the batches never interleave). A table whose provider
            # has not copied it whole yet waits (events for it are not applied meanwhile).
            from baton.spark.copy import spark_rows

            self.stop()
            for table in ready:
                progress = CopyProgress(self.location, table, self.epoch)
                try:
                    reader = spark_rows(self.spark, progress=progress)
                    state = copy_table(self.location, table, reader, epoch=self.epoch)
                finally:
                    progress.clear()
                log.info("table copied", extra={"table": table, "state": state})
        elif copying and copying != self._waiting:
            log.info(
                "waiting for the provider to copy its tables first",
                extra={"tables": ",".join(copying), "provider": st.provider},
            )
        self._waiting = copying
        self._look_at_executors()
        if self.query is None:
            self.start()
            return
        if st.provider != self.provider:
            # change-provider or failover: read again from the position stored in the node (a
            # micro-batch read from the old provider is refused by the sink meanwhile).
            log.info("worker restarts", extra={"provider": st.provider, "was": self.provider})
            self.stop()
            self.start()
            return
        if not self.query.isActive:
            ended = getattr(self.query, "outcome", None)  # a low-latency task's reason
            if isinstance(ended, Outcome) and ended.ends_following:
                # The task ended on a state baton expects (a pause, say by compare, that is
                # over by now, or a provider change): the checks above saw the node's state
                # now, so follow again. Neither a failure nor news.
                log.debug("worker restarts", extra={"after": ended.value})
                self.query = None
                self.start()
                return
            # Refusals baton expects (paused, provider changed, fenced) do not fail a
            # micro-batch query: the sink applies nothing and the checks above act on the
            # node's state. So a query that stopped on its own met something unexpected.
            exc = self.query.exception()
            message = _first_line(exc) if exc is not None else "stopped"
            self.query = None
            self.failures = self.failures + 1 if st.position == self._failed_at else 1
            self._failed_at = st.position
            if self.failures > 3:
                self.error = exc
                raise CascadeError(f"worker for {st.name} keeps failing: {message}")
            log.warning(
                "worker query failed; restarting (Spark's trace is in its log)",
                extra={"error": message},
            )
            self.start()
            return
        if self._slot_came_free():
            log.info(
                "worker moves to a low-latency task: a Spark task slot is free now",
                extra={"location": self.location, "provider": self.provider},
            )
            self.stop()  # the running micro-batch finishes first; the task resumes after it
            self.start()
            return
        self.pull_watermarks()

    def _slot_came_free(self) -> bool:
        """An ``auto`` worker applying in micro-batches, at most once per ``task_retry``'s
        interval: whether a low-latency task would now leave a slot to spare."""
        from baton.service.task import TaskQuery, has_spare_slot

        if self.mode is not AUTO or self.query is None or isinstance(self.query, TaskQuery):
            return False
        return self.task_retry.due() and has_spare_slot(self.spark, spare=1)

    def stop(self) -> None:
        if self.query is not None:
            # Let a micro-batch being applied finish (briefly): one interrupted rolls back and
            # is read again at the next start, which is safe but wasted, and Spark logs the
            # cancelled task as errors. A trigger that found no data has nothing to finish (an
            # idle query with a 0 s trigger is nearly always in one: waiting for it to end held
            # every stop for the whole grace).
            deadline = time.monotonic() + STOP_GRACE
            with contextlib.suppress(Exception):  # a query that failed has no status to give
                while time.monotonic() < deadline:
                    status = self.query.status
                    if not (status["isTriggerActive"] and status["isDataAvailable"]):
                        break
                    time.sleep(0.02)
            query, self.query = self.query, None
            try:
                query.stop()
            except Exception as exc:  # the driver's JVM or Connect server is gone
                # A stop that cannot reach Spark has nothing left to stop here (a dead JVM took
                # its queries with it; a Connect server's orphans are stopped by epoch by the
                # next worker). One line, and the caller goes on to restart or hand over.
                log.warning(
                    "the worker's query could not be stopped: Spark is unreachable",
                    extra={"location": self.location, "error": _first_line(exc)},
                )
        if self._checkpoint is not None:
            shutil.rmtree(self._checkpoint, ignore_errors=True)  # the next start makes its own
            self._checkpoint = None

    def close(self) -> None:
        """Stop, and remove the scratch directory."""
        self.stop()
        self._cleanup()
