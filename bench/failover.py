"""Benchmarks 1 and 2: unplanned failover, baton on each backend and etcd's election API.

Three participant processes campaign for one lease and the leader appends to a shared
:class:`~baton.testing.fenced.FencedLog` every 20 ms. A trial waits for a leader that is
writing, SIGKILLs it after a random 0-1 s (a random point of its renewal cycle), and measures
from the kill to the first log entry with a higher epoch (a new leader *acting*: its ``at`` is
the writer's ``time.monotonic()``, the same clock as the kill's). Then a replacement process is
started and the next trial waits until it is campaigning, so that every kill happens with three
participants.
"""

from __future__ import annotations

import functools
import itertools
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from baton.local.processes import Proc
from baton.testing.fenced import FencedLog
from baton.testing.servers import EtcdServer
from bench.common import REPO, BenchError, LogReader, Summary, backend_url, loadavg, poll, temp_dir

#: The lease ttl of every participant (seconds).
TTL = 2.0
#: Participants campaigning at every kill.
PARTICIPANTS = 3
#: A leader counts as "writing" when its last entry is at most this old (it appends every 20 ms).
WRITING_WITHIN = 0.1
#: The kill comes a random 0..KILL_JITTER seconds after the leader is found writing, so that it
#: lands at a random point of the renewal cycle (baton renews every 0.4 s, etcd every 0.5 s)
#: rather than at a fixed delay after the previous failover.
KILL_JITTER = 1.0


@dataclass
class FailoverResult:
    """The trials of one system (``baton/redis``, ``etcd`` ...)."""

    system: str
    ttl: float
    samples: list[float] = field(default_factory=list)
    discarded: int = 0
    entries: int = 0
    refused: int = 0
    safety: str = "not checked"
    setup: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def summary(self) -> Summary:
        return Summary.of(self.samples)


def kill_loop(
    system: str,
    tmp: Path,
    *,
    argv_for: Callable[[str, Path], list[str]],
    trials: int,
    ready: Callable[[Proc], bool],
    progress: Callable[[str], None],
) -> FailoverResult:
    """Run ``trials`` kill-and-measure trials with participants started by ``argv_for``."""
    result = FailoverResult(system, TTL)
    rng = random.Random(system)  # reproducible kill delays
    log_path = tmp / "fenced.db"
    log = FencedLog(log_path)
    reader = LogReader(log_path)
    procs: dict[str, Proc] = {}
    ids = (f"p{i}" for i in itertools.count(1))
    env = {"PYTHONPATH": str(REPO)}

    def spawn() -> Proc:
        node = next(ids)
        proc = Proc(node, argv_for(node, log_path), tmp / f"{node}.out", env=env)
        procs[node] = proc
        return proc

    def wait_ready(proc: Proc) -> None:
        try:
            poll(lambda: ready(proc), 30.0, f"{system} participant {proc.name} to campaign", 0.005)
        except BenchError:
            raise BenchError(
                f"{system} participant {proc.name} did not start campaigning; its output:\n"
                + "\n".join(proc.lines()[-20:])
            ) from None

    def leader_writing() -> tuple[Proc, int] | None:
        entry = reader.latest()
        if entry is None or entry.writer not in procs:
            return None
        if time.monotonic() - entry.at > WRITING_WITHIN:
            return None
        return procs[entry.writer], entry.epoch

    result.load = (loadavg(), 0.0)
    started = time.monotonic()
    try:
        for _ in range(PARTICIPANTS):
            spawn()
        for proc in list(procs.values()):
            wait_ready(proc)
        result.setup = time.monotonic() - started
        trial = 0
        while trial < trials:
            victim, epoch = poll(leader_writing, 3 * TTL + 10, f"a {system} leader writing", 0.005)
            time.sleep(rng.uniform(0, KILL_JITTER))
            if leader_writing() != (victim, epoch):
                continue  # leadership moved meanwhile (should not happen): pick again
            killed_at = time.monotonic()
            victim.kill()
            new = poll(
                functools.partial(reader.first_above, epoch),
                5 * TTL + 10,
                f"a new {system} leader after killing {victim.name}",
                0.005,
            )
            victim.popen.wait()
            victim.stop()
            del procs[victim.name]
            if new.at <= killed_at:
                # Leadership moved between our read and the kill: not a failover we caused.
                result.discarded += 1
            else:
                result.samples.append(new.at - killed_at)
                trial += 1
                progress(
                    f"  {system} trial {trial}/{trials}: {victim.name} killed, {new.writer} "
                    f"acting after {new.at - killed_at:.3f} s"
                )
            wait_ready(spawn())
    finally:
        for proc in procs.values():
            proc.stop()
        result.load = (result.load[0], loadavg())
        reader.close()
    result.entries = len(log.entries())
    result.refused = len(log.refused())
    try:
        log.check()
        result.safety = "ok"
    except AssertionError as exc:
        result.safety = f"VIOLATED: {exc}"
    return result


def baton_failover(backend: str, trials: int, progress: Callable[[str], None]) -> FailoverResult:
    """Benchmark 1 on one backend (fresh server, fresh namespace)."""
    with temp_dir(f"failover-{backend}") as tmp, backend_url(backend, tmp, "failover") as url:

        def argv(node: str, log_path: Path) -> list[str]:
            return [
                sys.executable, "-m", "bench.baton_participant",
                url, "lead", node, str(log_path), str(TTL),
            ]  # fmt: skip

        def ready(proc: Proc) -> bool:
            return proc.popen.poll() is None and proc.said("sees-leader") is not None

        return kill_loop(
            f"baton/{backend}", tmp, argv_for=argv, trials=trials, ready=ready, progress=progress
        )


def etcd_failover(trials: int, progress: Callable[[str], None]) -> FailoverResult:
    """Benchmark 2: the same loop with etcd's election API (one-node etcd)."""
    with temp_dir("failover-etcd") as tmp, EtcdServer(tmp / "etcd") as etcd:

        def argv(node: str, log_path: Path) -> list[str]:
            return [
                sys.executable, "-m", "bench.etcd_participant",
                etcd.url, "lead", node, str(log_path), str(TTL),
            ]  # fmt: skip

        def ready(proc: Proc) -> bool:
            return proc.popen.poll() is None and proc.said("campaigning") is not None

        return kill_loop("etcd", tmp, argv_for=argv, trials=trials, ready=ready, progress=progress)
