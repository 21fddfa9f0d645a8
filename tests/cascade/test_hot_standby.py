"""Hot standby (:mod:`baton.service.warm`): a standby's session is made ready to apply before
it is needed, and the takeover of a branch whose serving process is killed uses it."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from baton.service.warm import warm_up
from bench.standby import takeover_trial

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _leftovers() -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob("baton-warm-*"))


def test_a_warm_up_runs_once_per_session_and_mode_and_leaves_nothing(spark: SparkSession) -> None:
    before = _leftovers()
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
    outcome = takeover_trial(tmp_path, "warm")
    assert outcome.warm_log, "the standby did not warm its session before it served"
    assert not outcome.built_spark_after, "the standby built its Spark session at the takeover"
    print(f"warm standby: first apply {outcome.seconds} s after the kill")
