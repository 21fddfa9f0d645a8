"""The cascade on a Spark standalone cluster (a master and two one-core workers started for the
module): ``baton cascade run --spark-master spark://...`` serves the branch and the leaf, whose
micro-batches run on the cluster's executors, and takes one of its two cores
(``--spark-conf spark.cores.max=1``: the other is left to another ``run``); the executor is
SIGKILLed mid-stream, and every node ends with the root's rows, every event copied exactly
once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from baton.local.waiting import wait_for
from baton.testing.spark_servers import StandaloneCluster
from tests.spark_deploy.planted import compare_then_repair, planted
from tests.spark_deploy.procs import Cascade


@pytest.mark.long
def test_cascade_on_a_standalone_cluster(standalone: StandaloneCluster, cascade: Cascade) -> None:
    cascade.run("root", [cascade.loc["s1"]])
    subs = cascade.run(
        "subs", [cascade.loc["s2"], cascade.loc["s3"]], "--spark-master", standalone.url,
        "--spark-conf", "spark.cores.max=1",
    )  # fmt: skip
    cascade.start_writing()
    wait_for(lambda: cascade.position("s3") > 2, timeout=150, what="the leaf's first batches")

    # The application holds the one core it was given (not every core of the cluster, Spark's
    # default), and nothing of the driver's host (its scratch directory, its log4j file) is in
    # its executor's settings.
    executors = wait_for(
        lambda: len(found := standalone.executors()) == 1 and found, timeout=30, what="executors"
    )
    apps = standalone.status()["activeapps"]
    assert isinstance(apps, list) and len(apps) == 1 and apps[0]["cores"] == 1, apps
    for pid in executors:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert str(cascade.dir) not in argv, argv

    # The executor dies while batches flow: the cluster starts a new one, its tasks are retried
    # there, and the apply transaction makes every retry harmless.
    before = cascade.position("s3")
    os.kill(executors[0], signal.SIGKILL)
    wait_for(
        lambda: executors[0] not in (now := standalone.executors()) and len(now) == 1,
        timeout=60,
        what="a new executor",
    )
    wait_for(lambda: cascade.position("s3") > before + 5, timeout=60, what="the leaf to go on")
    cascade.stop_writing()
    upto = cascade.wait_synced()
    cascade.check_equal(upto)
    assert sum(cascade.written) > 200
    assert subs.popen.poll() is None, "the worker process died"
    assert not [line for line in subs.lines() if "Traceback" in line]


def test_an_application_the_cluster_gives_no_executor_is_said(
    standalone: StandaloneCluster, cascade: Cascade
) -> None:
    """Executors larger than any worker (as a cluster full of another application's, or of a
    frozen driver's, would leave it): the worker applies nothing, and says why in one line
    of its own log rather than only in Spark's."""
    subs = cascade.run(
        "subs", [cascade.loc["s2"]], "--spark-master", standalone.url,
        "--spark-conf", "spark.executor.memory=4g",
    )  # fmt: skip
    said = 'msg="spark application has no executor:'
    line = wait_for(
        lambda: next((x for x in subs.lines() if said in x), None), timeout=120, what=said
    )
    assert f"master={standalone.url}" in line and "level=warning" in line, line
    # The standby's warm-up gives up rather than wait out its two minutes: it campaigns cold.
    wait_for(
        lambda: any('msg="campaigning for the node' in x for x in subs.lines()),
        timeout=60,
        what="the standby campaigning",
    )
    assert any("spark warm-up failed" in x and "no executor" in x for x in subs.lines())
    assert not standalone.executors()
    assert not [x for x in subs.lines() if "Traceback" in x]
    subs.stop()


def test_compare_and_repair_on_a_standalone_cluster(
    standalone: StandaloneCluster, tmp_path: Path
) -> None:
    """compare and repair through the command line, Spark's tasks on the cluster's executors."""
    env = {"BATON_SPARK_MASTER": standalone.url}
    compare_then_repair(planted(tmp_path), env)
