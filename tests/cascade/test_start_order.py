"""A table added everywhere is copied whole to every node whatever order the node services
start in (issue 10 A: a leaf whose service started before its branch's copied the branch's
still empty table, and stayed short for good while ``status`` said ``ok``)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from baton.cascade import commands
from baton.testing.cascade import LocalSet
from baton.testing.workload import run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SERVICES = ("s1", "s2", "s3")


@pytest.mark.parametrize("order", list(itertools.permutations(SERVICES)), ids="-".join)
def test_copy_is_whole_in_every_start_order(
    spark: SparkSession, tmp_path: Path, order: tuple[str, ...]
) -> None:
    with LocalSet(tmp_path, spark) as s:
        s.root("s1", ticker=False)
        s.branch("s2", "s1")
        s.leaf("s3", "s2")
        run_workload(s.path("s1"), 20, seed=3)  # rows the copies must carry
        # As a user does it: the checked operation, no copy yet (the services copy).
        added = commands.add_table(s.location("s1"), "accounts", everywhere=True)
        assert [t.state for t in added.nodes] == ["ok", "copying", "copying"]

        def settle() -> None:
            for _ in range(8):  # let the started services do what they would on their own
                s.check_workers()
                time.sleep(0.1)

        for name in order:
            if name == "s1":
                s.start_ticker()
            else:
                s.start_worker(name)
            settle()
            # A table is never ok at a node unless its provider's copy was whole first.
            for node in ("s2", "s3"):
                if s.tables_ok(node):
                    assert s.tables_ok(s.state(node).provider or "")
        run_workload(s.path("s1"), 10, seed=4)
        s.wait_synced()
        expected = s.rows("s1")
        assert len(expected) > 50
        assert s.rows("s2") == expected
        assert s.rows("s3") == expected
        for node in ("s2", "s3"):
            assert commands.check(s.location("s1"), node)["equal"]
