"""Synchronous mode's cost, as a floor: a writer's commit latency through
:class:`baton.RootWriter` with ``sync`` 0 and 1, in one process, on SQLite and PostgreSQL node
databases (root s1, branch s2). The root's ticker runs in a thread at its defaults (period and
max lag 50 ms), and s2's worker is a thread that applies batches by hand, polling every 2 ms
(no Spark: a real worker adds its micro-batch's latency). So this is the least sync mode costs
on this machine, not a benchmark of a deployment.

    .venv/bin/python -m bench.sync_latency [--commits 200]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from baton import RootWriter
from baton.cascade import commands, node_ops
from baton.cascade.apply import apply_batch
from baton.cascade.batches import reduce_events
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.ticker import TickerConfig, tick_once
from baton.errors import BatonError
from baton.testing.servers import PostgresServer
from bench.common import quantile

ACCOUNTS = "CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)"


def build(s1: str, s2: str) -> None:
    commands.create_root("s1", s1, "S")
    commands.create_subscriber(Role.BRANCH, "s2", s2, "s1", s1)
    commands.add_table(s1, "accounts", None, True)
    node_ops.copy_table(s2, "accounts")


def catch_up(location: str) -> None:
    """s2's worker, by hand: apply whatever its provider ticked."""
    with open_node_db(location) as db:
        st = db.state()
        assert st.provider is not None
        with open_node_db(db.nodes()[st.provider][0], readonly=True) as prov:
            last = prov.last_tick()
            if last is None or last.tick_id <= st.position:
                return
            ticks = prov.ticks(st.position, last.tick_id)
            events = list(prov.batch_events(st.position, last.tick_id))
        apply_batch(db, ticks, reduce_events(events), events, epoch=1, provider=st.provider)


@contextmanager
def running(s1: str, s2: str) -> Iterator[None]:
    """The root's ticker and s2's worker, in threads, while the block runs."""
    halt = threading.Event()
    cfg = TickerConfig()

    def ticker() -> None:
        while not halt.wait(cfg.period):
            try:
                with open_node_db(s1) as db:
                    tick_once(db, cfg, time.time())
            except BatonError:
                continue

    def worker() -> None:
        while not halt.wait(0.002):
            try:
                catch_up(s2)
            except BatonError:
                continue

    threads = [threading.Thread(target=f, daemon=True) for f in (ticker, worker)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        halt.set()
        for t in threads:
            t.join(10)


def insert(n: int) -> Callable[[Any], object]:
    def run(cur: Any) -> object:
        return cur.execute(f"INSERT INTO accounts VALUES ({n}, {n})")

    return run


def measure(s1: str, s2: str, commits: int) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    key = 0
    with running(s1, s2):
        for k in (0, 1):
            took = []
            with RootWriter("S", via=s1, sync=k, sync_timeout=30) as writer:
                for _ in range(commits):
                    key += 1
                    start = time.perf_counter()
                    writer.run(insert(key))
                    took.append(time.perf_counter() - start)
            out[k] = took
    return out


def report(backend: str, found: dict[int, list[float]]) -> None:
    for k, took in found.items():
        ms = [t * 1000 for t in took]
        print(
            f"{backend:10s} sync={k}  commits={len(ms)}  p50={quantile(ms, 0.5):6.1f} ms  "
            f"p99={quantile(ms, 0.99):6.1f} ms  max={max(ms):6.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for n in ("s1", "s2"):
            with sqlite3.connect(d / f"{n}.db") as conn:
                conn.execute(ACCOUNTS)
        s1, s2 = (f"sqlite://{d / n}.db" for n in ("s1", "s2"))
        build(s1, s2)
        report("sqlite", measure(s1, s2, args.commits))

        server = PostgresServer(d / "pg").start()
        try:
            names = ["b" + uuid.uuid4().hex[:12] for _ in range(2)]
            with psycopg.connect(server.url, autocommit=True) as admin:
                for name in names:
                    admin.execute(f'CREATE DATABASE "{name}"')
            p1, p2 = (server.url.rsplit("/", 1)[0] + "/" + n for n in names)
            for loc in (p1, p2):
                with psycopg.connect(loc) as conn:
                    conn.execute(ACCOUNTS)
            build(p1, p2)
            report("postgresql", measure(p1, p2, args.commits))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
