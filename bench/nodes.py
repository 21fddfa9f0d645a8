"""Benchmarks 5 and 6: the node agent (``baton node`` processes of a
:class:`~baton.local.cluster.LocalCluster`).

**takeover**: N nodes (ttl 2 s). A trial waits until a controller is elected and every node is
live, waits a random 0-1 s (a random point of the controller's renewal cycle), then either
SIGKILLs the controller (``kill``: its lease must expire) or SIGTERMs it (``terminate``: a
graceful stop, which releases its leases), and measures from the signal until a surviving node's
``/v1/status`` reports a controller with a higher epoch (polled every 20 ms). The stopped node is
then restarted and the next trial waits until all N nodes are live again. Kills and graceful
stops alternate.

**idle**: one node on SQLite, left alone; its CPU (``utime + stime`` from ``/proc/PID/stat``)
over a window, as a percentage of one core, and its RSS (``VmRSS``). Then, if ``baton.lease.keeper``
exists, the same for a ``bench.lease_holder`` process (a LeaseKeeper on its own SQLite store)
holding no lease and HELD_LEASES leases (ttl 10 s, renewed in one call every 2 s).
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from baton.local.cluster import LocalCluster, LocalNode
from baton.local.processes import Proc
from bench.common import REPO, BenchError, Summary, backend_url, loadavg, poll, temp_dir

#: The lease ttl of every node (seconds).
TTL = 2.0
#: Cluster sizes of the takeover benchmark.
SIZES: tuple[int, ...] = (3, 5)
#: How the controller is stopped: SIGKILL, or SIGTERM (graceful, releases its leases).
KINDS: tuple[str, ...] = ("kill", "terminate")
#: The signal comes a random 0..JITTER seconds after the cluster is ready.
JITTER = 1.0
#: Interval between two ``/v1/status`` polls of the surviving node (seconds).
POLL = 0.02
#: Idle benchmark: let the node settle this long, then measure over WINDOW seconds.
SETTLE = 5.0
WINDOW = 20.0
QUICK_WINDOW = 10.0
#: Leases held by the LeaseKeeper process of the idle benchmark, and their ttl (seconds).
HELD_LEASES = 10_000
HOLDER_TTL = 10.0

_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class TakeoverResult:
    """The trials of one kind (``kill``/``terminate``) on one cluster size and backend."""

    backend: str
    nodes: int
    kind: str
    ttl: float
    samples: list[float] = field(default_factory=list)
    #: Seconds from a restart until all nodes were live again.
    recover: list[float] = field(default_factory=list)
    #: Duration of each ``/v1/status`` poll (the measurement's resolution is POLL + this).
    polls: list[float] = field(default_factory=list)
    setup: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def summary(self) -> Summary:
        return Summary.of(self.samples)


@dataclass
class IdleResult:
    """Idle cost of one process."""

    what: str
    leases: int
    window: float
    cpu_percent: float
    rss_mib: float
    rss_max_mib: float
    load: tuple[float, float] = (0.0, 0.0)
    note: str = ""


# -- takeover ---------------------------------------------------------------------------------


def _ready(cluster: LocalCluster, n: int) -> tuple[str, int] | None:
    """(controller id, epoch) once a controller exists and all ``n`` nodes are live."""
    if not all(node.running for node in cluster.nodes.values()):
        return None
    st = cluster.status()
    if st is None or st["controller"] is None:
        return None
    states = [x["state"] for x in st["nodes"]]
    if len(states) != n or any(s != "live" for s in states):
        return None
    return st["controller"]["id"], st["controller"]["epoch"]


def _wait_ready(cluster: LocalCluster, n: int, timeout: float = 30.0) -> tuple[str, int]:
    deadline = time.monotonic() + timeout
    while (ready := _ready(cluster, n)) is None:
        if time.monotonic() >= deadline:
            raise BenchError(f"{n} nodes not all live with a controller after {timeout:g} s")
        time.sleep(0.05)
    return ready


def _wait_newer(
    survivor: LocalNode, epoch: int, start: float, polls: list[float], timeout: float
) -> float:
    """Seconds from ``start`` until ``survivor`` reports a controller above ``epoch``."""
    while True:
        before = time.monotonic()
        st = survivor.status()
        now = time.monotonic()
        polls.append(now - before)
        ctl = st and st["controller"]
        if ctl and ctl["epoch"] > epoch:
            return now - start
        if now - start > timeout:
            raise BenchError(f"no controller above epoch {epoch} after {timeout:g} s")
        time.sleep(POLL)


def _cluster_trials(
    backend: str, n: int, trials: int, say: Callable[[str], None]
) -> list[TakeoverResult]:
    results = {k: TakeoverResult(backend, n, k, TTL) for k in KINDS}
    load0 = loadavg()
    with (
        temp_dir(f"takeover-{backend}-{n}") as tmp,
        backend_url(backend, tmp, f"takeover{n}") as url,
        LocalCluster(n, store_url=url, data_dir=tmp / "cluster", ttl=TTL) as cluster,
    ):
        started = time.monotonic()
        _wait_ready(cluster, n)
        setup = time.monotonic() - started
        for i in range(trials * len(KINDS)):
            res = results[KINDS[i % len(KINDS)]]
            time.sleep(random.uniform(0, JITTER))
            ctl, epoch = _wait_ready(cluster, n)
            survivor = next(x for x in cluster.nodes.values() if x.id != ctl)
            start = time.monotonic()
            if res.kind == "kill":
                cluster.kill(ctl)
            else:
                cluster.terminate(ctl)
            took = _wait_newer(survivor, epoch, start, res.polls, timeout=TTL * 5)
            res.samples.append(took)
            restarted = time.monotonic()
            cluster.restart(ctl)
            _wait_ready(cluster, n)
            res.recover.append(time.monotonic() - restarted)
            say(f"{backend} n={n} {res.kind} #{len(res.samples)}: {took:.3f} s")
    for res in results.values():
        res.setup = setup
        res.load = (load0, loadavg())
    return list(results.values())


def takeover(
    backend: str, sizes: Sequence[int], trials: int, say: Callable[[str], None]
) -> list[TakeoverResult]:
    """Controller takeover on ``backend`` for each cluster size, ``trials`` per kind."""
    out: list[TakeoverResult] = []
    for n in sizes:
        out.extend(_cluster_trials(backend, n, trials, say))
    return out


# -- idle -------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def rss_mib(pid: int) -> float:
    """``VmRSS`` of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"no VmRSS for pid {pid}")


def measure_idle(pid: int, what: str, leases: int, window: float) -> IdleResult:
    """CPU (as % of one core) and RSS of ``pid`` over ``window`` seconds."""
    load0 = loadavg()
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    peak = rss_mib(pid)
    while time.monotonic() - t0 < window:
        time.sleep(min(1.0, window - (time.monotonic() - t0)) if window > 0 else 0)
        peak = max(peak, rss_mib(pid))
    cpu1, t1 = cpu_seconds(pid), time.monotonic()
    return IdleResult(
        what=what,
        leases=leases,
        window=t1 - t0,
        cpu_percent=(cpu1 - cpu0) / (t1 - t0) * 100,
        rss_mib=rss_mib(pid),
        rss_max_mib=peak,
        load=(load0, loadavg()),
    )


def keeper_available() -> bool:
    """Whether ``baton.lease.keeper`` (LeaseKeeper) exists in this checkout."""
    return importlib.util.find_spec("baton.lease.keeper") is not None


def _holder_idle(tmp: Path, n: int, window: float, say: Callable[[str], None]) -> IdleResult:
    """A ``bench.lease_holder`` process holding ``n`` leases on its own SQLite store."""
    url = f"sqlite://{tmp / f'holder-{n}.db'}"
    argv = [sys.executable, "-m", "bench.lease_holder", url, str(n), str(HOLDER_TTL)]
    env = {"PYTHONPATH": str(REPO)}
    proc = Proc(f"holder-{n}", argv, tmp / f"holder-{n}.out", env=env)
    try:
        started = time.monotonic()
        ready = poll(lambda: proc.said("ready "), 180, f"{n} leases acquired", 0.1)
        setup = time.monotonic() - started
        if int(ready.split()[1]) != n:
            raise BenchError(f"lease holder acquired {ready.split()[1]} of {n} leases")
        time.sleep(SETTLE)
        say(f"measuring the lease holder with {n:,} leases (pid {proc.popen.pid}) for {window:g} s")
        res = measure_idle(proc.popen.pid, "`bench.lease_holder` (LeaseKeeper, SQLite)", n, window)
    finally:
        proc.stop()
    done = proc.said("done ") or "done (no report)"
    res.note = f"{n:,} leases acquired in {setup:.1f} s (process start included); on exit: {done}"
    if "lost=0" not in done:
        raise BenchError(f"lease holder with {n} leases: {done}")
    return res


def idle(quick: bool, say: Callable[[str], None]) -> list[IdleResult]:
    """One ``baton node`` on SQLite, idle; then, if ``baton.lease.keeper`` exists, a LeaseKeeper
    process holding 0 and HELD_LEASES leases."""
    window = QUICK_WINDOW if quick else WINDOW
    out: list[IdleResult] = []
    with temp_dir("idle") as tmp:
        with LocalCluster(1, data_dir=tmp / "cluster", ttl=TTL) as cluster:
            _wait_ready(cluster, 1)
            node = cluster.node("n0")
            assert node.proc is not None
            time.sleep(SETTLE)
            say(f"measuring the idle node (pid {node.proc.popen.pid}) for {window:g} s")
            pid = node.proc.popen.pid
            out.append(measure_idle(pid, "`baton node` (1 node, SQLite)", 0, window))
            if not node.running:
                raise BenchError("the node exited during the measurement")
        if not keeper_available():
            say("baton.lease.keeper does not exist: skipping the lease holder")
            return out
        for n in (0, HELD_LEASES):
            out.append(_holder_idle(tmp, n, window, say))
    return out
