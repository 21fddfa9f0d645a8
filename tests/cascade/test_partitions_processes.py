"""Seed 004's complex case as a user runs it: four partition sets A-D (SQLite roots with
writers), S1 their combined-root (SQLite), S2 the combined-failover (PostgreSQL), S3 a branch of
the combined set (SQLite), every node served by ``baton cascade run`` processes (S1 with its
four merge-leaves in one process and one Spark JVM, S2 likewise), built and failed over with
the CLI only. S1 is killed and its database lost while all four partitions write; after
``failover`` S2 is the combined root and S3 follows it: S3's table equals the union of A-D's,
no row version is applied twice at S3 (an audit trigger), and ABCD -> S2 -> S3 keeps
flowing. Then S3 becomes a combined-failover too and a planned ``switchover`` hands the
combined root from S2 to S3 while the four write: both equal the union after it."""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from baton.cascade.db import open_node_db
from baton.local.processes import Proc
from baton.local.waiting import wait_for
from baton.testing.servers import PostgresServer
from baton.testing.workload import create_accounts

BATON = str(Path(sys.executable).with_name("baton"))
PARTS = "abcd"


def cli(*args: str) -> str:
    done = subprocess.run(
        [BATON, "cascade", *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"baton cascade {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture
def pg_location(postgres_server: PostgresServer) -> Iterator[str]:
    with postgres_server.databases("s2") as (url,):
        yield url


class Writer(threading.Thread):
    """One partition's application: transactions of 1-4 changes on its own ids, each row
    version with a balance no other write uses (so the audit can tell a version twice)."""

    def __init__(self, path: Path, base: int, versions: Iterator[int]) -> None:
        super().__init__(daemon=True)
        self.path, self.base, self.versions = path, base, versions
        self.halt = threading.Event()
        self.rng = random.Random(base)
        self.commits = 0

    def run(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            while not self.halt.wait(0.01):
                conn.execute("BEGIN IMMEDIATE")
                for _ in range(self.rng.randint(1, 4)):
                    key = self.base + self.rng.randrange(300)
                    if self.rng.random() < 0.1:
                        conn.execute("DELETE FROM accounts WHERE id = ?", (key,))
                    else:
                        conn.execute(
                            "INSERT INTO accounts (id, balance) VALUES (?, ?) ON CONFLICT (id) "
                            "DO UPDATE SET balance = excluded.balance",
                            (key, next(self.versions)),
                        )
                conn.execute("COMMIT")
                self.commits += 1
        finally:
            conn.close()


def rows(location: str) -> list[tuple[int, int]]:
    with open_node_db(location) as db:
        return [(int(r[0]), int(r[1])) for r in db.read_rows("accounts")]


@pytest.mark.long
def test_four_partitions_lose_the_combined_root(tmp_path: Path, pg_location: str) -> None:
    loc = {f"{p}1": f"sqlite://{tmp_path}/{p}1.db" for p in PARTS}
    loc |= {
        "s1": f"sqlite://{tmp_path}/s1.db",
        "s2": pg_location,
        "s3": f"sqlite://{tmp_path}/s3.db",
    }
    for location in loc.values():
        create_accounts(location)
    with sqlite3.connect(tmp_path / "s3.db") as c:
        c.executescript(
            "CREATE TABLE audit (id INTEGER, balance INTEGER);"
            "CREATE TRIGGER audit_i AFTER INSERT ON accounts BEGIN "
            "INSERT INTO audit VALUES (NEW.id, NEW.balance); END;"
            "CREATE TRIGGER audit_u AFTER UPDATE ON accounts BEGIN "
            "INSERT INTO audit VALUES (NEW.id, NEW.balance); END;"
        )
    for p in PARTS:
        cli("create-root", f"{p}1", loc[f"{p}1"], "--set", p.upper())
        cli("add-table", "accounts", "--node", f"{p}1", "--via", loc[f"{p}1"])
    cli("create-root", "s1", loc["s1"], "--set", "S")
    cli("add-table", "accounts", "--node", "s1", "--via", loc["s1"])
    for node in ("s2", "s3"):
        cli("create-branch", node, loc[node], "--provider", "s1", "--via", loc["s1"])
        cli("add-table", "accounts", "--node", node, "--via", loc["s1"])
    for p in PARTS:
        for n, host in (("2", "s1"), ("3", "s2")):
            cli("create-node", "merge-leaf", f"{p}{n}", loc[host],
                "--provider", f"{p}1", "--via", loc[f"{p}1"])  # fmt: skip
            cli("add-table", "accounts", "--node", f"{p}{n}", "--via", loc[f"{p}1"])
    store = f"sqlite://{tmp_path / 'store.db'}"
    procs: dict[str, Proc] = {}

    def serve(name: str, *locations: str) -> None:
        argv = [BATON, "cascade", "run", *locations, "--store", store, "--ttl", "5",
                "--mode", "low-latency", "--spark-master", "local[6]",
                "--spark-dir", str(tmp_path / f"spark-{name}")]  # fmt: skip
        procs[name] = Proc(name, argv, tmp_path / f"{name}.log")

    # itertools.count's next() is atomic: each row version gets its own balance.
    versions = itertools.count(1)
    writers = [
        Writer(tmp_path / f"{p}1.db", (i + 1) * 1_000_000, versions) for i, p in enumerate(PARTS)
    ]
    try:
        serve("parts", *(loc[f"{p}1"] for p in PARTS))
        serve("s1", loc["s1"], *(f"{loc['s1']}#{p.upper()}" for p in PARTS))
        serve("s2", loc["s2"], *(f"{loc['s2']}#{p.upper()}" for p in PARTS))
        serve("s3", loc["s3"])
        for w in writers:
            w.start()

        def from_every_partition() -> bool:
            with open_node_db(loc["s3"]) as db:
                if db.tables().get("accounts") != "ok":
                    return False
            ids = {i // 1_000_000 for i, _ in rows(loc["s3"])}
            return ids >= {1, 2, 3, 4}

        wait_for(from_every_partition, timeout=240, interval=0.5, what="S3 fed by all four")
        flowing = [w.commits for w in writers]
        wait_for(
            lambda: all(w.commits > c + 100 for w, c in zip(writers, flowing, strict=True)),
            timeout=60,
            what="writes flowing through S1",
        )
        # S1 dies and its database is lost, while the four partitions write.
        os.killpg(procs["s1"].popen.pid, signal.SIGKILL)  # the process, its JVM and workers
        procs["s1"].popen.wait(30)
        lost = tmp_path / "lost"
        lost.mkdir()
        for f in tmp_path.glob("s1.db*"):
            shutil.move(f, lost / f.name)
        out = cli("failover", "s1", "--via", loc["s3"])
        assert "s2" in out
        wait_for(lambda: all(w.commits > 50 for w in writers), timeout=60, what="writes")
        for w in writers:
            w.halt.set()
            w.join(30)
        union = sorted(itertools.chain.from_iterable(rows(loc[f"{p}1"]) for p in PARTS))

        def s3_equals_union() -> bool:
            return rows(loc["s3"]) == union

        wait_for(s3_equals_union, timeout=120, interval=0.5, what="S3 equal to A+B+C+D")
        assert rows(loc["s2"]) == union
        with sqlite3.connect(tmp_path / "s3.db") as c:
            seen = c.execute("SELECT id, balance FROM audit").fetchall()
        twice = {v for v in seen if seen.count(v) > 1}
        assert not twice, f"row versions applied twice at S3: {sorted(twice)[:10]}; {out}"
        status = json.loads(cli("status", "--via", loc["s3"], "--json"))
        assert status["root"] == "s2"
        s2 = next(m for m in status["members"] if m["name"] == "s2")
        assert sorted(s2["merges"]) == ["A", "B", "C", "D"]
        # ABCD -> S2 -> S3 keeps flowing.
        with sqlite3.connect(tmp_path / "d1.db") as c:
            c.execute("INSERT INTO accounts (id, balance) VALUES (4999999, -1)")
        wait_for(lambda: (4999999, -1) in rows(loc["s3"]), timeout=60, what="a new row at S3")

        # Then a planned switchover of the combined root, S2 -> S3, while the four write: S3
        # becomes a combined-failover first (merge-leaves a4..d4, tracking), and its process
        # is restarted to serve them too.
        for p in PARTS:
            cli("create-node", "merge-leaf", f"{p}4", loc["s3"],
                "--provider", f"{p}1", "--via", loc[f"{p}1"])  # fmt: skip
            cli("add-table", "accounts", "--node", f"{p}4", "--via", loc[f"{p}1"])
        procs["s3"].stop()
        serve("s3", loc["s3"], *(f"{loc['s3']}#{p.upper()}" for p in PARTS))
        writers = [
            Writer(tmp_path / f"{p}1.db", (i + 1) * 1_000_000, versions)
            for i, p in enumerate(PARTS)
        ]
        for w in writers:
            w.start()
        wait_for(lambda: all(w.commits > 30 for w in writers), timeout=60, what="writes")

        def applying(name: str) -> bool:
            """What an operator checks first (a switchover refuses a target not applying)."""
            found = json.loads(cli("status", "--via", loc["s2"], "--json"))["members"]
            beat = next(m for m in found if m["name"] == name)["service"]
            return bool(beat["state"] == "running" and beat.get("phase") == "applying")

        wait_for(lambda: applying("s3"), timeout=180, interval=0.5, what="s3's service to apply")
        cli("switchover", "s3", "--via", loc["s2"], "--timeout", "120")
        wait_for(lambda: all(w.commits > 80 for w in writers), timeout=60, what="writes")
        for w in writers:
            w.halt.set()
            w.join(30)
        union = sorted(itertools.chain.from_iterable(rows(loc[f"{p}1"]) for p in PARTS))
        wait_for(lambda: rows(loc["s2"]) == union, timeout=120, interval=0.5,
                 what="S2, now S3's branch, equal to A+B+C+D")  # fmt: skip
        assert rows(loc["s3"]) == union
        with sqlite3.connect(tmp_path / "s3.db") as c:
            seen = c.execute("SELECT id, balance FROM audit").fetchall()
        twice = {v for v in seen if seen.count(v) > 1}
        assert not twice, f"row versions applied twice at S3: {sorted(twice)[:10]}"
    finally:
        for w in writers:
            w.halt.set()
        for proc in procs.values():
            proc.stop()
