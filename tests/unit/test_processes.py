"""The one process-supervision class (:class:`baton.local.processes.Proc`), on real processes:
its log across starts, waiting until ready, pause and resume (of the process or its whole
group), kill, and a graceful stop that kills what will not stop and what the process left."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from baton.errors import ServerError
from baton.local.processes import Proc, descendants
from baton.local.waiting import wait_for


def state(pid: int) -> str | None:
    """A process's state letter (``T``: stopped, ``Z``: exited, not yet reaped); None: gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def gone(pid: int) -> bool:
    return state(pid) in (None, "Z")


def test_the_log_is_fresh_for_a_new_proc_and_kept_across_its_starts(tmp_path: Path) -> None:
    out = tmp_path / "p.out"
    proc = Proc("p", ["sh", "-c", "echo run; exit 3"], out)
    assert proc.wait(10) == 3 and proc.poll() == 3 and not proc.running
    proc.start()  # it exited: it runs again, with the same command and log
    assert proc.wait(10) == 3
    assert proc.lines() == ["run", "run"] and proc.said("ru") == "run"
    again = Proc("p", ["sh", "-c", "echo again"], out)
    again.wait(10)
    assert again.lines() == ["again"]
    unstarted = Proc("q", ["true"], tmp_path / "q.out", start=False)
    assert unstarted.poll() is None and not unstarted.running
    with pytest.raises(ServerError):
        unstarted.popen  # noqa: B018 (the access is the test)


def test_wait_ready_returns_the_condition_or_stops_the_process_and_says_why(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "ready"
    with Proc(
        "p", ["sh", "-c", f"sleep 0.1; touch {flag}; exec sleep 60"], tmp_path / "p.out"
    ) as p:
        assert p.wait_ready(lambda: flag.exists() and "yes", 10, "the flag") == "yes"
        assert p.running

    bad = Proc("bad", ["sh", "-c", "echo no such option; exit 2"], tmp_path / "bad.out")
    with pytest.raises(ServerError) as exited:
        bad.wait_ready(lambda: False, 10, "it to listen")
    assert str(bad.out) in str(exited.value) and bad.poll() == 2

    slow = Proc("slow", ["sleep", "60"], tmp_path / "slow.out")
    with pytest.raises(ServerError):
        slow.wait_ready(lambda: False, 0.2, "it to listen")
    assert not slow.running  # stopped: a server that never became ready is not left behind


def test_stop_is_graceful_then_kills_and_leaves_nothing_it_started(tmp_path: Path) -> None:
    polite = Proc("polite", ["sh", "-c", "trap 'exit 0' TERM; sleep 60 & wait"], tmp_path / "a")
    wait_for(lambda: descendants(polite.pid), timeout=10)
    polite.stop()
    assert polite.poll() == 0  # it stopped on SIGTERM, by itself

    # Ignores SIGTERM, and so does the child it leaves behind when it is killed.
    stubborn = Proc(
        "stubborn", ["sh", "-c", "trap '' TERM; sleep 60 & wait"], tmp_path / "b", grace=0.2
    )
    children = wait_for(lambda: descendants(stubborn.pid), timeout=10)
    stubborn.stop()
    assert stubborn.poll() == -9
    wait_for(lambda: all(gone(pid) for pid in children), timeout=10, what="its child killed")


@pytest.mark.parametrize("group", [False, True])
def test_pause_reaches_the_process_or_its_whole_group_and_kill_ends_a_paused_one(
    tmp_path: Path, group: bool
) -> None:
    proc = Proc("p", ["sh", "-c", "sleep 60 & wait"], tmp_path / "p.out", group=group)
    (child,) = wait_for(lambda: descendants(proc.pid), timeout=10)
    wait_for(lambda: state(child) == "S", timeout=10, what="its child asleep")
    try:
        proc.pause()
        wait_for(lambda: state(proc.pid) == "T", timeout=10, what="the process stopped")
        if group:
            wait_for(lambda: state(child) == "T", timeout=10, what="its child stopped")
        else:
            assert state(child) == "S"
        assert proc.paused and proc.running
        proc.resume()
        wait_for(lambda: state(proc.pid) != "T" and state(child) != "T", timeout=10)
        assert not proc.paused
        proc.pause()
        proc.kill()  # no SIGCONT needed
        assert proc.poll() == -9 and not proc.paused
        # A crash: only a signal to the group takes the child along.
        if group:
            wait_for(lambda: gone(child), timeout=10, what="its child killed too")
        else:
            assert not gone(child)
        proc.restart()
        assert proc.running
    finally:
        proc.stop()
        if not gone(child):
            os.kill(child, signal.SIGKILL)
