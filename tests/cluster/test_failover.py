"""Several real processes contend for one lease on every backend: SIGKILL and SIGSTOP of the
leader, the store killed, for library participants and for ``baton elect`` supervisors.

Liveness bounds carry slack for process scheduling on a loaded 2-core machine; the tight numbers
are measured by ``make bench``, not asserted here. Safety is asserted exactly: the fenced log
never accepts a write from a deposed leader after it has seen its successor's epoch."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from baton.lease.timings import Timings
from baton.local.processes import Proc
from baton.testing import wait_for
from baton.testing.fenced import FencedLog
from baton.testing.processes import elect_proc, first_above, last_of, latest, now, participant
from tests.conftest import Backend

TTL = 2.0
T = Timings.for_ttl(TTL)
SLACK = 2.0  # process start-up and scheduling on 2 busy cores
pytestmark = pytest.mark.cluster


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


def start_three(
    kind: str, url: str, tmp_path: Path, procs: list[Proc]
) -> tuple[FencedLog, int, Proc]:
    """Three participants of ``kind`` on one fenced log; returns it, the epoch and leader."""
    log = FencedLog(tmp_path / "fenced.db")
    make = participant if kind == "library" else elect_proc
    procs.extend(make(tmp_path, url, f"p{i}", tmp_path / "fenced.db", TTL) for i in range(3))
    return (log, *leader_of(log, procs))


def leader_of(log: FencedLog, procs: list[Proc]) -> tuple[int, Proc]:
    entry = wait_for(lambda: latest(log), timeout=30, what="a leader writing")
    return entry.epoch, next(p for p in procs if p.name == entry.writer)


@pytest.mark.parametrize("kind", ["library", "cli"])
def test_sigkill_leader_gives_one_new_leader(
    backend: Backend, tmp_path: Path, procs: list[Proc], kind: str
) -> None:
    log, epoch, leader = start_three(kind, backend.url, tmp_path, procs)
    killed_at = now()
    leader.kill()
    new = wait_for(lambda: first_above(log, epoch), TTL + T.election_timeout_max + SLACK + 5)
    assert new.writer != leader.name
    assert new.at - killed_at < TTL + T.election_timeout_max + SLACK
    if kind == "cli":
        # The killed supervisor's guard saw its pipe close and stopped COMMAND at once.
        pid = int((tmp_path / f"fenced.db.{epoch}.pid").read_text())
        wait_for(lambda: not _alive(pid), timeout=5, what="old COMMAND gone")
    log.check()
    others = {e.writer for e in log.entries() if e.epoch > epoch}
    assert others == {new.writer}, "exactly one new leader"


@pytest.mark.parametrize("kind", ["library", "cli"])
def test_sigstop_leader_is_fenced_and_steps_down(
    backend: Backend, tmp_path: Path, procs: list[Proc], kind: str
) -> None:
    log, epoch, leader = start_three(kind, backend.url, tmp_path, procs)
    leader.signal(signal.SIGSTOP)
    new = wait_for(lambda: first_above(log, epoch), TTL + T.election_timeout_max + SLACK + 5)
    old_last = last_of(log, epoch)
    assert old_last is not None and old_last.at < new.at
    if kind == "cli":
        # The guard stopped COMMAND by the renew deadline although the supervisor is frozen,
        # so it was gone before the store could let the successor in.
        pid = int((tmp_path / f"fenced.db.{epoch}.pid").read_text())
        assert not _alive(pid), "COMMAND of the paused supervisor still running"
    wait_for(lambda: len([e for e in log.entries() if e.epoch > epoch]) > 5, timeout=10)
    leader.signal(signal.SIGCONT)
    if kind == "library":
        wait_for(lambda: leader.said(f"lost {epoch}"), timeout=10, what="old leader notices")
    else:
        wait_for(lambda: leader.popen.poll() is not None, timeout=15, what="old supervisor exits")
        code = leader.popen.returncode
        assert code == 75, leader.lines()
        lost = 'msg="leadership lost: the command was stopped"'
        assert any(lost in line and f"epoch={epoch}" in line for line in leader.lines())
    log.check()
    late = [e for e in log.entries() if e.epoch == epoch and e.at > new.at]
    assert late == [], f"deposed leader wrote after its successor: {late}"
    assert all(epoch_ <= epoch for epoch_, _w, _t in log.refused() if _w == leader.name)


@pytest.mark.parametrize("name", ["redis", "postgres"])
def test_store_killed_leader_stops_then_elections_resume(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, procs: list[Proc]
) -> None:
    server = request.getfixturevalue(f"{name}_server")
    url = f"{server.url}?namespace=kill{os.getpid()}"
    log = FencedLog(tmp_path / "fenced.db")
    procs.extend(participant(tmp_path, url, f"p{i}", tmp_path / "fenced.db", TTL) for i in range(3))
    epoch, leader = leader_of(log, procs)
    killed_at = now()
    server.kill()
    try:
        wait_for(lambda: leader.said(f"lost {epoch}"), timeout=T.renew_deadline + SLACK + 5)
        last = last_of(log, epoch)
        assert last is not None
        # Stopped acting within the renew deadline (one write interval of slack).
        assert last.at - killed_at < T.renew_deadline + 0.1
    finally:
        server.start()
    new = wait_for(lambda: first_above(log, epoch), timeout=60, what="elections resume")
    assert new.epoch > epoch
    log.check()


def test_elect_exit_status_and_release(backend: Backend, tmp_path: Path) -> None:
    import subprocess
    import sys

    baton = str(Path(sys.executable).with_name("baton"))
    res = subprocess.run(
        [baton, "elect", "job", "--store", backend.url, "--ttl", "2", "--id", "me", "--",
         "sh", "-c", 'test -n "$BATON_EPOCH" && test "$BATON_LEASE" = job && '
         'test "$BATON_HOLDER" = me && exit 7'],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 7, res.stderr
    show = subprocess.run(
        [baton, "lease", "show", "job", "--store", backend.url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert show.returncode == 1 and "free" in show.stdout, "lease released after COMMAND exited"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
