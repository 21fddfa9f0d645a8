"""The low-latency worker mode (one long-running Spark task per worker, :mod:`baton.service.task`)
keeps every guarantee of the micro-batch mode: pause, provider change and a newer worker stop
its task, nothing is applied twice or skipped, and a stale task's transactions are refused.
Also how a worker of either mode starts when it is stopped at once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from baton.cascade import set_ops
from baton.cascade.db import open_node_db
from baton.errors import CascadeError, FencedOut
from baton.local.waiting import wait_for
from baton.service.task import Follow, TaskQuery
from baton.service.worker import _WARM, AUTO, LOW_LATENCY, Worker
from baton.testing.cascade import LocalSet
from baton.testing.workload import run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _queue_ids(s: LocalSet, name: str, upto: int) -> list[int]:
    with open_node_db(s.location(name)) as db:
        return [e.ev_id for e in db.batch_events(s.state(name).global_watermark, upto)]


def _three_nodes_served(s: LocalSet) -> None:
    """s1 -> s2 -> s3 with ``accounts``, a worker for s2 and s3; s2's is a task."""
    s.root("s1")
    s.branch("s2", "s1")
    s.leaf("s3", "s2")
    s.add_table("accounts")
    s.start_workers()
    assert isinstance(s.workers["s2"].query, TaskQuery)


def test_pause_provider_change_and_a_newer_worker(spark: SparkSession, tmp_path: Path) -> None:
    # local[2]: one task slot per worker, so two workers at a time.
    with LocalSet(tmp_path, spark, mode=LOW_LATENCY) as s:
        _three_nodes_served(s)
        # Both slots of local[2] are held: a third task could never run, and is refused.
        with pytest.raises(CascadeError, match="no free Spark task slot"):
            TaskQuery(spark, Follow(s.location("s3"), "s2", s.location("s2"), epoch=99))
        run_workload(s.path("s1"), 40, seed=1)
        last = s.wait_synced(["s2", "s3"])
        expected = s.rows("s1")
        assert len(expected) > 50
        assert s.rows("s2") == expected and s.rows("s3") == expected
        ids = _queue_ids(s, "s2", last)
        assert ids == sorted(set(ids))  # the branch's queue copy: each event once

        # Paused: the leaf's task ends and the leaf stays put while the root goes on.
        c = s.cascade()
        set_ops.set_paused(c, "s3", True)
        held = s.state("s3").position
        run_workload(s.path("s1"), 20, seed=2)
        s.wait_synced(["s2"])
        s.check_workers()
        assert s.workers["s3"].query is None
        assert s.state("s3").position == held
        set_ops.set_paused(c, "s3", False)
        s.wait_synced(["s3"])
        assert s.rows("s3") == s.rows("s1")

        # The leaf moves to the root: its task is restarted on the new provider.
        set_ops.change_provider(c, "s3", "s1")
        run_workload(s.path("s1"), 20, seed=3)
        s.wait_synced(["s2", "s3"])
        assert s.workers["s3"].provider == "s1"
        assert s.rows("s3") == s.rows("s1") == s.rows("s2")

        # A newer worker for the branch (its lease moved): the old task sees the newer epoch
        # and ends, the old worker says it is stale, and only the new one applies from then on.
        s.stop_worker("s3")  # frees the second task slot for the newer worker
        old = s.workers.pop("s2")
        newer = Worker(spark, s.location("s2"), epoch=old.epoch + 1, mode=LOW_LATENCY)
        newer.start()
        s.workers["s2"] = newer
        try:
            # Both tasks race for each batch until the newer one applies one (the old lease
            # holder's worker may run on for a while: fencing is by what was applied).
            seeds = iter(range(100, 1000))

            def newer_applied() -> bool:
                run_workload(s.path("s1"), 2, seed=next(seeds))
                return bool(s.state("s2").epoch == newer.epoch)

            wait_for(newer_applied, timeout=60, interval=0.2)
            wait_for(lambda: old.query is None or not old.query.isActive, timeout=60)
            with pytest.raises(FencedOut, match="stale"):
                old.check()
        finally:
            old.close()
        s.start_worker("s3")
        last = s.wait_synced(["s2", "s3"])
        expected = s.rows("s1")
        assert s.rows("s2") == expected and s.rows("s3") == expected
        ids = _queue_ids(s, "s2", last)
        assert ids == sorted(set(ids))


def test_auto_takes_a_task_while_a_slot_is_spare_and_micro_batches_beyond(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``auto``, the default mode, on local[2]: the branch's worker gets a task (one slot stays
    free), the leaf's would leave none for copies and micro-batches, so it applies in
    micro-batches, saying so once; both apply everything exactly once. When the branch's
    worker stops, the leaf's takes the freed slot for a task."""
    with LocalSet(tmp_path, spark, mode=AUTO) as s:
        _three_nodes_served(s)
        assert not isinstance(s.workers["s3"].query, TaskQuery)
        run_workload(s.path("s1"), 30, seed=4)
        last = s.wait_synced(["s2", "s3"])
        expected = s.rows("s1")
        assert s.rows("s2") == expected and s.rows("s3") == expected and len(expected) > 30
        ids = _queue_ids(s, "s2", last)
        assert ids == sorted(set(ids))
        said = [r for r in caplog.records if "no Spark task slot to spare" in r.getMessage()]
        assert len(said) == 1, said
        # The branch's worker stops (its host went away, say): its slot is free, and the
        # leaf's worker moves to a task at its next look, without a restart of its own.
        s.stop_worker("s2")
        leaf = s.workers["s3"]
        leaf.task_retry.interval = 0.0

        def on_a_task() -> bool:
            leaf.check()
            return isinstance(leaf.query, TaskQuery)

        wait_for(on_a_task, timeout=60, what="the leaf's worker to move to a task")
        # The branch's new worker now finds no slot to spare: micro-batches. Both stay exact.
        s.start_worker("s2")
        assert not isinstance(s.workers["s2"].query, TaskQuery)
        run_workload(s.path("s1"), 30, seed=5)
        s.wait_synced(["s2", "s3"])
        expected = s.rows("s1")
        assert s.rows("s2") == expected and s.rows("s3") == expected


def test_a_stopped_start_gives_up_waiting_for_the_first_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The first query of a session waits for its first micro-batch (up to a minute on a
    loaded host) before any other starts. A worker stopped meanwhile (its leadership lost)
    gives the wait up, so the stop is not held back by it, and the session is not taken as
    warm: the next start waits in its place."""
    with LocalSet(tmp_path, spark) as s:
        s.root("s1")
        s.leaf("s2", "s1")
        s.add_table("accounts")
        halt = threading.Event()
        halt.set()
        _WARM.discard(id(spark))
        worker = Worker(spark, s.location("s2"), epoch=1, halt=halt)
        try:
            worker.start()
            assert worker.query is not None  # started; its stop is the owner's next step
            assert id(spark) not in _WARM
        finally:
            worker.close()


def test_a_low_latency_worker_stopped_at_once_ends_its_task(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A stop right after the start (a hot standby's warm-up cut short by a takeover) can
    come before the task's thread has submitted its job: the task still ends, and frees its
    slot, instead of running on past the stop."""
    with LocalSet(tmp_path, spark) as s:
        s.root("s1")
        s.leaf("s2", "s1")
        s.add_table("accounts")
        for _ in range(3):
            worker = Worker(spark, s.location("s2"), epoch=1, mode=LOW_LATENCY)
            worker.start()
            query = worker.query
            assert isinstance(query, TaskQuery)
            worker.close()
            assert query.done and not query.isActive


def test_a_pause_over_before_the_next_check_is_no_failure(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """compare pauses a node for a moment: its low-latency task ends on the pause, and the next
    check, the pause over by then, starts the task again. Not a failure, however often: no
    warning, nothing counted towards "keeps failing"."""
    import logging

    with LocalSet(tmp_path, spark, mode=LOW_LATENCY) as s:
        s.root("s1")
        s.branch("s2", "s1")
        s.add_table("accounts")
        s.start_workers()
        worker, c = s.workers["s2"], s.cascade()
        caplog.set_level(logging.INFO, logger="baton.cascade")
        for _ in range(5):
            query = worker.query
            assert isinstance(query, TaskQuery)
            set_ops.set_paused(c, "s2", True)

            def ended(task: TaskQuery = query) -> bool:
                return not task.isActive

            wait_for(ended, what="the task ending on the pause")
            set_ops.set_paused(c, "s2", False)
            worker.check()
            assert worker.query is not None and worker.query is not query
            assert worker.failures == 0
        run_workload(s.path("s1"), 10, seed=4)
        s.wait_synced(["s2"])
        assert s.rows("s2") == s.rows("s1")
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
