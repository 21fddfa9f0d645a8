"""Hot standby (:mod:`baton.service.warm`): a standby's session is made ready to apply before
it is needed, and the takeover of a branch whose serving process is killed uses it."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from baton.errors import NotLeader
from baton.local.waiting import wait_for
from baton.placement.model import ObjectSpec
from baton.placement.workload import WorkloadContext
from baton.service.mode import DEFAULT_MODE
from baton.service.warm import _DONE, warm_up
from baton.service.workload import CascadeWorker
from baton.testing.cascade import root_and_branch
from bench.standby import takeover_trial

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _leftovers() -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob("baton-warm-*"))


def test_a_warm_up_runs_once_per_session_and_mode_and_leaves_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its throwaway nodes in a directory of this test's own: another test process warming at
    # the same moment has its own in the shared temporary directory.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = _leftovers()
    assert before == []
    halted = threading.Event()
    halted.set()
    # Stopped before it could apply: not warm (None), and the next call still warms.
    assert warm_up(spark, "low-latency", halt=halted) is None
    took = warm_up(spark, "low-latency")
    assert took is not None and took > 0
    assert warm_up(spark, "low-latency") == 0.0  # warm already: nothing run again
    assert _leftovers() == before


def test_a_warm_standby_takes_a_killed_branch_over_without_building_spark(
    tmp_path: Path,
) -> None:
    """Two ``baton cascade run`` processes for one branch, a writer at the root; the serving
    one is SIGKILLed with its JVM. The standby warmed before it campaigned, serves without
    starting Spark again, and every event arrives once (the trial checks s2 against s1)."""
    outcome = takeover_trial(tmp_path, "warm", cost_window=0.5)  # its cost: make bench
    assert outcome.warm_log, "the standby did not warm its session before it served"
    assert not outcome.built_spark_after, "the standby built its Spark session at the takeover"
    print(f"warm standby: first apply {outcome.seconds} s after the kill")


async def test_a_standby_member_warms_its_agents_session_unless_cold(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A placed ``cascade-worker``'s follower warms its agent's session in the background;
    with ``"standby": "cold"`` it does not even build one, nor does a root's (it runs no
    Spark)."""
    loc = root_and_branch(tmp_path)
    built: list[str] = []

    def session() -> SparkSession:
        built.append("session")
        return spark

    async def no_fetch(node: str, group: str, request: dict[str, Any]) -> dict[str, Any]:
        raise NotLeader("no leader in this test")

    key = (id(spark), DEFAULT_MODE)
    _DONE.discard(key)
    for node, standby in (("s2", "cold"), ("s1", "warm"), ("s2", "warm")):
        spec = {"location": loc[node], "standby": standby}
        obj = ObjectSpec(name=node, type="cascade-worker", spec=spec)
        ctx = WorkloadContext(obj, 0, f"{node}/0", "a", tmp_path, no_fetch, session)
        member = CascadeWorker(ctx)
        try:
            await member.start_follower("b", 1)
            if node == "s2" and standby == "warm":
                await asyncio.to_thread(
                    wait_for, lambda: key in _DONE, timeout=120, what="the session warm"
                )
            else:
                warming = [t for t in threading.enumerate() if t.name == f"warm-{node}/0"]
                for thread in warming:  # the root's: it looks at the node, and ends
                    await asyncio.to_thread(thread.join, 30)
                assert built == []
        finally:
            await member.close()
    assert built == ["session"]
