"""The low-latency apply mode: one long-running Spark task per worker that applies batch after
batch as the provider ticks them.

A Structured Streaming micro-batch pays a fixed cost at every trigger (offset log, planning,
commit log, task launch): about 250 ms on a 2-core machine, measured by ``python -m bench.hops``,
and a hop's lag is about two of them. Spark's real-time mode, which removes that cost, refuses a
Python data source (Spark 4.3: ``STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED``). So this
mode runs the apply loop inside one Spark task that never ends on its own: Spark places and
runs it (on an executor of whatever cluster the session has) and the driver cancels it to stop;
each batch costs only its reads and its one fenced transaction.

What it applies and how is exactly what the ``baton`` source and ``batonapply`` sink do (the
same tick ranges, :func:`baton.cascade.apply.apply_batch` with the worker's epoch and provider),
so the guarantees are the same: the position and the data commit together, a stale epoch is
refused, and a task killed at any point loses nothing (its transaction rolls back and the next
one starts from the stored position).

:class:`TaskQuery` gives the worker the few parts of a ``StreamingQuery`` it watches, so the
worker's logic (pause, provider change, fencing, restarts) is the same in both modes. It needs
one task slot per worker for as long as the worker runs. A classic session runs the task as an
RDD's one partition; Spark Connect has no RDDs, so there it is a one-row DataFrame's
``mapInArrow`` (the same :func:`follow`), run by the server's executors.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from baton.cascade.batches import Outcome
from baton.collector import collector_paused
from baton.errors import CascadeError, FencedOut, NoTaskSlot

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from baton.cascade.db import NodeDB

log = logging.getLogger("baton.cascade")

#: Seconds between two looks at the provider while nothing new is ticked (a read of one row on
#: a connection kept open).
POLL = 0.005
_GROUPS = itertools.count(1)
#: The longest :meth:`TaskQuery.stop` waits for its task to end.
STOP_WAIT = 30.0
#: Running tasks per SparkContext (by id): each holds a task slot for as long as it runs.
_RUNNING: dict[int, set[TaskQuery]] = {}
_RUNNING_LOCK = threading.Lock()


def task_slots(sc: SparkContext) -> int:
    """How many tasks the session runs at a time: N of a ``local[N]`` master (the session's
    default parallelism is pinned low for small jobs, whatever the cores), else the default
    parallelism (a cluster's total cores, but at least 2 in Spark's count, and 2 before any
    executor registered), never more than ``spark.cores.max`` when that is set."""
    found = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", sc.master or "")
    if found:
        n = found.group(1)
        return os.cpu_count() or 1 if n == "*" else int(n)
    slots = int(sc.defaultParallelism)
    most = sc.getConf().get("spark.cores.max")
    return min(slots, int(most)) if most and most.isdigit() else slots


@dataclass(frozen=True, slots=True)
class Follow:
    """What one task applies: the node at ``subscriber`` from ``provider`` (named
    ``provider_name`` in the set) with fencing ``epoch``; micro-batches of at most
    ``max_ticks`` ticks and about ``max_events`` events, as the ``baton`` source makes them."""

    subscriber: str
    provider_name: str
    provider: str
    epoch: int
    max_ticks: int = 1000
    #: Smaller than a micro-batch's 50,000 (``baton`` source's ``maxEvents``): a batch here
    #: costs no trigger, and the next hop can start on it only once it is committed, so when a
    #: node catches up the hops work side by side on smaller batches. 100,000 changes root ->
    #: branch -> leaf (bench.cascade's throughput): 41-45k/s with 50,000, 49-55k/s with
    #: 20,000; each batch's fixed reads cost about 4% more CPU than with 50,000.
    max_events: int = 20_000
    poll: float = POLL


def follow(spec: Follow) -> Outcome:
    """Apply every batch the provider ticks to the node, one transaction per step, until the
    node no longer follows ``spec.provider_name`` at ``spec.epoch``: returns why (an
    :class:`Outcome` that :attr:`~Outcome.ends_following`). Runs in a Spark task."""
    from baton.cascade.db import open_node_db

    with (
        open_node_db(spec.subscriber, existing=True) as db,
        open_node_db(spec.provider, readonly=True) as src,
    ):
        while True:
            # One batch read and applied without full collections of the worker's heap.
            with collector_paused():
                done = step(db, src, spec)
            if done is Outcome.IDLE:
                time.sleep(spec.poll)
            elif done.ends_following:
                return done


def step(db: NodeDB, src: NodeDB, spec: Follow) -> Outcome:
    """One look at the provider ``src`` for the node ``db``: apply the next batch in one
    fenced transaction (``APPLIED``), find nothing new (``IDLE``), or say why the node is no
    longer this task's to follow."""
    from baton.cascade.apply import apply_batch
    from baton.cascade.batches import next_end, read_batch

    st = db.state()
    if st.epoch > spec.epoch:
        return Outcome.FENCED
    if st.paused:
        return Outcome.PAUSED
    if st.provider is None:
        return Outcome.PROMOTED
    if st.provider != spec.provider_name:
        return Outcome.PROVIDER_CHANGED
    end = next_end(src, st.position, spec.max_ticks, spec.max_events)
    if end <= st.position:
        return Outcome.IDLE
    batch = read_batch(src, spec.provider, st.position, end, st.needs_events)
    try:
        result = apply_batch(
            db, batch.ticks, batch.reduced, batch.events, spec.epoch, provider=spec.provider_name
        )
    except FencedOut:
        # A newer worker applied between this one's look at the epoch and its transaction:
        # nothing of this one's was applied, and nothing will be.
        return Outcome.FENCED
    # A merge-leaf whose host is not the combined root tracks, ...; a batch already applied
    # (it cannot be: the position was read above) goes on.
    return result.outcome if result.outcome.ends_following else Outcome.APPLIED


def _run_partition(spec: Follow) -> Iterator[Outcome]:
    yield follow(spec)


#: The one column of the DataFrame a task started over Spark Connect returns.
OUTCOME_SCHEMA = "outcome string"


def _run_arrow(spec: Follow, batches: Iterator[Any]) -> Iterator[Any]:
    """:func:`follow` as a ``mapInArrow`` function (Spark Connect has DataFrames, not RDDs):
    the one input row only starts it; the one output row is its outcome."""
    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"outcome": [follow(spec).value]})


def has_spare_slot(spark: SparkSession, spare: int = 1) -> bool:
    """Whether a new low-latency task would leave at least ``spare`` of the session's slots
    free now (:class:`TaskQuery`'s own test, without starting anything). Over Spark Connect
    the server's slots are not counted: True."""
    from baton.spark.session import is_connect

    if is_connect(spark):
        return True
    sc = spark.sparkContext
    with _RUNNING_LOCK:
        running = [q for q in _RUNNING.get(id(sc), set()) if not q.done]
        return len(running) + spare < task_slots(sc)


class TaskQuery:
    """A running :func:`follow` task, seen as the worker sees a streaming query."""

    def __init__(self, spark: SparkSession, spec: Follow, *, spare: int = 0) -> None:
        """Start ``spec``'s task; :class:`~baton.errors.NoTaskSlot` when the session's low-
        latency tasks would leave fewer than ``spare`` of its slots free (the ``auto`` mode
        keeps one for table copies and micro-batches). Over Spark Connect the server's slots,
        shared by all its clients, are not counted."""
        from baton.spark.session import is_connect

        self._spark = spark
        #: Over Spark Connect there is no SparkContext: the task is a DataFrame's, started
        #: and cancelled by a tag (see :meth:`_run_connect`).
        self._sc: SparkContext | None = None if is_connect(spark) else spark.sparkContext
        self._error: BaseException | None = None
        self.outcome: Outcome | None = None
        #: The task has ended (set last, by its thread): its slot is free.
        self.done = False
        self._stopping = False
        with _RUNNING_LOCK:
            running = _RUNNING.setdefault(id(self._sc or spark), set())
            running.difference_update([q for q in running if q.done])
            # A Spark Connect server's task slots are its own (shared by its clients): not
            # counted here.
            slots = None if self._sc is None else task_slots(self._sc)
            if slots is not None and len(running) + spare >= slots:
                # A task that can never be scheduled would leave the node unapplied in
                # silence: say so (the worker then micro-batches, in auto, or tries again).
                raise NoTaskSlot(
                    f"no free Spark task slot for a low-latency worker of {spec.subscriber}: "
                    f"the session runs {slots} task(s) at a time and {len(running)} low-latency "
                    "worker(s) hold them; give Spark more cores (master local[N] or a cluster) "
                    "or use mode micro-batch"
                )
            running.add(self)
        self._group = f"baton-worker-{next(_GROUPS)}-{time.monotonic_ns()}"
        run = self._run if self._sc is not None else self._run_connect
        self._thread = threading.Thread(target=run, args=(spec,), daemon=True, name=self._group)
        self._thread.start()

    def _run(self, spec: Follow) -> None:
        assert self._sc is not None
        try:
            # The job group is the thread's (PySpark pins a Python thread to a JVM thread), so
            # cancelling it stops exactly this task.
            self._sc.setJobGroup(self._group, "baton low-latency worker", interruptOnCancel=True)
            rdd = self._sc.parallelize([spec], 1).flatMap(_run_partition)
            outcome = rdd.collect()
            self.outcome = outcome[0] if outcome else None
        except BaseException as exc:  # reported through exception(), as a query does
            if not self._stopping:
                self._error = exc
        finally:
            self.done = True

    def _run_connect(self, spec: Follow) -> None:
        """The task over Spark Connect: a one-row DataFrame mapped by :func:`_run_arrow` and
        collected. Its operation carries this query's tag (tags are the thread's), so
        :meth:`stop` interrupts exactly it. A client that dies leaves it running on the
        server; the next worker's epoch fences it, and it ends by itself at its next look."""
        from functools import partial

        try:
            self._spark.addTag(self._group)
            frame = self._spark.range(1, numPartitions=1).mapInArrow(
                partial(_run_arrow, spec), OUTCOME_SCHEMA
            )
            rows = frame.collect()
            self.outcome = Outcome(rows[0][0]) if rows else None
        except BaseException as exc:  # reported through exception(), as a query does
            if not self._stopping:
                self._error = exc
        finally:
            with contextlib.suppress(Exception):
                self._spark.removeTag(self._group)
            self.done = True

    def _cancel(self) -> None:
        if self._sc is not None:
            self._sc.cancelJobGroup(self._group)
        else:
            with contextlib.suppress(Exception):  # the server may be gone: nothing to stop
                self._spark.interruptTag(self._group)

    @property
    def isActive(self) -> bool:
        return self._thread.is_alive()

    @property
    def lastProgress(self) -> dict[str, Any]:
        return {}  # no first micro-batch to wait for

    @property
    def status(self) -> dict[str, Any]:
        return {"isTriggerActive": False}  # a cancelled task's transaction rolls back

    def exception(self) -> BaseException | None:
        if self._error is None and self.outcome is None and not self.isActive:
            return CascadeError("the low-latency task ended without saying why")
        return self._error

    def stop(self) -> None:
        self._stopping = True
        # Again until the thread ends: a stop just after the start can come before the
        # thread submitted its job, and Spark cancels only the jobs that run (one cancel
        # then missed it, and the task ran on, holding its slot, found by the hot standby's
        # warm-up that stops a worker it has just started).
        deadline = time.monotonic() + STOP_WAIT
        while self._thread.is_alive() and time.monotonic() < deadline:
            self._cancel()
            self._thread.join(timeout=0.2)
