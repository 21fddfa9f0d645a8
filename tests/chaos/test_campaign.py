"""The short fault campaign of ``make test``: one round of six random faults (fixed seed) against
five agents in network namespaces, elected jobs writing to a fenced resource, placed counters
and a root -> branch -> leaf cascade under a steady writer. The root's host is lost once (its
agent killed or frozen, or the host cut off: by a fault of the round that drew it, else after
the round), the agents fail the root over by themselves, the old root is resurrected, and the
checker gives its verdict. Run as a
user runs it, ``python -m baton.chaos``, in a process of its own. ``make chaos`` runs 1,000
faults."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from baton.chaos.campaign import STRANDED_WRITES
from baton.chaos.nemesis import LossKind

SEED = 20261125


# One round of six faults (the suite must stay under 30 minutes, and `make chaos` runs the
# long campaign; a duration let a slow machine run a second round), the cluster's start and
# the final settle: about 90 s here, well past the suite's default per-test limit, and the
# limit must not cut the campaign short.
@pytest.mark.long
@pytest.mark.timeout(900)
def test_short_campaign_finds_no_violation(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # A session of its own, so that whatever stops this test (a timeout, ^C) stops the
    # campaign's agents, stores and JVMs with it rather than leaving them to the next test.
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton.chaos", "--seed", str(SEED), "--faults", "6",
         "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        _, stderr = proc.communicate(timeout=840)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    res = subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr)
    report = json.loads((out / "report.json").read_text())
    assert res.returncode == 0, (report["violations"], res.stderr[-2000:])
    assert report["ok"] and not report["violations"]
    assert report["faults"] == 6, report["faults_by_kind"]
    # Work went on through the faults: the jobs wrote, the writer's writes were acknowledged
    # and every subscriber applied them, and every round settled.
    assert report["fenced_accepted"] > 100
    assert report["writes_acknowledged"] > 1000
    assert all(n > 0 for n in report["row_versions_applied"].values())
    assert report["rounds"] >= 1 and report["settle_seconds"]["max"] is not None
    # The root was lost after the round: a branch took over, the writes stranded on the old
    # root were saved by resurrect (and the checker matched each to an acknowledged write).
    assert report["root"] == "s2"
    # Nobody ran a failover: the agents' actor did, once the members agreed the root was gone.
    assert report["root_failover"] == "auto" and report["auto_failover_seconds"] is not None
    # Lost once, with its host: its agent killed or frozen, or the host cut off; the loss says
    # how, and the failover took longer than the lease's ttl (the members had to see it gone).
    [loss] = report["root_losses"]
    assert loss["kind"] in set(LossKind) and loss["host"] == "h3", loss
    assert loss["root"] == "s1" and loss["new_root"] == "s2", loss
    assert 2.0 <= loss["failover_seconds"] < 60, loss
    assert report["stranded_saved"] >= STRANDED_WRITES
