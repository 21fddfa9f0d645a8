"""How far a Spark job has got: the tasks done and in all of a job group's stages, read from
Spark's status tracker twice a second and handed to a callback (a progress bar, the node's
``compare`` mark). Spark Connect has no status tracker on the client: nothing is reported there
(the job runs as usual)."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from baton.spark.session import is_connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.spark")

#: (tasks done, tasks in all) so far.
Report = Callable[[int, int], None]
#: Seconds between two reads of the status tracker.
POLL = 0.5


def _tasks(spark: SparkSession, group: str) -> tuple[int, int]:
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            st = tracker.getStageInfo(stage)
            if st is not None:
                done += st.numCompletedTasks
                total += st.numTasks
    return done, total


@contextlib.contextmanager
def tracked(spark: SparkSession, report: Report | None) -> Iterator[None]:
    """Run the block's Spark jobs in a job group of their own and report their tasks while it
    runs (and once at the end)."""
    if report is None or is_connect(spark):
        yield
        return
    sc = spark.sparkContext
    group = f"baton-progress-{uuid.uuid4().hex[:12]}"
    sc.setJobGroup(group, "baton", interruptOnCancel=False)
    halt = threading.Event()

    def poll() -> None:
        while not halt.wait(POLL):
            try:
                report(*_tasks(spark, group))
            except Exception as exc:  # a progress bar must never fail the job
                log.debug("progress not read", extra={"error": str(exc)})

    thread = threading.Thread(target=poll, daemon=True, name="baton-progress")
    thread.start()
    try:
        try:
            yield
        finally:
            halt.set()
            thread.join(5)
        # Done: every task that had to run ran (a stage Spark skipped, its shuffle output
        # reused, counts its tasks but never completes them). Said last, after the poller.
        _, total = _tasks(spark, group)
        report(total, total)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


__all__ = ["POLL", "Report", "tracked"]
