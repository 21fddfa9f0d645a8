"""Real processes for multi-process tests and the demo: election participants (library and
``baton elect``), signals to kill or pause them, and the leader as the fenced log shows it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from baton.testing.fenced import Entry, FencedLog


class Proc:
    """A child process whose stdout goes to a file the test can read."""

    def __init__(
        self, name: str, argv: list[str], out: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.out = out
        self.stdout = out.open("wb")
        self.popen = subprocess.Popen(
            argv,
            stdout=self.stdout,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # so a signal aimed at it does not reach the test runner
        )

    def lines(self) -> list[str]:
        return self.out.read_text(errors="replace").splitlines()

    def said(self, prefix: str) -> str | None:
        return next((line for line in self.lines() if line.startswith(prefix)), None)

    def stacks(self, timeout: float = 5.0) -> str:
        """Every thread's stack of a running ``baton`` process (it writes them on SIGUSR1),
        as it wrote them to its output: what a test that timed out shows of a process that
        seemed stuck. Empty if the process is not running or wrote none in time."""
        if self.popen.poll() is not None:
            return ""
        start = self.out.stat().st_size
        self.signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "most recent call first" in self._output_since(start):
                time.sleep(0.2)  # the dump is written thread by thread: let it end
                return self._output_since(start)
            time.sleep(0.05)
        return ""

    def _output_since(self, offset: int) -> str:
        with self.out.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.signal(signal.SIGCONT)
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.stdout.close()


def participant(tmp: Path, url: str, node_id: str, log: Path, ttl: float) -> Proc:
    """A :mod:`baton.testing.participant` process (an :class:`Election` in a process)."""
    argv = [sys.executable, "-m", "baton.testing.participant", url, "lead", node_id, str(log)]
    return Proc(node_id, [*argv, str(ttl)], tmp / f"{node_id}.out")


def elect_proc(tmp: Path, url: str, node_id: str, log: Path, ttl: float) -> Proc:
    """``baton elect lead -- python -m baton.testing.worker LOG`` as participant ``node_id``."""
    baton = str(Path(sys.executable).with_name("baton"))
    argv = [baton, "elect", "lead", "--store", url, "--ttl", str(ttl), "--id", node_id, "--"]
    worker = [sys.executable, "-m", "baton.testing.worker", str(log)]
    return Proc(node_id, [*argv, *worker], tmp / f"{node_id}.out")


def latest(log: FencedLog) -> Entry | None:
    entries = log.entries()
    return entries[-1] if entries else None


def first_above(log: FencedLog, epoch: int) -> Entry | None:
    return next((e for e in log.entries() if e.epoch > epoch), None)


def last_of(log: FencedLog, epoch: int) -> Entry | None:
    mine = [e for e in log.entries() if e.epoch == epoch]
    return mine[-1] if mine else None


def now() -> float:
    return time.monotonic()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def java_of(pid: int) -> list[int]:
    """The JVMs (Spark drivers) started under ``pid``."""
    found = []
    for child in descendants(pid):
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "java":
                found.append(child)
        except OSError:
            continue
    return found
