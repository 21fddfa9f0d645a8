"""Standby takeover: how soon a branch's standby applies after the process serving the branch
is lost, with a warm standby (``baton cascade run --standby warm``, the default) and a cold
one (``--standby cold``: its JVM only), in both worker modes.

One trial: root s1 served by one ``baton cascade run`` process, branch s2 by two (the leader
and its standby, ``--ttl 2``), a writer committing at the root; once s2 applies, its leader
is SIGKILLed (with its JVM) or SIGSTOPped (its lease then runs out while it is frozen); the
time from that signal to the first event s2 applies after it is the takeover. Every trial
then checks that s2 equals s1 and that every event was copied exactly once.

    .venv/bin/python -m bench.standby [--trials 3]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from baton.cascade.db import open_node_db
from baton.local.processes import Proc, descendants
from baton.local.waiting import wait_for
from baton.service.mode import MODES
from baton.testing.cascade import root_and_branch, root_ticked
from baton.testing.spark_servers import StandaloneCluster
from baton.testing.workload import Writer
from bench.common import quantile

BATON = str(Path(sys.executable).with_name("baton"))
TTL = 2.0
SERVING = 'msg="serving cascade node"'
#: Seconds over which the standby's CPU use is measured.
COST_WINDOW = 5.0


def _built(line: str) -> bool:
    """A ``spark ready`` line that took a second or more: a session built, not reused."""
    found = re.search(r'msg="spark ready" .*seconds=([0-9.]+)', line)
    return found is not None and float(found[1]) >= 1.0


@dataclass(frozen=True)
class Takeover:
    """One trial's outcome."""

    seconds: float
    """From the signal to the first event the standby applied."""
    warm_log: bool
    """The standby said ``spark warm`` before it served."""
    built_spark_after: bool
    """The standby started a Spark session after it took the node over (a cold start)."""
    standby_rss_mb: float
    """The standby's processes' resident memory while it stood by (driver, JVM, Python
    workers)."""
    standby_processes: int
    """How many processes the standby was made of."""
    standby_cpu_percent: float
    """The standby's CPU use while it stood by, in percent of one core."""


def _epoch(location: str) -> int:
    """The epoch of the worker that applied at the node last."""
    with open_node_db(location, readonly=True) as db:
        return db.state().epoch


def _tree_usage(pid: int) -> tuple[int, float, int]:
    """(resident bytes, CPU seconds used so far, processes) of ``pid`` and its descendants."""
    rss, cpu, count = 0, 0.0, 0
    tick = os.sysconf("SC_CLK_TCK")
    for p in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            statm = Path(f"/proc/{p}/statm").read_text().split()
        except OSError:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
        rss += int(statm[1]) * os.sysconf("SC_PAGE_SIZE")
        count += 1
    return rss, cpu, count


def _signal_all(proc: Proc, sig: int) -> None:
    """``sig`` to ``proc`` and every process below it. Its process group is not enough:
    Spark's Python workers run in groups of their own, and a low-latency worker's task (a
    Python worker) would go on applying while its driver is frozen."""
    pid = proc.pid
    assert pid is not None
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)
    if sig == signal.SIGKILL:
        proc.kill()  # reaped, and marked as not running
    else:
        proc.paused = True


def takeover_trial(
    directory: Path,
    standby: str,
    sig: int = signal.SIGKILL,
    mode: str = "micro-batch",
    cost_window: float = COST_WINDOW,
    *,
    master: str = "local[2]",
) -> Takeover:
    """Run one trial in ``directory`` (see the module docstring); raises when s2 does not
    apply again or differs from s1 afterwards. ``cost_window``: seconds over which the
    standby's CPU use is measured."""
    loc = root_and_branch(directory)
    store = f"sqlite://{directory / 'store.db'}"

    def run(name: str, location: str) -> Proc:
        argv = [BATON, "cascade", "run", location, "--store", store, "--ttl", f"{TTL:g}",
                "--spark-dir", str(directory / f"spark-{name}"), "--standby", standby,
                "--spark-master", master, "--mode", mode]  # fmt: skip
        if master.startswith("spark://"):
            # Two applications share the cluster: each takes two cores at most.
            argv += ["--spark-conf", "spark.cores.max=2"]
        return Proc(name, argv, directory / f"{name}.log", group=True)

    def applied() -> int:
        with open_node_db(loc["s2"]) as db:
            return db.state().position

    procs = {"s1": run("s1", loc["s1"])}
    procs |= {n: run(n, loc["s2"]) for n in ("a", "b")}
    writer = Writer(directory / "s1.db", transactions=15)
    try:
        # Both s2 processes ready (warm, or their JVM up) and one of them serving.
        ready = "campaigning for the node's lease"
        wait_for(lambda: all(any(ready in x for x in procs[n].lines()) for n in "ab"),
                 timeout=180, what="both s2 processes campaigning")  # fmt: skip
        wait_for(lambda: applied() > 1, timeout=120, what="the first batch at s2")
        writer.start()
        leader = wait_for(
            lambda: next((n for n in "ab" if any(SERVING in x for x in procs[n].lines())), None),
            timeout=60,
            what="s2's leader",
        )
        other = "b" if leader == "a" else "a"
        wait_for(lambda: applied() > 3, timeout=60, what="batches at s2")
        # What standing by costs: the standby's memory, and its CPU over a few seconds.
        pid = procs[other].pid
        assert pid is not None
        _, cpu_before, _ = _tree_usage(pid)
        time.sleep(cost_window)
        rss, cpu_after, count = _tree_usage(pid)
        signalled = time.monotonic()
        _signal_all(procs[leader], sig)
        # Read once every process of the leader is stopped or gone: a batch it committed
        # while the signal was on its way is not the standby's.
        before = applied()
        # A batch the standby applied carries its newer epoch: on a standalone cluster the
        # lost driver's executors are the cluster's processes, not its own, and a batch they
        # were applying may still commit at the old epoch.
        epoch = _epoch(loc["s2"])
        wait_for(lambda: applied() > before and _epoch(loc["s2"]) > epoch, timeout=120,
                 interval=0.02, what="the standby")  # fmt: skip
        took = time.monotonic() - signalled
        lines = procs[other].lines()
        served_at = next(i for i, x in enumerate(lines) if SERVING in x)
        outcome = Takeover(
            seconds=round(took, 2),
            warm_log=any('msg="spark warm"' in x for x in lines[:served_at]),
            built_spark_after=any(_built(x) for x in lines[served_at:]),
            standby_rss_mb=round(rss / 2**20, 1),
            standby_processes=count,
            standby_cpu_percent=round(100 * (cpu_after - cpu_before) / cost_window, 1),
        )
        writer.stop()
        last = root_ticked(loc["s1"])
        wait_for(lambda: applied() >= last, timeout=120, what="s2 to catch up")
        with open_node_db(loc["s1"]) as root, open_node_db(loc["s2"]) as branch:
            if branch.read_rows("accounts") != root.read_rows("accounts"):
                raise AssertionError("s2 differs from s1 after the takeover")
            root_ids = [e.ev_id for e in root.batch_events(1, last)]
            copied = [e.ev_id for e in branch.batch_events(1, last)]
        if copied != root_ids or len(copied) != len(set(copied)):
            raise AssertionError("an event was lost or copied twice in the takeover")
        return outcome
    finally:
        writer.stop()
        for p in procs.values():
            if p.paused:
                p.kill()
            p.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--mode", action="append", choices=MODES, help="(repeatable)")
    parser.add_argument(
        "--signal", action="append", choices=("KILL", "STOP"), help="(repeatable; default both)"
    )
    parser.add_argument("--standby", action="append", choices=("warm", "cold"), help="(repeatable)")
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="on a Spark standalone cluster (a master and two workers of two cores, on this "
        "host) instead of local[2]",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        master = "local[2]"
        if args.standalone:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-spark-")))
            # Memory for two applications per worker: the serving one's executors and the
            # standby's (a frozen driver keeps its executors: the master sees it connected).
            cluster = StandaloneCluster(work, workers=2, cores=2, memory="2g")
            master = stack.enter_context(cluster).url
        signals = [signal.Signals["SIG" + name] for name in args.signal or ("KILL", "STOP")]
        _run_all(args.trials, args.mode or MODES, master, signals, args.standby or ("warm", "cold"))


def _run_all(
    trials: int,
    modes: Sequence[str],
    master: str,
    signals: Sequence[signal.Signals],
    standbys: Sequence[str],
) -> None:
    for mode, sig, standby in itertools.product(modes, signals, standbys):
        got = []
        for _ in range(trials):
            with tempfile.TemporaryDirectory(prefix="baton-bench-standby-") as d:
                got.append(takeover_trial(Path(d), standby, sig, mode, master=master))
        times = [t.seconds for t in got]
        print(
            f"{master} {mode} {sig.name} {standby:>4}: takeover to first apply p50 "
            f"{quantile(times, 0.5):.2f} s, max {max(times):.2f} s ({times}); standing by: "
            f"{quantile([t.standby_rss_mb for t in got], 0.5):.0f} MB in "
            f"{max(t.standby_processes for t in got)} processes, "
            f"{quantile([t.standby_cpu_percent for t in got], 0.5):.1f} % of a core",
            flush=True,
        )


if __name__ == "__main__":
    main()
