"""Child processes with their output in a file, and the processes below one: what ``baton up``
runs its nodes with, and what the test kit, the chaos cluster and the demo build on."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


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
