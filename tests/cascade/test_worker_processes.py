"""Cascade node services as real processes (``baton cascade run``): the worker process and its
Spark JVM are SIGKILLed while batches flow; after restarts every event is applied and copied
exactly once, in both worker modes (micro-batches; one long-running task)."""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from baton.cascade.db import open_node_db
from baton.local.processes import Proc, java_of
from baton.local.waiting import wait_for
from baton.testing.cascade import root_and_branch, root_ticked
from baton.testing.workload import Writer

BATON = str(Path(sys.executable).with_name("baton"))


def jvm_of(proc: Proc) -> int | None:
    found = java_of(proc.popen.pid)
    return found[0] if found else None


# The micro-batch run (about a minute) is one of `make long`'s; low-latency, the local default,
# stays in `make test`.
@pytest.mark.parametrize(
    "mode", [pytest.param("micro-batch", marks=pytest.mark.long), "low-latency"]
)
def test_worker_and_jvm_killed_mid_stream(tmp_path: Path, mode: str) -> None:
    loc = root_and_branch(tmp_path)
    store = f"sqlite://{tmp_path / 'store.db'}"

    def start(name: str) -> Proc:
        argv = [BATON, "cascade", "run", loc[name], "--store", store, "--ttl", "2",
                "--spark-dir", str(tmp_path / f"spark-{name}"), "--mode", mode]  # fmt: skip
        return Proc(name, argv, tmp_path / f"{name}.log")

    procs = {n: start(n) for n in loc}
    writer = Writer(tmp_path / "s1.db", transactions=15)

    def applied() -> int:
        with open_node_db(loc["s2"]) as db:
            return db.state().position

    def applied_past(tick: int) -> bool:
        return applied() > tick

    try:
        wait_for(lambda: applied() > 1, timeout=120, what="the first batch at s2")
        writer.start()
        rng = random.Random(5)
        kills = 0
        while kills < 2:  # one driver kill, one JVM kill (each restart starts a JVM)
            time.sleep(rng.uniform(1.0, 3.0))
            p = procs["s2"]
            if kills % 2 == 0:
                p.signal(signal.SIGKILL)  # the worker process (the driver) dies mid-stream
            else:
                jvm = wait_for(partial(jvm_of, p), timeout=30, what="the worker's JVM")
                os.kill(jvm, signal.SIGKILL)  # the JVM dies under the sink
                # Without its JVM the driver cannot go on; it is restarted like any crash.
                time.sleep(0.5)
                p.signal(signal.SIGKILL)
            p.popen.wait(30)
            kills += 1
            before = applied()
            procs["s2"] = start("s2")
            wait_for(partial(applied_past, before), timeout=120, what="s2 to apply again")
        writer.stop()
        assert sum(writer.written) > 1000
        last = root_ticked(loc["s1"])
        wait_for(lambda: applied() >= last, timeout=120, what="s2 to catch up")
        with open_node_db(loc["s1"]) as root, open_node_db(loc["s2"]) as branch:
            assert branch.read_rows("accounts") == root.read_rows("accounts")
            root_ids = [e.ev_id for e in root.batch_events(1, last)]
            copied = [e.ev_id for e in branch.batch_events(1, last)]
        # Every event of the range copied exactly once: no loss, no duplicate.
        assert copied == root_ids and len(copied) == len(set(copied)) > 0
    finally:
        writer.stop()
        for p in procs.values():
            p.stop()
