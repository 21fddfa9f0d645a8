"""Issue 28, point 4: Spark replays the last micro-batch after a failure (a standalone worker
killed). By then the provider may have trimmed that batch's ticks (every node had them), and
the replay failed four task attempts with "lacks ticks ...: trimmed or not a provider" and a
Python trace, though the data was exact. The source now finds the batch applied at the
subscriber and reads it as empty. No Spark session: the reader is called as a task calls it."""

from __future__ import annotations

from pathlib import Path

import pytest

from baton.cascade import node_ops
from baton.cascade.db import open_node_db
from baton.errors import CascadeError
from baton.spark.source import BatonStreamReader, TickRange
from baton.testing.cascade import root_and_branch
from baton.testing.workload import run_workload
from tests.node.test_api_cascade import catch_up


def test_a_replayed_micro_batch_whose_ticks_were_trimmed_reads_empty(tmp_path: Path) -> None:
    loc = root_and_branch(tmp_path)
    node_ops.copy_table(loc["s2"], "accounts")  # what its worker does first, with Spark
    with open_node_db(loc["s2"]) as db:
        start = db.state().position
    run_workload(tmp_path / "s1.db", 5, seed=1)
    with open_node_db(loc["s1"]) as db, db.transaction() as cur:
        db.make_tick(cur)
    end = catch_up(loc["s2"])
    assert end > start
    batch = TickRange(start, end)
    replay = BatonStreamReader({"provider": loc["s1"], "subscriber": loc["s2"]})
    assert list(replay.read(batch))  # the ticks are there: the batch is read as it was
    with open_node_db(loc["s1"]) as db, db.transaction() as cur:
        db.make_tick(cur)  # an idle tick after the batch, then every tick up to it trimmed
        assert db.trim(cur, end + 1) > 0
    assert list(replay.read(batch)) == []  # applied already: nothing to apply again
    # A reader that cannot tell (no subscriber) still says what is missing.
    bare = BatonStreamReader({"provider": loc["s1"]})
    with pytest.raises(CascadeError, match=r"lacks ticks .*: trimmed or not a provider"):
        list(bare.read(batch))
