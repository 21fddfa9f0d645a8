"""Cascade operations with real Spark workers on SQLite node databases: seed 004's two cases,
switchover, failover and resurrect, pause/resume, fencing, and bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from baton.cascade import handover, node_ops, set_ops, takeover
from baton.cascade.apply import apply_batch
from baton.cascade.db import open_node_db
from baton.cascade.model import Event, Role
from baton.errors import CascadeError, FencedOut
from baton.local.waiting import wait_for
from baton.testing.cascade import LocalSet
from baton.testing.workload import run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def seed_set(spark: SparkSession, tmp_path: Path) -> Iterator[LocalSet]:
    """Seed 004's simple case: S1 root -> S2 branch, S1 -> S3 branch -> S4 leaf."""
    with LocalSet(tmp_path, spark) as s:
        s.root("s1")
        s.branch("s2", "s1")
        s.branch("s3", "s1")
        s.leaf("s4", "s3")
        s.add_table("accounts")
        s.start_workers()
        yield s


def equal_everywhere(s: LocalSet, names: list[str]) -> list[tuple[object, ...]]:
    expected = s.rows(names[0])
    for n in names[1:]:
        assert s.rows(n) == expected, n
    return expected


def queue_ids(s: LocalSet, name: str, upto: int) -> list[int]:
    with open_node_db(s.location(name)) as db:
        return [e.ev_id for e in db.batch_events(s.state(name).global_watermark, upto)]


def test_loss_of_s3_leaf_moves_to_s1_or_s2(seed_set: LocalSet) -> None:
    s = seed_set
    run_workload(s.path("s1"), 50, seed=1)
    s.wait_synced()
    c = s.cascade()
    # S3 is lost: S4 can receive from S1 or S2 (not from itself, a leaf, or the dead S3).
    s.stop_worker("s3")
    set_ops.tag(c, "s3", True)
    s.dead.add("s3")
    # S2 may be behind S4 (they apply independently, and S4 may still apply what S3 had
    # queued after S4's position was read): a provider must have the tick S4 is at, so S2 is a
    # candidate once it gets there. Never S3 (dead) or S4 itself.
    wait_for(lambda: set_ops.candidates(c, "s4") == ["s1", "s2"], timeout=60, what="s2 a candidate")
    set_ops.change_provider(c, "s4", "s2")
    run_workload(s.path("s1"), 50, seed=2)
    s.wait_synced(["s2", "s4"])
    equal_everywhere(s, ["s1", "s2", "s4"])
    set_ops.change_provider(c, "s4", "s1")
    run_workload(s.path("s1"), 30, seed=3)
    s.wait_synced(["s2", "s4"])
    equal_everywhere(s, ["s1", "s2", "s4"])


def test_loss_of_s1_s3_from_s2_then_failover(seed_set: LocalSet, tmp_path: Path) -> None:
    s = seed_set
    run_workload(s.path("s1"), 60, seed=4)
    top = s.wait_synced()
    c = s.cascade()
    # S1 dies (its ticker stops) once its branches have everything it ticked. S3 can then be
    # directed to receive from S2 (the set is in sync: same ticks, same batches).
    s.dead.add("s1")
    with open_node_db(s.location("s1")) as root:
        last = root.last_tick()
    assert last is not None
    s.wait_synced(["s2", "s3"], upto=last.tick_id)
    set_ops.change_provider(c, "s3", "s2")
    assert s.state("s3").provider == "s2"
    new_root, fork, notes = takeover.failover(c, "s1")
    assert new_root in ("s2", "s3") and fork >= top and notes == []
    assert s.state(new_root).role is Role.ROOT
    # Writes now go to the new root; everyone follows it.
    run_workload(s.path(new_root), 40, seed=5)
    s.wait_synced(["s2", "s3", "s4"])
    equal_everywhere(s, ["s2", "s3", "s4"])

    # The old root returns with changes that never reached the set: resurrect saves them to a
    # file and makes it a branch of the new root, equal to the set again.
    run_workload(s.path("s1"), 5, seed=6)  # written to the old root while it was "dead"
    with open_node_db(s.location("s1")) as old, old.transaction() as cur:
        lost_tick = old.make_tick(cur)  # ... and ticked there, as the dead root's ticker did
    assert lost_tick is not None
    run_workload(s.path("s1"), 2, seed=16)  # and some it never ticked
    saved = tmp_path / "lost.jsonl"
    n = takeover.resurrect(c, "s1", saved)
    records = [json.loads(line) for line in saved.read_text().splitlines()]
    assert n > 0 and len(records) == n
    assert all(r["table"] == "accounts" for r in records)
    # Each saved event names the old root's tick that held it (None: never ticked).
    ticks = [r["tick"] for r in records]
    assert lost_tick.tick_id in ticks and ticks[-1] is None
    assert all(t == lost_tick.tick_id for t in ticks if t is not None)
    s.dead.discard("s1")
    assert s.state("s1").role is Role.BRANCH and s.state("s1").provider == new_root
    s.start_worker("s1")
    run_workload(s.path(new_root), 20, seed=7)
    s.wait_synced(["s1", "s2", "s3", "s4"])
    equal_everywhere(s, ["s1", "s2", "s3", "s4"])


def test_switchover_loses_nothing(seed_set: LocalSet) -> None:
    s = seed_set
    run_workload(s.path("s1"), 60, seed=8)
    c = s.cascade()

    def wait(cond: object, timeout: float) -> None:
        from baton.local.waiting import wait_for

        def checked() -> bool:
            s.check_workers()
            return bool(cond())  # type: ignore[operator]

        wait_for(checked, timeout=timeout)

    switch = handover.switchover(c, "s2", wait, 60)
    assert s.state("s2").role is Role.ROOT and s.state("s1").provider == "s2"
    s.start_worker("s1")
    run_workload(s.path("s2"), 60, seed=9)
    last = s.wait_synced(["s1", "s3", "s4"])
    assert last > switch
    rows = equal_everywhere(s, ["s2", "s1", "s3", "s4"])
    assert len(rows) > 100
    # No event twice in a queue copy: event ids in s3's queue are unique and increasing.
    ids = queue_ids(s, "s3", last)
    assert ids == sorted(set(ids))


def test_pause_resume_and_cycles(seed_set: LocalSet) -> None:
    s = seed_set
    c = s.cascade()
    set_ops.set_paused(c, "s4", True)
    run_workload(s.path("s1"), 20, seed=10)
    s.wait_synced(["s2", "s3"])
    before = s.state("s4").position
    s.check_workers()
    assert s.state("s4").position == before  # paused: applies nothing
    set_ops.set_paused(c, "s4", False)
    s.wait_synced(["s4"])
    equal_everywhere(s, ["s1", "s3", "s4"])
    # Bad provider changes are refused and change nothing.
    with pytest.raises(CascadeError, match="is a leaf"):
        set_ops.change_provider(c, "s3", "s4")

    # s2 can move under s3 once s3 has every tick s2 has (both follow s1; wait for them).
    def s3_has_all() -> bool:
        s.check_workers()
        return bool(s.state("s3").position >= s.state("s2").position)

    wait_for(s3_has_all, timeout=60)
    set_ops.change_provider(c, "s2", "s3")
    with pytest.raises(CascadeError, match="cycle"):
        set_ops.change_provider(c, "s3", "s2")
    with pytest.raises(CascadeError, match="unknown node"):
        set_ops.change_provider(c, "s3", "nope")
    with pytest.raises(CascadeError, match="own provider"):
        set_ops.change_provider(c, "s3", "s3")
    assert s.state("s3").provider == "s1" and s.state("s2").provider == "s3"


def test_stale_worker_is_fenced(seed_set: LocalSet) -> None:
    s = seed_set
    run_workload(s.path("s1"), 10, seed=11)
    s.wait_synced(["s2"])
    s.stop_worker("s2")
    s.start_worker("s2", epoch=10)
    run_workload(s.path("s1"), 10, seed=12)
    s.wait_synced(["s2"])
    s.stop_worker("s2")  # the position stays put while the old worker tries
    position = s.state("s2").position
    # An older worker (epoch 3) cannot apply, and changes nothing.
    with open_node_db(s.location("s1")) as root:
        # The next tick (an idle one comes within TEST_TICKER.idle) is what the old worker tries.
        wait_for(lambda: len(root.ticks(position, position + 1)) == 1, timeout=30)
        ticks = root.ticks(position, position + 1)
    with open_node_db(s.location("s2")) as db, pytest.raises(FencedOut, match="stale"):
        apply_batch(db, ticks, [], [], epoch=3)
    assert s.state("s2").position == position


def test_a_new_worker_fences_the_old_one_before_applying_anything(seed_set: LocalSet) -> None:
    """Found by the fault campaign (seed 1, round 12): a worker whose leadership was over, its
    Spark session slow to start, began applying after its successor had started, and kept
    going while the successor, applying nothing yet, failed batch after batch. A worker now
    claims its epoch when it starts: the older one is refused from that moment."""
    s = seed_set
    run_workload(s.path("s1"), 10, seed=13)
    s.wait_synced(["s2"])
    s.stop_worker("s2")
    s.start_worker("s2", epoch=10)  # the older worker: it applies
    run_workload(s.path("s1"), 10, seed=14)
    s.wait_synced(["s2"])
    s.stop_worker("s2")
    position = s.state("s2").position
    with open_node_db(s.location("s1")) as root:
        wait_for(lambda: len(root.ticks(position, position + 1)) == 1, timeout=30)
        ticks = root.ticks(position, position + 1)
    newer = s.start_worker("s2", epoch=20)
    newer.close()  # started, then gone before it applied anything
    assert s.state("s2").position == position
    with open_node_db(s.location("s2")) as db, pytest.raises(FencedOut, match="stale"):
        apply_batch(db, ticks, [], [], epoch=10)
    with pytest.raises(FencedOut, match="already claimed"):
        s.start_worker("s2", epoch=10)  # nor can an older worker start again
    assert s.state("s2").position == position


def test_bad_input(tmp_path: Path, spark: SparkSession) -> None:
    with LocalSet(tmp_path, spark) as s:
        s.root("r")
        with open_node_db(s.location("r")) as db, db.transaction() as cur:
            cur.execute("CREATE TABLE nokey (a INTEGER, b TEXT)")
        with pytest.raises(CascadeError, match="no primary key"):
            node_ops.add_table(s.location("r"), "nokey")
        with pytest.raises(CascadeError, match="no table"):
            node_ops.add_table(s.location("r"), "missing")
        with pytest.raises(CascadeError, match="bad node location"):
            node_ops.create_root("x", "mysql://h/db", "S")
        with pytest.raises(CascadeError, match="does not exist"):
            node_ops.create_root("x", "sqlite:///no/such/dir/x.db", "S")
        with pytest.raises(CascadeError, match="unknown node"):
            node_ops.create_subscriber(Role.BRANCH, "b", s.location("b"), "zz", s.location("r"))
        with pytest.raises(CascadeError, match="bad node name"):
            node_ops.create_root("bad name", s.location("q"), "S")
        assert s.state("r").role is Role.ROOT


def test_retention_by_watermark(seed_set: LocalSet) -> None:
    s = seed_set
    c = s.cascade()
    set_ops.set_paused(c, "s4", True)
    run_workload(s.path("s1"), 40, seed=13)
    s.wait_synced(["s2", "s3"])
    held = s.state("s4").position
    # Nothing is deleted until everyone has it: the paused leaf holds the whole set's queue.
    with open_node_db(s.location("s1")) as root:
        wait_for(lambda: root.last_tick().tick_id > held + 5, timeout=30)  # type: ignore[union-attr]
        assert root.state().global_watermark <= held
        assert root.get_tick(held) is not None
    with open_node_db(s.location("s3")) as s3:
        assert s3.get_tick(held) is not None
    set_ops.set_paused(c, "s4", False)
    top = s.wait_synced()
    # Once everyone has it, the watermark passes it and every queue is trimmed below it.
    with open_node_db(s.location("s1")) as root:
        wait_for(lambda: root.state().global_watermark >= top, timeout=60, what="the watermark")
        wm = root.state().global_watermark
        assert root.ticks(0, wm - 1) == []
    with open_node_db(s.location("s3")) as s3:
        wait_for(lambda: s3.state().global_watermark >= top, timeout=60)
        s.check_workers()
        assert s3.ticks(0, s3.state().global_watermark - 1) == []


def test_event_columns_must_match_the_target(tmp_path: Path, spark: SparkSession) -> None:
    # An event naming a column the target lacks, or a wrong key, is refused whole: no row of
    # the batch is applied and the position does not move.
    with LocalSet(tmp_path, spark) as s:
        s.root("r")
        s.leaf("l", "r")
        s.add_table("accounts")
        with open_node_db(s.location("r")) as root, root.transaction() as cur:
            root.make_tick(cur)
            tick = root.make_tick(cur)
        assert tick is not None
        with open_node_db(s.location("l")) as leaf:
            position = leaf.state().position
            with open_node_db(s.location("r")) as root:
                batch = root.ticks(position, position + 1)
            assert batch
            t = batch[0].tick_id
            good = Event(1, 0.0, "I", "accounts", '{"id": 1}', '{"id": 1, "balance": 5}', tick=t)
            bad = Event(2, 0.0, "I", "accounts", '{"id": 2}', '{"id": 2, "colour": "red"}', tick=t)
            wrong_key = Event(3, 0.0, "D", "accounts", '{"name": "x"}', None, tick=t)
            for events, needle in (([good, bad], "colour"), ([good, wrong_key], "key columns")):
                with pytest.raises(CascadeError, match=needle):
                    apply_batch(leaf, batch, events, [], epoch=1)
                assert leaf.state().position == position
                assert leaf.read_rows("accounts") == []
