"""The campaign's supervisor runs a candidate again after it ended by itself (``baton elect``
exits 75 when it loses leadership), and leaves one the nemesis killed to the fault's repair.
A long campaign (seed 20261126) lost every candidate of a job this way before it existed."""

from __future__ import annotations

import signal
from pathlib import Path

from baton.chaos.campaign import Supervisor
from baton.chaos.history import load
from baton.local.processes import Proc
from baton.local.waiting import wait_for


def test_a_candidate_that_exits_is_restarted_and_a_killed_one_is_not(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    # Each start leaves a file; the process exits 75 at its first start and then stays up.
    script = f'n=$(ls {runs} | wc -l); touch {runs}/$n; [ "$n" -eq 0 ] && exit 75; exec sleep 60'
    # In this namespace: the supervisor never looks at hosts.
    quitter = Proc("elect-job-a-h1", ["sh", "-c", script], tmp_path / "a.log", group=True)
    killed = Proc("elect-job-b-h1", ["sleep", "60"], tmp_path / "b.log", group=True)
    supervisor = Supervisor({s.name: s for s in (quitter, killed)}, tmp_path / "history")
    supervisor.start()
    try:
        killed.signal(signal.SIGKILL)
        wait_for(lambda: len(list(runs.iterdir())) == 2 and quitter.running, timeout=20)
        restarts = [r for r in load(tmp_path / "history") if r["kind"] == "supervisor-restart"]
        assert [(r["name"], r["status"]) for r in restarts] == [("elect-job-a-h1", 75)]
        assert not killed.running  # down until the fault's repair starts it
    finally:
        supervisor.halt.set()
        supervisor.join(5)
        for svc in (quitter, killed):
            svc.kill()
