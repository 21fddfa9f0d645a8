"""The Londiste 3 + PgQ reference for the partition benchmark (seed 004's complex case): the real
Debian packages merging four partition sets into one combined set, measured as baton's
``bench/partitions.py`` measures baton (with its :func:`~bench.partitions.measure_lag` and
:func:`~bench.partitions.measure_burst`).

Topology, on one PostgreSQL 15 server (:class:`~baton.testing.servers.PostgresServer`), one
database per seed box:

- ``lp_a1`` .. ``lp_d1``: the partition roots A1-D1, each the root of its own Londiste queue
  (``part_a`` .. ``part_d``) with ``public.accounts`` added (``londiste create-root``,
  ``add-table``).
- ``lp_s1``: S1, the combined root: the root of the queue ``combined`` and, in the same
  database, the merge-leaves A2-D2, one leaf of each partition queue created with
  ``londiste create-leaf --merge=combined`` (Londiste's merge-leaf: a leaf with a combined
  queue; its worker applies the partition's events to ``accounts`` and copies them, plus a
  ``pgq.tick-id`` event, into the combined queue). ``add-table --merge-all`` on a merge-leaf
  marks the table local in every partition queue that shares the combined queue and adds it to
  the combined queue too (``londiste.local_add_table``); the initial copies of the four
  partitions are then coordinated (``londiste._coordinate_copy``: one ``lead`` truncates and
  drops the indexes, the others wait and copy without truncating, the lead restores the indexes
  when all four are done), so the partitions fill one table without truncating each other.
- ``lp_s2``: S2, the combined-failover: a branch of ``combined`` (provider S1) and the merge-leaves
  A3-D3 of each partition queue (``create-leaf --merge=combined`` in a database whose combined
  queue is a branch: Londiste's "wait behind" merge-leaf, which applies nothing and only
  tracks the partition ticks that reach it through the combined queue).
- ``lp_s3``: S3, a branch of ``combined`` (provider S1), where the lag is read.

``pgqd`` ticks all seven databases; one ``londiste worker`` per node (15) as child processes.
Tuning is :class:`bench.londiste.Settings` (the cascade reference's): ``pgqd`` ``ticker_period``
0.05 s, on every root queue (the four partitions and ``combined``) ``ticker_max_lag`` 0,
``ticker_max_count`` 10000, ``ticker_idle_period`` 1 s; workers ``loop_delay`` 0.05 s,
``pgq_lazy_fetch`` 1000.

Measured:

1. **Lag**: a writer per partition root at ``rate`` changes/s (transactions of 50); the time
   from each partition commit to the first 10 ms probe of S3 that shows it.
2. **Burst**: the merge-leaf workers of S1 (A2-D2) stopped, ``burst`` changes written into each
   partition, the workers started again: the time until S3 equals the union of the partitions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from baton.testing.servers import PostgresServer
from bench import accounts_load
from bench.common import BenchError, loadavg, temp_dir
from bench.londiste import Settings, _stop, ensure_installed, start_pgqd
from bench.partitions import PARTS, SPAN, measure_burst, measure_lag

COMBINED = "combined"
TABLE = "public.accounts"


@dataclass(frozen=True, slots=True)
class Node:
    """One Londiste node: its name (also its job and ``.ini`` name), its database and the queue
    (set) it belongs to."""

    name: str
    database: str
    queue: str


def part_queue(part: str) -> str:
    return f"part_{part}"


#: The partition roots A1-D1.
ROOTS = tuple(Node(f"{p}1", f"lp_{p}1", part_queue(p)) for p in PARTS)
#: S1, the combined root.
S1 = Node("s1", "lp_s1", COMBINED)
#: S2 (combined-failover) and S3: branches of the combined queue.
S2 = Node("s2", "lp_s2", COMBINED)
S3 = Node("s3", "lp_s3", COMBINED)
#: Merge-leaves of each partition queue: A2-D2 in S1's database, A3-D3 in S2's.
MERGE_S1 = tuple(Node(f"{p}2", S1.database, part_queue(p)) for p in PARTS)
MERGE_S2 = tuple(Node(f"{p}3", S2.database, part_queue(p)) for p in PARTS)


class PartitionCascade:
    """The topology of the module docstring on one PostgreSQL server, ``pgqd`` and the workers
    as child processes of this one."""

    def __init__(self, directory: Path, settings: Settings, failover: bool = True) -> None:
        self.directory = directory
        self.settings = settings
        self.failover = failover
        self.server = PostgresServer(directory / "pg")
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.pgqd: subprocess.Popen[bytes] | None = None
        self.copy_trace: list[str] = []
        self.last_step: dict[str, str] = {}

    @property
    def nodes(self) -> list[Node]:
        """Every node, in creation order."""
        if self.failover:
            return [*ROOTS, S1, S2, S3, *MERGE_S1, *MERGE_S2]
        return [*ROOTS, S1, S3, *MERGE_S1]

    @property
    def databases(self) -> list[str]:
        return list(dict.fromkeys(n.database for n in self.nodes))

    # locations

    def connstr(self, node: Node) -> str:
        return f"dbname={node.database} host=127.0.0.1 port={self.server.port} user=postgres"

    def url(self, node: Node) -> str:
        return self.database_url(node.database)

    def database_url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.server.port}/{database}"

    def ini(self, node: Node) -> Path:
        return self.directory / f"{node.name}.ini"

    # set-up

    def start(self) -> None:
        """Create the databases and the table, the Londiste nodes, start ``pgqd`` and the
        workers, add the table everywhere and wait until every copy is done."""
        self.server.start()
        with psycopg.connect(self.server.url, autocommit=True) as conn:
            for database in self.databases:
                conn.execute(f"CREATE DATABASE {database}")
        for database in self.databases:
            accounts_load.create_table(self.database_url(database))
        for node in self.nodes:
            self.write_ini(node)
        self.create_nodes()
        self.tune_root_queues()
        self.start_pgqd()
        self.start_workers(*self.nodes)
        self.add_tables()
        self.wait_tables_ok(timeout=600)

    def write_ini(self, node: Node) -> None:
        s = self.settings
        self.ini(node).write_text(
            "[londiste]\n"
            f"job_name = londiste_{node.name}\n"
            f"db = {self.connstr(node)}\n"
            f"queue_name = {node.queue}\n"
            f"logfile = {self.directory / f'{node.name}.log'}\n"
            f"pidfile = {self.directory / f'{node.name}.pid'}\n"
            "use_skylog = 0\n"
            f"loop_delay = {s.loop_delay}\n"
            f"pgq_lazy_fetch = {s.pgq_lazy_fetch}\n"
        )

    def create_nodes(self) -> None:
        """``create-root`` for A1-D1 and S1 and ``add-table`` on A1-D1; ``create-branch`` for
        S2 and S3 (provider S1); ``create-leaf --merge=combined`` for A2-D2 (and A3-D3),
        provider their partition root. The combined queue's node must exist in a database
        before its merge-leaves, and the partition roots' table before the merge-leaves: each
        ``create-leaf`` registers it in its partition queue (and the combined queue), so one
        ``add-table --merge-all`` later finds all four partitions registered (a partition
        registered only after it would refuse the table: "Found local table public.accounts
        in queue part_a, use remove-table first")."""
        for root in (*ROOTS, S1):
            self.londiste(root, "create-root", root.name, self.connstr(root))
        for root in ROOTS:
            self.londiste(root, "add-table", TABLE)
        for branch in (S2, S3) if self.failover else (S3,):
            self.londiste(
                branch, "create-branch", branch.name, self.connstr(branch),
                f"--provider={self.connstr(S1)}",
            )  # fmt: skip
        for leaves in (MERGE_S1, MERGE_S2) if self.failover else (MERGE_S1,):
            for leaf, root in zip(leaves, ROOTS, strict=True):
                self.londiste(
                    leaf, "create-leaf", leaf.name, self.connstr(leaf),
                    f"--provider={self.connstr(root)}", f"--merge={COMBINED}",
                )  # fmt: skip

    def tune_root_queues(self) -> None:
        """The ticker settings of :class:`Settings` on every root queue."""
        s = self.settings
        for root in (*ROOTS, S1):
            with psycopg.connect(self.url(root), autocommit=True) as conn:
                for key, value in (
                    ("ticker_max_lag", f"{s.ticker_max_lag} seconds"),
                    ("ticker_max_count", str(s.ticker_max_count)),
                    ("ticker_idle_period", f"{s.ticker_idle_period} seconds"),
                ):
                    conn.execute(
                        "SELECT pgq.set_queue_config(%s, %s, %s)", (root.queue, key, value)
                    )

    def add_tables(self) -> None:
        """``add-table --merge-all`` on S1's merge-leaves (the first marks the table local in
        all four partition queues and adds it to the combined root; the others find it added),
        then on S2 and S3 (copied from S1) and ``--merge-all`` on S2's tracking
        merge-leaves."""
        for leaf in MERGE_S1:
            self.londiste(leaf, "add-table", TABLE, "--merge-all")
        self.londiste(S1, "add-table", TABLE)  # already added by the merge-leaves: a no-op
        for branch in (S2, S3) if self.failover else (S3,):
            self.londiste(branch, "add-table", TABLE)
        if self.failover:
            for leaf in MERGE_S2:
                self.londiste(leaf, "add-table", TABLE, "--merge-all")

    def start_pgqd(self) -> None:
        self.pgqd = start_pgqd(self.directory, self.server.port, self.databases, self.settings)

    def londiste(self, node: Node, *args: str, timeout: float = 120) -> str:
        """Run ``londiste NODE.ini ARGS``; raise :class:`BenchError` with its output if it
        fails."""
        res = subprocess.run(
            ["londiste", "-q", str(self.ini(node)), *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            raise BenchError(
                f"londiste {node.name} {' '.join(args)} failed: "
                f"{(res.stderr or res.stdout).strip()[-2000:]}"
            )
        return res.stdout

    # workers

    def start_workers(self, *nodes: Node) -> None:
        for node in nodes:
            with (self.directory / f"{node.name}.out").open("ab") as out:
                self.workers[node.name] = subprocess.Popen(
                    ["londiste", "-q", str(self.ini(node)), "worker"], stdout=out, stderr=out
                )

    def stop_workers(self, *nodes: Node) -> None:
        for node in nodes:
            proc = self.workers.pop(node.name, None)
            if proc is not None:
                _stop(proc)

    def pause_merges(self, paused: bool) -> None:
        """Stop (``paused``) or start the workers of S1's merge-leaves A2-D2."""
        if paused:
            self.stop_workers(*MERGE_S1)
        else:
            self.start_workers(*MERGE_S1)

    def check(self) -> None:
        """Raise :class:`BenchError` if a worker or ``pgqd`` has exited."""
        for name, proc in self.workers.items():
            if proc.poll() is not None:
                raise BenchError(
                    f"the {name} worker exited ({proc.returncode}); "
                    f"see {self.directory / f'{name}.log'}"
                )
        if self.pgqd is not None and self.pgqd.poll() is not None:
            raise BenchError(f"pgqd exited; see {self.directory / 'pgqd.log'}")

    # state

    def table_states(self) -> dict[str, str | None]:
        """``accounts``'s ``merge_state`` on every non-root node (None: not local there). Each
        new (node, ``merge_state``, ``copy_role``, indexes dropped) seen is appended to
        :attr:`copy_trace`: how the merge copies coordinated."""
        states: dict[str, str | None] = {}
        for node in self.nodes:
            if node in ROOTS or node == S1:
                continue
            with psycopg.connect(self.url(node), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT merge_state, copy_role, dropped_ddl IS NOT NULL "
                    "FROM londiste.get_table_list(%s) WHERE table_name = %s AND local",
                    (node.queue, TABLE),
                ).fetchone()
            states[node.name] = None if row is None else row[0]
            step = f"{node.name}: {row[0] if row else None}"
            if row is not None and row[1]:
                step += f" ({row[1]}{', indexes dropped' if row[2] else ''})"
            if self.last_step.get(node.name) != step:
                self.last_step[node.name] = step
                self.copy_trace.append(step)
        return states

    def force_ticks(self) -> None:
        for root in (*ROOTS, S1):
            with psycopg.connect(self.url(root), autocommit=True) as conn:
                conn.execute("SELECT pgq.force_tick(%s)", (root.queue,))

    def wait_tables_ok(self, timeout: float) -> None:
        """Wait until ``accounts`` is ``ok`` (copied, caught up, indexes restored) on every
        subscriber: the merge copies wait for each other in steps of 10 s."""
        deadline = time.monotonic() + timeout
        while True:
            # Each step of a copy's hand-over waits for a tick: tick the idle queues.
            self.force_ticks()
            states = self.table_states()
            if all(state == "ok" for state in states.values()):
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{TABLE} not ok after {timeout}s: {states}")
            self.check()
            time.sleep(0.2)

    def wait_flowing(self, timeout: float = 120) -> None:
        """One marker row per partition (partition i's id is ``i * SPAN``, just below its
        writers' ids) until S3 holds all four: every hop works before the measurements."""
        ids = [i * SPAN for i in range(1, len(ROOTS) + 1)]
        for root, marker in zip(ROOTS, ids, strict=True):
            with psycopg.connect(self.url(root), autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO accounts (id, balance, name, updated_at) "
                    "VALUES (%s, 0, 'marker', 0)",
                    (marker,),
                )
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.url(S3), autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM accounts WHERE id = ANY(%s)", (ids,)
                ).fetchone()
                if row is not None and row[0] == len(ids):
                    return
                if time.monotonic() > deadline:
                    raise BenchError(f"S3 did not receive the markers {ids} in {timeout}s")
                self.check()
                time.sleep(0.1)

    def verify(self, timeout: float = 120) -> dict[str, Any]:
        """After the measurements: S1 (and S2) equal S3, ``accounts`` keeps its primary key on
        every combined node (the lead merge copy drops it and restores it), every table is
        ``ok``, and the position of each merge-leaf (S2's only track the partition ticks that
        came through the combined queue)."""
        combined = [S1, S2] if self.failover else [S1]
        out: dict[str, Any] = {
            f"{n.name}_equals_s3": accounts_load.wait_equal(self.url(S3), self.url(n), timeout) >= 0
            for n in combined
        }
        out["rows"] = accounts_load.signature(self.url(S3))[0]
        out["table_states"] = self.table_states()
        pkeys: dict[str, bool] = {}
        for node in (*combined, S3):
            with psycopg.connect(self.url(node), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_constraint "
                    "WHERE conrelid = 'public.accounts'::regclass AND contype = 'p'"
                ).fetchone()
            pkeys[node.name] = row is not None and row[0] == 1
        out["primary_key"] = pkeys
        ticks: dict[str, int | None] = {}
        for leaf in (*MERGE_S1, *MERGE_S2) if self.failover else MERGE_S1:
            with psycopg.connect(self.url(leaf), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT last_tick_id FROM pgq_node.local_state "
                    "WHERE queue_name = %s AND consumer_name = %s",
                    (leaf.queue, f"londiste_{leaf.name}"),
                ).fetchone()
            ticks[leaf.name] = None if row is None else row[0]
        out["merge_leaf_ticks"] = ticks
        out["copy_trace"] = self.copy_trace
        return out

    def print_logs(self, lines: int = 15) -> None:
        """The last ``lines`` of every log on stderr (the temp dir is removed on exit)."""
        for log in sorted(self.directory.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            print(f"--- {log.name}", *tail, sep="\n", file=sys.stderr)

    def stop(self) -> None:
        self.stop_workers(*[n for n in self.nodes if n.name in self.workers])
        # Table copies run as daemons (``londiste INI copy TABLE -d``) with pidfiles next to
        # their worker's; stop any that is still running.
        for pidfile in self.directory.glob("*.pid.copy.*"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)
        if self.pgqd is not None:
            _stop(self.pgqd)
            self.pgqd = None
        self.server.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.server.directory)


@contextlib.contextmanager
def partition_cascade(settings: Settings, failover: bool = True) -> Iterator[PartitionCascade]:
    """A running :class:`PartitionCascade` in a temp dir, stopped and removed afterwards."""
    with temp_dir("londiste-partitions") as directory:
        running = PartitionCascade(directory, settings, failover)
        try:
            running.start()
            yield running
        except BaseException:
            running.print_logs()
            raise
        finally:
            running.stop()


def londiste_partitions_bench(
    rate: float = 1000,
    seconds: float = 30,
    burst: int = 25_000,
    *,
    failover: bool = True,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """Set up the topology, then the lag and the burst measurements; the numbers."""
    settings = settings or Settings()
    out: dict[str, Any] = {
        "system": "londiste3+pgq",
        "version": ensure_installed(),
        "topology": "A1-D1 -> S1 (merge-leaves A2-D2, combined root) -> "
        + ("S2 (combined-failover, merge-leaves A3-D3), S3" if failover else "S3"),
        "settings": asdict(settings),
    }
    t0 = time.monotonic()
    with partition_cascade(settings, failover) as c:
        out["setup_seconds"] = round(time.monotonic() - t0, 1)
        c.wait_flowing()
        partitions = [c.url(root) for root in ROOTS]
        out["load_before"] = loadavg()
        out["lag"] = measure_lag(partitions, c.url(S3), rate, seconds, check=c.check)
        out["load_after_lag"] = loadavg()
        out["throughput"] = measure_burst(partitions, c.url(S3), burst, c.pause_merges, c.check)
        out["load_after"] = loadavg()
        c.check()
        out["verify"] = c.verify()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.londiste_partitions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rate", type=float, default=1000, help="changes/s per partition")
    parser.add_argument("--seconds", type=float, default=30, help="length of the lag run")
    parser.add_argument("--burst", type=int, default=25_000, help="changes per partition")
    parser.add_argument("--quick", action="store_true", help="10 s lag run, burst 5,000")
    parser.add_argument("--no-failover", action="store_true", help="without S2 (and A3-D3)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="override a setting"
    )
    args = parser.parse_args(argv)
    seconds, burst = (10.0, 5_000) if args.quick else (args.seconds, args.burst)
    settings = Settings().replace(dict(item.split("=", 1) for item in args.set))
    result = londiste_partitions_bench(
        args.rate, seconds, burst, failover=not args.no_failover, settings=settings
    )
    result["quick"] = args.quick
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
