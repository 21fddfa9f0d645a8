"""Supervised child processes: what ``baton up``'s local cluster runs its nodes with, and what the
test kit's servers, the Spark servers, the chaos cluster and the demo build on.

One class, :class:`Proc`: a child process with its output in a file, in a session of its own (a
signal aimed at the terminal's or the test runner's process group never reaches it), that can be
waited on until it is ready, paused and resumed, killed, stopped gracefully (then killed), and
started again with the same command, environment and log::

    redis = Proc("redis", ["redis-server", "--port", "6400"], tmp / "redis.out")
    redis.wait_ready(lambda: port_open(6400), timeout=10, what="redis-server to listen")
    redis.pause(); redis.resume(); redis.kill(); redis.start(); redis.stop()

``baton elect``'s guard supervises its command apart from this, on purpose: it runs in the process
that holds the lease, on its event loop, and must stop the command by the lease's deadline (see
:mod:`baton.lease.supervisor`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from baton.errors import ServerError
from baton.local.waiting import Falsy

T = TypeVar("T")


class Proc:
    """A supervised child process whose output (stdout and stderr) goes to the file ``out``.

    ``env`` is added to this process's environment. ``group``: signals (pause, resume, kill,
    stop) reach the child's whole process group, so whatever it started (a Spark JVM, Python
    workers) is paused with it; otherwise only the child itself. ``grace``: how long a graceful
    :meth:`stop` may take before the child is killed. ``start``: start it now (the default);
    otherwise at the first :meth:`start`.

    The first start writes a fresh ``out``; a later start (after an exit, a :meth:`kill` or a
    :meth:`stop`) appends to it, so the earlier runs stay readable.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        out: Path,
        env: Mapping[str, str] | None = None,
        *,
        cwd: Path | None = None,
        group: bool = False,
        grace: float = 10.0,
        start: bool = True,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.out = Path(out)
        self.env = dict(env or {})
        self.cwd = cwd
        self.group = group
        self.grace = grace
        #: Whether it was paused (SIGSTOP) and not resumed since: a paused process still runs.
        self.paused = False
        self._popen: subprocess.Popen[bytes] | None = None
        if start:
            self.start()

    # -- starting and waiting ------------------------------------------------------------------

    def start(self) -> Self:
        """Start the process, unless it runs now: a process that exited or was killed starts
        again, with the same command, environment and log."""
        if self.running:
            return self
        mode = "ab" if self._popen is not None else "wb"
        with self.out.open(mode) as out:  # the child keeps its own copy of the descriptor
            self._popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                cwd=self.cwd,
                start_new_session=True,
            )
        self.paused = False
        return self

    def wait_ready(
        self, ready: Callable[[], T | Falsy], timeout: float, what: str, interval: float = 0.02
    ) -> T:
        """Wait until ``ready()`` returns something truthy, and return it. When the process
        exits first, or ``timeout`` seconds pass, stop it and raise :class:`ServerError`
        naming its log. ``what`` says what is awaited ("redis-server to listen on ...")."""
        return wait_ready(ready, [self], timeout, what, interval)

    def restart(self) -> None:
        """:meth:`stop`, then :meth:`start` again."""
        self.stop()
        self.start()

    # -- what it is doing ----------------------------------------------------------------------

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        """The child of the latest start. :class:`ServerError` if it was never started."""
        if self._popen is None:
            raise ServerError(f"process {self.name} was never started")
        return self._popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def running(self) -> bool:
        """Started and not exited (a paused process runs)."""
        return self._popen is not None and self._popen.poll() is None

    def poll(self) -> int | None:
        """The exit status of the latest run (negative: the signal that ended it); None while
        it runs, or if it was never started."""
        return None if self._popen is None else self._popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the latest run to end and return its status (``subprocess.TimeoutExpired``
        after ``timeout`` seconds)."""
        return self.popen.wait(timeout)

    def lines(self) -> list[str]:
        """Its output so far, every run."""
        return self.out.read_text(errors="replace").splitlines()

    def said(self, prefix: str) -> str | None:
        """The first line of its output that starts with ``prefix``."""
        return next((line for line in self.lines() if line.startswith(prefix)), None)

    def stacks(self, timeout: float = 5.0) -> str:
        """Every thread's stack of a running ``baton`` process (it writes them on SIGUSR1),
        as it wrote them to its output: what a test that timed out shows of a process that
        seemed stuck. Empty if the process is not running or wrote none in time."""
        if not self.running:
            return ""
        start = self.out.stat().st_size
        self._send(signal.SIGUSR1, group=False)  # its group's JVM would die of a SIGUSR1
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

    # -- signals -------------------------------------------------------------------------------

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process (its group, with ``group``) if it runs. SIGSTOP and
        SIGCONT also set :attr:`paused`."""
        self._send(sig, group=self.group)
        if sig == signal.SIGSTOP:
            self.paused = True
        elif sig == signal.SIGCONT:
            self.paused = False

    def pause(self) -> None:
        """SIGSTOP: frozen, as in a long garbage-collection pause or a stalled VM."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL (a crash), and wait until it is gone. A paused process dies too: SIGKILL
        needs no SIGCONT, and sending one first would let it run a moment before it dies."""
        self._send(signal.SIGKILL, group=self.group)
        self.paused = False
        if self._popen is not None:
            self._popen.wait()

    def stop(self) -> None:
        """A graceful stop: SIGCONT (a paused process cannot act on what follows), SIGTERM,
        and SIGKILL after :attr:`grace` seconds; then SIGKILL whatever it started that outlived
        it (a JVM, Spark executors, Python workers), so that nothing of it is left running."""
        if not self.running:
            return
        left = _tree(self.pid)
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(self.grace)
        except subprocess.TimeoutExpired:
            self.kill()
        for pid, started in left:
            if _started(pid) == started:  # not a new process that was given a freed pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def _send(self, sig: int, group: bool) -> None:
        if not self.running:
            return
        with contextlib.suppress(ProcessLookupError):  # it ended since we looked
            if group:
                os.killpg(self.pid, sig)  # its own session: its group id is its pid
            else:
                os.kill(self.pid, sig)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"<Proc {self.name} {state}, output in {self.out}>"


def wait_ready(
    ready: Callable[[], T | Falsy],
    procs: Sequence[Proc],
    timeout: float,
    what: str,
    interval: float = 0.02,
) -> T:
    """Wait until ``ready()`` returns something truthy while every process of ``procs`` runs
    (a server and the workers it waits for, say), and return what it returned. When one of them
    exits first, or ``timeout`` seconds pass, stop them all and raise :class:`ServerError`
    naming their logs."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        ended = next((p for p in procs if not p.running), None)
        if ended is not None or time.monotonic() >= deadline:
            for proc in reversed(procs):
                proc.stop()
            if ended is not None:
                raise ServerError(
                    f"{ended.name} exited with status {ended.poll()} while waiting for {what}: "
                    f"see {ended.out}"
                )
            logs = ", ".join(str(p.out) for p in procs)
            raise ServerError(f"timed out after {timeout:g}s waiting for {what}: see {logs}")
        time.sleep(interval)


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
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
    return children


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children = _children()
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot), None if there is none: with the
    pid, what names one process for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _tree(pid: int) -> list[tuple[int, int]]:
    """The processes below ``pid``, each with its start time."""
    found = ((child, _started(child)) for child in descendants(pid))
    return [(child, started) for child, started in found if started is not None]


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
