"""The cascade part of ``baton demo``: a generated workload replicated root -> branch -> leaf on
SQLite node databases by Spark workers; the root dies mid-stream; failover promotes the branch;
the workload goes on at the new root; the leaf is checked equal to the surviving data; the old
root comes back and ``resurrect`` saves the events that never left it; then two partition sets
are merged into the cascade (:mod:`baton.demo.partitions`). The workers run in the
low-latency mode (one long-running Spark task each), and the demo shows how long one row takes
from the root to the leaf, what a commit costs in synchronous mode (confirmed by the
branch before it returns), how soon a worker taken over in a warm session applies (hot
standby), and ``compare`` finding a stray row at the leaf while writes go on, which ``repair``
removes."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from baton.cascade import commands, table_diff
from baton.cascade.beat import ServiceState
from baton.cascade.db import open_node_db
from baton.cascade.table_diff import Repaired
from baton.cascade.writer import RootWriter
from baton.demo.partitions import partitions_part
from baton.local.waiting import wait_for
from baton.service.worker import LOW_LATENCY
from baton.spark.diff import spark_differ
from baton.spark.lifecycle import SessionSpec, SparkSessions
from baton.testing.cascade import LocalSet
from baton.testing.workload import run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Step = Callable[[str, float, str, bool], None]


class _Writer(threading.Thread):
    """Writes transactions to one node's accounts table until told to stop."""

    def __init__(self, path: Path, seed: int) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.seed = seed
        self.halt = threading.Event()
        self.changes = 0

    def run(self) -> None:
        while not self.halt.is_set():
            self.changes += run_workload(self.path, 10, seed=self.seed)
            self.seed += 1
            time.sleep(0.1)  # about 500 changes a second


def _one_row_lag(s: LocalSet, marker: int = -1) -> float:
    """Seconds from one row's commit at the root to the leaf showing it. ``marker``: the row's
    id, outside the ids the demo's writer inserts, updates and deletes (negative)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(s.path("root"), timeout=30)) as root:
        with root:
            root.execute(
                "INSERT INTO accounts (id, balance, name) VALUES (?, 0, 'demo marker')", (marker,)
            )
        t0 = time.monotonic()
    with contextlib.closing(sqlite3.connect(s.path("leaf"), timeout=30)) as leaf:
        wait_for(
            lambda: leaf.execute("SELECT 1 FROM accounts WHERE id = ?", (marker,)).fetchone(),
            timeout=60,
            interval=0.002,
            what="the marker row at the leaf",
        )
    return time.monotonic() - t0


def _refused_at(path: Path) -> str | None:
    """The error a direct write at a node that does not capture gets (None: it was taken)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        try:
            with db:
                db.execute("UPDATE accounts SET balance = balance + 1")
        except sqlite3.IntegrityError as exc:
            return str(exc)
    return None


def _sync_commits(s: LocalSet, n: int = 20) -> list[str | None]:
    """``n`` one-row commits through the writer helper with the set in synchronous mode
    (``sync = 1``: each returns once the branch holds it), then asynchronous again; for each,
    the branch that confirmed it (None: returned unconfirmed, which sync mode never does)."""
    via = s.location("root")
    commands.sync(via, s.set_name, 1)  # what `baton cascade sync S 1` runs
    confirmed: list[str | None] = []
    try:
        with RootWriter(s.set_name, via=via, sync_timeout=60) as writer:
            for i in range(n):
                key = -1000 - i  # outside the ids the demo's writer touches
                with writer.transaction() as cur:
                    cur.execute(
                        "INSERT INTO accounts (id, balance, name) VALUES (?, 0, 'sync demo')",
                        (key,),
                    )
                ack = writer.last_ack
                confirmed.append(ack.branches[0] if ack and ack.branches else None)
    finally:
        commands.sync(via, s.set_name, 0)
    return confirmed


def _compare_and_repair(s: LocalSet, spark: SparkSession) -> tuple[str, Repaired]:
    """Plant an extra row (id -7, a key the writer never uses) at the leaf; what compare finds
    there, and what repair did."""
    with open_node_db(s.location("leaf")) as db, db.transaction() as cur:
        cur.execute("INSERT INTO accounts VALUES (-7, 0, 'stray', 0)")
    differ = spark_differ(spark)
    c = s.cascade()
    diff = table_diff.compare(c, "leaf", ["accounts"], differ).tables["accounts"]
    found = ", ".join(f"{d.kind.value} id {d.key[0]}" for d in diff.diffs) or "nothing"
    return found, table_diff.repair(c, "leaf", "accounts", differ)


def _services(s: LocalSet) -> dict[str, str]:
    """Each node's service as ``baton cascade status`` sees it (its heartbeat's phase)."""
    now = time.time()
    return {
        m.name: m.service.phase.value
        if m.service and m.service.state(now) is ServiceState.RUNNING
        else "not running"
        for m in commands.status(s.location("root")).members
    }


def cascade_part(console: Console, workdir: Path, step: Step, master: str = "local[4]") -> bool:
    """``master``: where Spark runs (four task slots: see below)."""
    console.rule("[bold]cascade: root -> branch -> leaf on Spark, the root lost, failover")
    t0 = time.monotonic()
    # Four task slots: two low-latency workers hold one each for as long as they run, and the
    # partitions part's micro-batches and copies need the others.
    sessions = SparkSessions(SessionSpec(master=master, work_dir=workdir / "spark", quiet=True))
    spark = sessions.session()
    step(f"Spark session ({master})", time.monotonic() - t0, spark.version, True)
    ok = True
    # The sessions stop (and with them the JVM) at the end.
    with sessions, LocalSet(workdir, spark, mode=LOW_LATENCY) as s:
        s.root("root")
        s.branch("branch", "root")
        s.leaf("leaf", "branch")
        s.add_table("accounts")
        t0 = time.monotonic()
        s.start_workers()
        writer = _Writer(s.path("root"), seed=1)
        writer.start()
        s.wait_synced(timeout=120)
        step("root -> branch -> leaf replicating", time.monotonic() - t0,
             f"{writer.changes} row changes so far", True)  # fmt: skip
        seen = _one_row_lag(s)
        step("a row from the root to the leaf", seen,
             "through the branch, with low-latency workers (one Spark task each)",
             seen < 5.0)  # fmt: skip
        # Operations that cannot lose data: a write where it would not be captured is
        # refused, and status tells what runs where.
        refusal = _refused_at(s.path("branch"))
        services = _services(s)
        running = services == {"root": "ticking", "branch": "applying", "leaf": "applying"}
        step("a write at the branch refused", 0.0,
             f"{refusal}; status: " + ", ".join(f"{k} {v}" for k, v in services.items()),
             refusal is not None and "write it at" in refusal and running)  # fmt: skip
        # Synchronous mode: a commit through the writer helper returns only once the branch
        # holds it, so losing the root loses none of those commits.
        t0 = time.monotonic()
        confirmed = _sync_commits(s)
        took = time.monotonic() - t0
        step("sync mode: each commit held by the branch", took,
             f"{len(confirmed)} commits with sync 1, {took / len(confirmed) * 1000:.0f} ms "
             "each on average (the next tick and the branch's apply)",
             set(confirmed) == {"branch"})  # fmt: skip
        # Hot standby: the leaf's worker is lost and its standby takes the leaf over at a
        # newer epoch (the old one is fenced from then on), in a session that is warm already,
        # as a warm standby's is: no Spark start-up between the takeover and the first row.
        t0 = time.monotonic()
        s.stop_worker("leaf")
        s.start_worker("leaf")
        seen = _one_row_lag(s, marker=-2)
        step("hot standby: the leaf's worker taken over", time.monotonic() - t0,
             f"at epoch {s.epochs['leaf']}; a row reached the leaf {seen:.2f} s after its "
             "commit (a warm session: no Spark start-up)", seen < 5.0)  # fmt: skip
        # A stray row at the leaf (written past its guard, as a bug would): compare finds it
        # while the writer goes on at the root, and repair removes exactly that row.
        t0 = time.monotonic()
        found, fixed = _compare_and_repair(s, spark)
        step("compare and repair: a stray row at the leaf", time.monotonic() - t0,
             f"compare found {found} (at the leaf's tick, on Spark); repair deleted "
             f"{fixed.deleted} row(s), wrote {fixed.written}; compared again: "
             f"{'equal' if fixed.equal_after else 'different'}",
             found == "extra id -7" and fixed.equal_after)  # fmt: skip
        time.sleep(2.0)
        # The root dies mid-stream: its writer and ticker stop at once.
        writer.halt.set()
        writer.join()
        s.dead.add("root")
        died = time.monotonic()
        console.print(f"the root died after {writer.changes} row changes; failing over...")
        via = s.location("branch")
        done = commands.failover(via, "root")  # what `baton cascade failover` runs
        new_root, fork, notes = done.new_root, done.fork, done.notes
        step("failover", time.monotonic() - died,
             f"{new_root} promoted at tick {fork}" + (f"; {notes}" if notes else ""),
             new_root == "branch")  # fmt: skip
        after = _Writer(s.path(new_root), seed=1000)
        after.start()
        time.sleep(2.0)
        after.halt.set()
        after.join()
        t0 = time.monotonic()
        s.wait_synced(["leaf"], timeout=120)
        same = s.rows("leaf") == s.rows(new_root)
        rows = len(s.rows("leaf"))
        step("leaf equals the surviving data", time.monotonic() - t0,
             f"{rows} rows; {after.changes} changes written at the new root", same)  # fmt: skip
        ok &= same
        saved = workdir / "resurrected-events.jsonl"
        n = commands.resurrect(via, "root", saved).saved
        s.dead.discard("root")
        s.start_worker("root")
        s.wait_synced(["root", "leaf"], timeout=120)
        back = s.rows("root") == s.rows(new_root)
        step("old root resurrected as a branch", 0.0,
             f"{n} events that never left it saved to {saved.name}; its tables equal the "
             "set's again", back)  # fmt: skip
        ok &= back
        ok &= partitions_part(
            console,
            workdir,
            spark,
            host=s.location(new_root),
            leaf=s.location("leaf"),
            step=step,
        )
    return ok
