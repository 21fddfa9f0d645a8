"""The supervisor of ``baton elect``: run COMMAND only while holding leadership of a lease.

It campaigns for the lease and renews it. When it leads, it starts the guard
(:mod:`baton.lease.guard`, a separate process), which starts COMMAND and stops it at the renew
deadline unless the supervisor pushes a newer one after each renewal. So COMMAND has stopped
before the lease can expire at the store even if this process is paused (SIGSTOP) or killed
(SIGKILL).

COMMAND gets ``BATON_EPOCH``, ``BATON_LEASE`` and ``BATON_HOLDER`` in its environment. How the
run ended is an :class:`Outcome`; the CLI (:mod:`baton.cli.elect`) turns it into an exit status
and handles the signals, and what happens along the way is told to a ``say`` callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from baton.errors import ConfigError, LeaseLost
from baton.lease.election import Election
from baton.lease.timings import Timings
from baton.logs import describe
from baton.store import connect_waiting, open_store

#: Run by path with ``python -I``: it must not import the rest of baton (see its docstring).
GUARD = str(Path(__file__).resolve().parent / "guard.py")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a supervised run ended.

    - ``exited``: COMMAND exited by itself with ``status``; the lease was released.
    - ``lost``: leadership was lost, or could not be renewed in time, and COMMAND was stopped
      (``status`` is how it ended).
    - ``stopped``: the caller's ``stop`` event was set; COMMAND, if it ran, was stopped and
      the lease released.
    """

    how: Literal["exited", "lost", "stopped"]
    #: COMMAND's exit status as a shell reports it (128 + signal when killed); 0 if it never ran.
    status: int = 0


@dataclass
class GuardExit:
    code: int
    why: str


class GuardProcess:
    """The supervisor's handle on the guard: push deadlines, ask it to stop, learn the exit."""

    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.control = -1
        self.reports = asyncio.StreamReader()
        self.pid: int | None = None
        self._last: tuple[float, float] = (0.0, 0.0)
        self._exit: asyncio.Future[GuardExit] | None = None

    async def start(
        self, argv: list[str], env: dict[str, str], term_at: float, kill_at: float
    ) -> None:
        control_r, control_w = os.pipe()
        report_r, report_w = os.pipe()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-I", GUARD, str(control_r), str(report_w), *argv,
                pass_fds=(control_r, report_w),
                env=env,
            )  # fmt: skip
        finally:
            os.close(control_r)
            os.close(report_w)
        self.control = control_w
        loop = asyncio.get_running_loop()
        protocol = asyncio.StreamReaderProtocol(self.reports)
        await loop.connect_read_pipe(lambda: protocol, os.fdopen(report_r, "rb"))
        self._exit = asyncio.ensure_future(self._read_reports())
        self.push(term_at, kill_at)

    def _write(self, line: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.control, line.encode())

    def push(self, term_at: float, kill_at: float) -> None:
        if (term_at, kill_at) != self._last:
            self._last = (term_at, kill_at)
            self._write(f"D {term_at:.6f} {kill_at:.6f}\n")

    def stop(self) -> None:
        self._write("STOP\n")

    async def wait_exit(self) -> GuardExit:
        """COMMAND's exit. Safe to await from several places, and cancellable by the caller
        without losing the report."""
        if self._exit is None:
            return GuardExit(0, "not started")
        return await asyncio.shield(self._exit)

    async def _read_reports(self) -> GuardExit:
        """Read reports until COMMAND's exit (EOF without a report counts as a failure)."""
        while True:
            line = (await self.reports.readline()).decode().strip()
            if not line:
                return GuardExit(1, "guard ended without a report")
            kind, _, rest = line.partition(" ")
            if kind == "STARTED":
                self.pid = int(rest)
            elif kind == "EXIT":
                code, _, why = rest.partition(" ")
                return GuardExit(int(code), why)

    async def close(self) -> None:
        if self.control >= 0:
            os.close(self.control)
            self.control = -1
        if self.proc is not None:
            await self.proc.wait()


def check_command(argv: list[str]) -> None:
    """Refuse (:class:`ConfigError`) a COMMAND that is missing or not on PATH."""
    if not argv:
        raise ConfigError("no COMMAND given: use baton elect NAME --store URL -- COMMAND [ARGS]")
    if shutil.which(argv[0]) is None:
        raise ConfigError(f"command {argv[0]!r} not found on PATH: give a path or install it")


class Say(Protocol):
    """Where :func:`supervise` tells what happens: a short message, whether it is a warning,
    and its fields (lease, epoch, command, status, ...)."""

    def __call__(self, message: str, warn: bool = False, **fields: object) -> None: ...


def _silent(message: str, warn: bool = False, **fields: object) -> None:
    pass


async def supervise(
    store_url: str,
    name: str,
    holder: str,
    timings: Timings,
    argv: list[str],
    *,
    stop: asyncio.Event,
    say: Say = _silent,
) -> Outcome:
    """Campaign for lease ``name`` on the store at ``store_url`` as ``holder`` and run
    ``argv`` while leader, until it exits, leadership is lost or ``stop`` is set. Raises
    :class:`ConfigError` for a bad command or URL and :class:`~baton.errors.StoreError` when
    the store cannot be used."""
    check_command(argv)
    store = open_store(store_url)
    await connect_waiting(
        store, say=lambda exc: say("waiting for the store", warn=True, error=describe(exc))
    )
    election = Election(store, name, holder, timings)
    try:
        await election.start()
        say("campaigning", lease=name, holder=holder, store=store.url)
        return await _lead(election, timings, argv, stop, say)
    finally:
        await election.stop()
        await store.close()


async def _first(*aws: asyncio.Future[object] | asyncio.Task[object]) -> None:
    done, pending = await asyncio.wait(aws, return_when=asyncio.FIRST_COMPLETED)
    for p in pending:
        p.cancel()
    for d in done:
        if not d.cancelled() and d.exception() is not None:
            raise d.exception()  # type: ignore[misc]


async def _lead(
    election: Election,
    timings: Timings,
    argv: list[str],
    stop: asyncio.Event,
    say: Say,
) -> Outcome:
    lead = asyncio.ensure_future(election.wait_leadership())
    await _first(lead, asyncio.ensure_future(stop.wait()))
    if stop.is_set():
        return Outcome("stopped")
    half_margin = timings.stop_margin / 2

    def deadlines() -> tuple[float, float]:
        term_at = election.valid_until
        return term_at, term_at + half_margin

    guard = GuardProcess()
    epoch: int | None = None
    try:
        async with election.leadership() as term:
            epoch = term.epoch
            env = dict(os.environ)
            env.update(BATON_EPOCH=str(term.epoch), BATON_LEASE=term.name, BATON_HOLDER=term.holder)
            say("leader: starting the command", lease=term.name, epoch=term.epoch, command=argv[0])
            await guard.start(argv, env, *deadlines())
            exited = asyncio.ensure_future(guard.wait_exit())
            stopping = asyncio.ensure_future(stop.wait())
            while not exited.done() and not stopping.done():
                guard.push(*deadlines())
                await asyncio.wait(
                    [exited, stopping], timeout=timings.renew_interval / 4,
                    return_when=asyncio.FIRST_COMPLETED,
                )  # fmt: skip
            if exited.done():
                result = exited.result()
                if result.why != "exited":
                    # The guard stopped it (this process was paused past the renew deadline):
                    # leadership is over whatever the election has noticed so far.
                    say(
                        "leadership lost: the command was stopped", warn=True,
                        lease=election.name, epoch=term.epoch, command=argv[0],
                        stopped=result.why, status=result.code,
                    )  # fmt: skip
                    return Outcome("lost", result.code)
                say("the command exited; resigning", lease=term.name, epoch=term.epoch,
                    command=argv[0], status=result.code)  # fmt: skip
                await election.resign()
                return Outcome("exited", result.code)
            guard.stop()
            result = await exited
            say("the command was stopped as asked; resigning", lease=term.name,
                epoch=term.epoch, command=argv[0], status=result.code)  # fmt: skip
            await election.resign()
            return Outcome("stopped", result.code)
    except LeaseLost as exc:
        guard.stop()
        result = await guard.wait_exit()
        say(
            "leadership lost: the command was stopped", warn=True, lease=election.name,
            epoch=epoch, reason=exc.reason.value, command=argv[0], stopped=result.why,
            status=result.code,
        )  # fmt: skip
        return Outcome("lost", result.code)
    finally:
        await guard.close()
