"""The guard of ``baton elect``: runs COMMAND and stops it in time, whatever the supervisor does.

``baton elect`` (the supervisor) holds the lease and renews it. This guard is a separate process
that owns COMMAND (its parent) and knows only a deadline: the supervisor pushes a new one after
every successful renewal. The guard stops COMMAND

* at the deadline, if no newer one arrived (the supervisor is paused, or cannot renew),
* at once, when the supervisor's control pipe closes (the supervisor was killed), or
* when told to (leadership lost, or the supervisor is shutting down).

Stopping is SIGTERM to COMMAND's process group, then SIGKILL at the kill deadline, which the
supervisor sets well before the lease can expire at the store. COMMAND runs with
``PR_SET_PDEATHSIG = SIGKILL``, so even a SIGKILL of the guard itself takes COMMAND with it.

This file is executed directly by path (``python -I .../baton/lease/guard.py``) and imports only
the standard library, so it starts in tens of milliseconds and cannot be broken by the rest of
baton (a test checks it).

Protocol, one line per message. Supervisor to guard (control fd)::

    D <term_at> <kill_at>      monotonic deadlines (CLOCK_MONOTONIC is shared by all processes)
    STOP                       stop COMMAND now (SIGTERM, SIGKILL at kill_at or after grace)

Guard to supervisor (report fd)::

    STARTED <pid>
    EXIT <status> <why>        status as a shell reports it (128+signal when killed)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import sys
import time

PR_SET_PDEATHSIG = 1


def _log_line(message: str, **fields: str) -> str:
    """An error line of ``baton elect`` in the format its logs use (``baton.logs``; the guard
    imports only the standard library, so it writes the line itself): key=value, or one JSON
    object when ``BATON_LOG_FORMAT`` is ``json``."""
    now = time.time()
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
    doc = {"ts": ts, "level": "error", "logger": "baton.elect", "msg": message, **fields}
    if os.environ.get("BATON_LOG_FORMAT") == "json":
        return json.dumps(doc, ensure_ascii=False)
    special = set(' "=\n')
    parts = (f"{k}={json.dumps(v) if not v or special & set(v) else v}" for k, v in doc.items())
    return " ".join(parts)


#: How long a STOP or a lost supervisor gives COMMAND between SIGTERM and SIGKILL, at most.
STOP_GRACE = 5.0


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _status(raw: int) -> int:
    return os.waitstatus_to_exitcode(raw) if raw >= 0 else 1


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


class Guard:
    def __init__(self, control_fd: int, report_fd: int, argv: list[str]) -> None:
        self.control = control_fd
        self.report = report_fd
        self.argv = argv
        self.term_at = 0.0
        self.kill_at = 0.0
        self.pid = 0
        self.buf = b""
        self.stopping_since: float | None = None
        self.why = ""

    def send(self, line: str) -> None:
        with contextlib.suppress(OSError):  # the supervisor may be gone: we still do our job
            os.write(self.report, (line + "\n").encode())

    def read_lines(self) -> list[str] | None:
        """Read what the supervisor sent; None when its end of the pipe is closed."""
        try:
            chunk = os.read(self.control, 4096)
        except BlockingIOError:
            return []
        if not chunk:
            return None
        self.buf += chunk
        *lines, rest = self.buf.split(b"\n")
        self.buf = rest
        return [line.decode() for line in lines]

    def handle(self, line: str) -> None:
        parts = line.split()
        if parts and parts[0] == "D" and len(parts) == 3:
            self.term_at, self.kill_at = float(parts[1]), float(parts[2])
        elif parts == ["STOP"]:
            self.begin_stop("told to stop")

    def begin_stop(self, why: str) -> None:
        if self.stopping_since is not None:
            return
        self.why = why
        now = time.monotonic()
        self.stopping_since = now
        # Never later than the supervisor's kill deadline; with a lost supervisor, no later
        # than STOP_GRACE either.
        self.kill_at = min(self.kill_at, now + STOP_GRACE) if self.kill_at else now + STOP_GRACE
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)

    def run(self) -> int:
        # The first deadline arrives before COMMAND may start.
        while self.term_at == 0.0:
            ready, _, _ = select.select([self.control], [], [], 5.0)
            lines = self.read_lines() if ready else []
            if lines is None or not ready:
                return 1
            for line in lines:
                self.handle(line)
        if time.monotonic() >= self.term_at:
            self.send("EXIT 1 deadline passed before start")
            return 1
        try:
            self.pid = os.fork()
        except OSError as exc:
            self.send(f"EXIT 1 cannot fork: {exc}")
            return 1
        if self.pid == 0:  # the child: become COMMAND
            try:
                os.setsid()
                _die_with_parent()
                signal.signal(signal.SIGINT, signal.SIG_DFL)  # ignored dispositions survive exec
                os.execvp(self.argv[0], self.argv)
            except OSError as exc:
                said = _log_line(
                    "cannot run the command", command=self.argv[0], error=exc.strerror or str(exc)
                )
                os.write(2, f"{said}\n".encode())
                os._exit(127)
        self.send(f"STARTED {self.pid}")
        os.set_blocking(self.control, False)
        control_open = True
        while True:
            pid, raw = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                code = _exit_code(_status(raw))
                self.send(f"EXIT {code} {self.why or 'exited'}")
                return 0
            now = time.monotonic()
            if self.stopping_since is None and now >= self.term_at:
                self.begin_stop("renew deadline passed")
            if self.stopping_since is not None and now >= self.kill_at:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
            timeout = (
                0.01 if self.stopping_since is not None else min(0.05, max(0.0, self.term_at - now))
            )
            fds = [self.control] if control_open else []
            ready, _, _ = select.select(fds, [], [], timeout)
            if ready:
                lines = self.read_lines()
                if lines is None:
                    control_open = False
                    self.begin_stop("supervisor gone")
                else:
                    for line in lines:
                        self.handle(line)


def main() -> int:
    # Ignore the terminal's Ctrl-C: the supervisor decides, and tells us (or dies: EOF).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    control_fd, report_fd = int(sys.argv[1]), int(sys.argv[2])
    return Guard(control_fd, report_fd, sys.argv[3:]).run()


if __name__ == "__main__":
    sys.exit(main())
