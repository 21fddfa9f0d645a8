"""Automatic failover of a lost root, through real processes (issue 30): how soon a writer
following the root (:class:`baton.RootWriter`) writes again after the root's host is
SIGKILLed, how soon the leaf applies that write, and what was lost.

The cluster: node agents ``n0``..``n(N-1)`` (``baton node``, ttl 2 s, one SQLite store), each
labelled ``host=nI``; node ``sI+1`` of set ``A`` is a ``cascade-worker`` object with one
replica pinned to host ``nI`` (its database lives on that host: when the host dies, nothing
else can serve it). ``s1`` is the root, ``s2``..``s(N-1)`` branches under it, ``sN`` a leaf
under ``s2``. Automatic failover is on. A writer thread inserts a row every 20 ms through a
``RootWriter`` (``recheck`` 0.1 s), in asynchronous mode or with ``sync`` K.

One trial: once the leaf applies and after ``--steady`` seconds of writes (their commit latency
is the steady one), the current root's host agent is SIGKILLed (or SIGSTOPped,
``--signal stop``: its leases run out while it is frozen); measured from the signal to the
first write acknowledged at another root (**write**) and to the leaf holding that row
(**leaf**). Then the host comes back (started again, or SIGCONT), ``baton cascade resurrect``
saves the old root's stranded events and makes it a branch, and the trial checks:

- asynchronous: the writes acknowledged at the old root that the new root does not hold are
  exactly the inserts ``resurrect`` saved (nothing else lost, nothing saved twice);
- sync K: no acknowledged write is missing at the new root.

The next trial kills the new root's host, so roots rotate between the hosts.

    .venv/bin/python -m bench.auto_failover [--trials 5] [--sync 1] [--mode low-latency]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from baton import RootWriter
from baton.cascade import commands
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.errors import BatonError
from baton.local.cluster import LocalCluster
from baton.local.waiting import wait_for
from baton.placement.model import make_object
from baton.placement.records import create_object
from baton.store import open_store
from baton.testing.workload import create_accounts
from bench.common import quantile

SET = "A"
TTL = 2.0
BATON = str(Path(sys.executable).with_name("baton"))


@dataclass
class Ack:
    id: int
    node: str
    at: float


class SteadyWriter(threading.Thread):
    """Inserts ``accounts`` rows through a :class:`RootWriter`, recording every acknowledged
    one (its id, the root that took it, when its commit returned)."""

    def __init__(self, via: list[str], interval: float = 0.02) -> None:
        super().__init__(daemon=True, name="steady-writer")
        self.via = via
        self.interval = interval
        self.acks: list[Ack] = []
        #: (began, seconds) of each acknowledged commit (BEGIN to the commit's return, and in
        #: sync mode the branch's confirmation).
        self.latencies: list[tuple[float, float]] = []
        #: (from, to): the steady stretches, between a recovery and the next kill.
        self.steady: list[tuple[float, float]] = []

        self.failures = 0
        self.halt = threading.Event()
        self.next_id = 1

    def steady_latencies(self) -> list[float]:
        """The commit latencies of the steady stretches only (a failover's wait left out)."""
        return [
            took for began, took in self.latencies
            if any(a <= began and began + took <= b for a, b in self.steady)
        ]  # fmt: skip

    def run(self) -> None:
        with RootWriter(SET, self.via, recheck=0.1, sync_timeout=2.0) as w:
            while not self.halt.wait(self.interval):
                id_ = self.next_id
                self.next_id += 1
                began = time.monotonic()
                try:
                    with w.transaction() as cur:
                        cur.execute(
                            "INSERT INTO accounts VALUES (?, 0, 'w', ?)", (id_, time.time())
                        )
                    node = w.root.node or "?"
                except (BatonError, sqlite3.Error):
                    self.failures += 1  # not acknowledged: the writer goes on
                    continue
                done = time.monotonic()
                self.acks.append(Ack(id_, node, done))
                self.latencies.append((began, done - began))


def _path(loc: str) -> Path:
    return Path(loc.removeprefix("sqlite://"))


def _has(loc: str, id_: int) -> bool:
    try:
        with sqlite3.connect(f"file:{_path(loc)}?mode=ro", uri=True, timeout=1) as db:
            return db.execute("SELECT 1 FROM accounts WHERE id = ?", (id_,)).fetchone() is not None
    except sqlite3.Error:
        return False


def _ids(loc: str) -> set[int]:
    with sqlite3.connect(f"file:{_path(loc)}?mode=ro", uri=True, timeout=5) as db:
        return {r[0] for r in db.execute("SELECT id FROM accounts")}


def _role(loc: str) -> Role | None:
    try:
        with open_node_db(loc, readonly=True) as db:
            return db.state().role
    except (BatonError, OSError):
        return None


def root_of(loc: dict[str, str]) -> str:
    """The set's root now: the node whose database says it is the root."""
    return next(n for n in loc if _role(loc[n]) is Role.ROOT)


def _position(loc: str) -> int:
    try:
        with open_node_db(loc, readonly=True) as db:
            return db.state().position
    except (BatonError, OSError):
        return -1


def _cli(*args: str) -> str:
    res = subprocess.run([BATON, *args], capture_output=True, text=True, check=False, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"baton {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout


def build(directory: Path, n: int) -> dict[str, str]:
    """The set's node databases: s1 root, s2..s(n-1) branches, sn a leaf under s2."""
    loc = {f"s{i}": f"sqlite://{directory / f's{i}'}.db" for i in range(1, n + 1)}
    for location in loc.values():
        create_accounts(_path(location))
    commands.create_root("s1", loc["s1"], SET)
    for i in range(2, n):
        commands.create_subscriber(Role.BRANCH, f"s{i}", loc[f"s{i}"], "s1", loc["s1"])
    commands.create_subscriber(Role.LEAF, f"s{n}", loc[f"s{n}"], "s2", loc["s2"])
    commands.add_table(loc["s1"], "accounts", everywhere=True)
    return loc


async def _declare(url: str, loc: dict[str, str], mode: str) -> None:
    async with open_store(url) as store:
        for i, (name, location) in enumerate(loc.items()):
            spec = {"location": location, "mode": mode}
            obj = make_object("cascade-worker", name, 1, 1, spec=spec, selector={"host": f"n{i}"})
            await create_object(store, obj)


@dataclass
class Trial:
    old: str
    new: str
    write_s: float
    leaf_s: float
    stranded_acked: int
    saved: int
    lost: int
    #: When the host was signalled (``time.monotonic()``).
    killed_at: float = 0.0


@contextlib.contextmanager
def running(
    directory: Path, n: int, mode: str = "low-latency", sync: int = 0
) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    """The cluster of the module docstring, up, with automatic failover on (and sync ``sync``
    when not 0): its agents and the set's node locations, ``s1``.. in host order."""
    loc = build(directory, n)
    c = LocalCluster(n, None, directory / "cluster", ttl=TTL, reconcile_interval=0.3)
    for i, node in enumerate(c.nodes.values()):
        node.env["BATON_LABELS"] = f"host=n{i}"
    with c:
        asyncio.run(_declare(c.store_url, loc, mode))
        _cli("cascade", "auto-failover", SET, "on", "--via", loc["s1"])
        if sync:
            _cli("cascade", "sync", SET, str(sync), "--via", loc["s1"])
        yield c, loc


def trial(
    cluster: LocalCluster,
    loc: dict[str, str],
    writer: SteadyWriter,
    directory: Path,
    k: int,
    *,
    sync: int,
    saved_before: set[int],
    freeze: bool = False,
    steady: float = 0.0,
) -> Trial:
    leaf = list(loc)[-1]
    host = {name: f"n{i}" for i, name in enumerate(loc)}
    old = root_of(loc)
    # Steady state: the leaf applies what the root acknowledges now; then ``steady`` seconds
    # of writes whose commit latency counts as the steady one.
    mark = len(writer.acks)
    wait_for(lambda: len(writer.acks) > mark + 10, timeout=120, what="writes at the root")
    last = writer.acks[-1]
    wait_for(lambda: _has(loc[leaf], last.id), timeout=180, what="the leaf to apply")
    steady_from = time.monotonic()
    time.sleep(steady)
    kill_at = time.monotonic()
    writer.steady.append((steady_from, kill_at))
    if freeze:
        cluster.pause(host[old])  # SIGSTOP: its leases run out while it is frozen
    else:
        cluster.kill(host[old])
    first = wait_for(
        lambda: next((a for a in writer.acks[mark:] if a.node != old), None),
        timeout=120,
        interval=0.005,
        what="a write at a new root",
    )
    wait_for(lambda: _has(loc[leaf], first.id), timeout=120, interval=0.005, what="the leaf")
    leaf_s = time.monotonic() - kill_at
    new = first.node
    # The old root's host comes back; the operator saves what was stranded there.
    if freeze:
        cluster.resume(host[old])
    else:
        cluster.node(host[old]).start()
    saved_file = directory / f"stranded-{k}.jsonl"
    _cli("cascade", "resurrect", old, "--via", loc[new], "--save", str(saved_file))
    saved = set()
    # No file when there was nothing to save.
    lines = saved_file.read_text().splitlines() if saved_file.exists() else []
    for line in lines:
        ev = json.loads(line)
        key = ev["key"] if isinstance(ev["key"], dict) else json.loads(ev["key"])
        if ev.get("table") == "accounts":
            saved.add(int(key["id"]))
    at_new = _ids(loc[new])
    # Every write acknowledged at the old root (in this trial or when it was root before) that
    # the new root lacks, less what an earlier resurrect saved.
    stranded = {a.id for a in writer.acks if a.node == old} - at_new - saved_before
    # Asynchronous: what resurrect saved is not lost. Sync mode: nothing acknowledged may be
    # missing at the new root at all.
    lost = len(stranded) if sync else len(stranded - saved)
    if stranded != saved:
        print(f"  trial {k}: stranded {sorted(stranded)[:5]}.. saved {sorted(saved)[:5]}..")
    # The resurrected node is a branch: wait until it applies again (its host's Spark session
    # built, its position past the root's tick now) before the next kill.
    wait_for(lambda: _role(loc[old]) is Role.BRANCH, timeout=60, what=f"{old} a branch")
    with open_node_db(loc[new], readonly=True) as db:
        tip = db.last_tick()
        assert tip is not None
    wait_for(lambda: _position(loc[old]) >= tip.tick_id, timeout=300, what=f"{old} to apply again")
    saved_before |= saved
    return Trial(old, new, first.at - kill_at, leaf_s, len(stranded), len(saved), lost, kill_at)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--sync", type=int, default=0, help="K branches per commit (0: async)")
    ap.add_argument("--nodes", type=int, default=0, help="nodes (default 3; 4 with --sync)")
    ap.add_argument("--mode", default="low-latency", choices=["micro-batch", "low-latency"])
    ap.add_argument(
        "--signal", default="kill", choices=["kill", "stop"], help="SIGKILL or SIGSTOP the host"
    )
    ap.add_argument(
        "--steady", type=float, default=10.0, help="seconds of steady writes before each kill"
    )
    ap.add_argument("--keep", type=Path, help="keep the cluster's files (logs) in this directory")
    args = ap.parse_args()
    n = args.nodes or (4 if args.sync else 3)
    with tempfile.TemporaryDirectory(prefix="bench-auto-failover-") as tmp:
        directory = Path(tmp) if args.keep is None else args.keep
        directory.mkdir(parents=True, exist_ok=True)
        with running(directory, n, args.mode, args.sync) as (c, loc):
            writer = SteadyWriter(list(loc.values()))
            writer.start()
            results = []
            saved: set[int] = set()
            try:
                for k in range(args.trials):
                    t = trial(
                        c,
                        loc,
                        writer,
                        directory,
                        k,
                        sync=args.sync,
                        saved_before=saved,
                        freeze=args.signal == "stop",
                        steady=args.steady,
                    )
                    results.append(t)
                    print(
                        f"trial {k}: {t.old} -> {t.new}: write {t.write_s:.2f} s, leaf "
                        f"{t.leaf_s:.2f} s; stranded {t.stranded_acked}, saved {t.saved}, "
                        f"lost {t.lost}",
                        flush=True,
                    )
            finally:
                writer.halt.set()
                writer.join(10)
    writes = [t.write_s for t in results]
    steady = writer.steady_latencies()
    leaves = [t.leaf_s for t in results]
    print(
        f"auto-failover ({'sync ' + str(args.sync) if args.sync else 'async'}, {args.mode}, "
        f"SIG{args.signal.upper()}, "
        f"ttl {TTL:g}, {len(results)} kills): write p50 {quantile(writes, 0.5):.2f} / max "
        f"{max(writes):.2f} s; leaf p50 {quantile(leaves, 0.5):.2f} / max {max(leaves):.2f} s; "
        f"acknowledged writes lost {sum(t.lost for t in results)}; failed commits "
        f"{writer.failures}; steady commit latency p50 {quantile(steady, 0.5) * 1000:.1f} / "
        f"p99 {quantile(steady, 0.99) * 1000:.1f} ms ({len(steady)} commits), all commits p99 "
        f"{quantile([t for _, t in writer.latencies], 0.99) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
