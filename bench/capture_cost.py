"""What capture costs the writer at a root, in seconds rather than minutes.

One PostgreSQL 15 server (:class:`~baton.testing.servers.PostgresServer`, fsync off as in the
cascade benchmark), one fresh database per variant, and the same writer: N changes of the
:mod:`bench.accounts_load` workload (70% inserts, 20% updates, 10% deletes, one set-based
statement per kind in transactions of 100-1000 rows; or ``--single-row``: one statement per
row, as many applications write) into ``accounts``, timed on the client. Variants:

- ``none``: no trigger (the floor);
- ``empty``: a PL/pgSQL row trigger that returns at once (what calling a row trigger costs);
- ``empty_set``: the same with the ``SET search_path``/``SET extra_float_digits`` clauses of
  baton's capture function (what applying and restoring them on every call costs);
- ``baton``: baton's capture, installed by ``create_root`` + ``add_table`` (the code paths a
  user runs), whatever shape it has in this checkout;
- ``pgq``: PgQ's ``logutriga`` on a PgQ queue (the C trigger Londiste installs), when the
  ``pgq`` extension is installed.

Every variant runs ``--repeat`` times, interleaved (A B C A B C ...), and the best and median
changes/s are printed, with the ratio of baton to PgQ.

``--roots``: the cascade benchmarks' "writing 1M changes at the root" row, both systems in one
run: a Londiste 3 cascade as :mod:`bench.londiste` sets it up (``pgqd`` ticking, the
subscribers' workers stopped, as its throughput measurement has them while it writes) and, on
the same server, a baton root whose ticker runs as ``baton cascade run`` runs it (the default
:class:`~baton.cascade.ticker.TickerConfig`), written to alternately with
:func:`bench.accounts_load.generate` (``--changes`` each, default 1M).

    .venv/bin/python -m bench.capture_cost [--changes 200000] [--repeat 3] [--single-row]
    .venv/bin/python -m bench.capture_cost --roots [--changes 1000000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg

from baton.cascade import node_ops
from baton.cascade.db import open_node_db
from baton.cascade.ticker import TickerConfig, tick_once
from baton.testing.servers import PostgresServer
from bench import accounts_load, londiste
from bench.common import loadavg, temp_dir

_EMPTY = """
CREATE FUNCTION bench_empty() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RETURN NULL; END $$;
CREATE TRIGGER bench_empty AFTER INSERT OR UPDATE OR DELETE ON accounts
FOR EACH ROW EXECUTE FUNCTION bench_empty();
"""

_EMPTY_SET = """
CREATE FUNCTION bench_empty_set() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET extra_float_digits = 3 AS $$
BEGIN RETURN NULL; END $$;
CREATE TRIGGER bench_empty_set AFTER INSERT OR UPDATE OR DELETE ON accounts
FOR EACH ROW EXECUTE FUNCTION bench_empty_set();
"""

# As Londiste's add-table installs it (londiste.create_trigger), minus the TRUNCATE trigger.
_PGQ = """
CREATE EXTENSION IF NOT EXISTS pgq;
SELECT pgq.create_queue('bench');
CREATE TRIGGER bench_pgq AFTER INSERT OR UPDATE OR DELETE ON accounts
FOR EACH ROW EXECUTE PROCEDURE pgq.logutriga('bench');
"""


def _sql_setup(script: str) -> Callable[[str], None]:
    def setup(url: str) -> None:
        accounts_load.create_table(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(script)

    return setup


def _baton_setup(url: str) -> None:
    accounts_load.create_table(url)
    node_ops.create_root("root", url, "bench")
    node_ops.add_table(url, "accounts")


def _pgq_available() -> bool:
    return Path("/usr/share/postgresql/15/extension/pgq.control").exists()


VARIANTS: dict[str, Callable[[str], None]] = {
    "none": accounts_load.create_table,
    "empty": _sql_setup(_EMPTY),
    "empty_set": _sql_setup(_EMPTY_SET),
    "baton": _baton_setup,
    "pgq": _sql_setup(_PGQ),
}


def _sizes(changes: int, rng: random.Random) -> Iterator[int]:
    left = changes
    while left > 0:
        size = min(rng.randint(100, 1000), left)
        left -= size
        yield size


def _single_rows(url: str, changes: int, seed: int) -> int:
    """The workload with one statement per row (``executemany`` in each transaction)."""
    rng = random.Random(seed)
    done = 0
    with psycopg.connect(url) as conn:
        for txn in accounts_load.plan(rng, [], 1, _sizes(changes, rng)):
            with conn.cursor() as cur:
                if txn.inserts:
                    cur.executemany(
                        "INSERT INTO accounts (id, balance, name, updated_at) "
                        "VALUES (%s, %s, %s, %s)",
                        txn.inserts,
                    )
                if txn.updates:
                    cur.executemany(
                        "UPDATE accounts SET balance = %s, updated_at = %s WHERE id = %s",
                        txn.updates,
                    )
                if txn.deletes:
                    cur.executemany(
                        "DELETE FROM accounts WHERE id = %s", [(k,) for k in txn.deletes]
                    )
            conn.commit()
            done += txn.size
    return done


def measure(
    server: PostgresServer, variant: str, changes: int, round_: int, single_row: bool
) -> float:
    """Changes/s writing ``changes`` into a fresh database set up as ``variant``."""
    name = f"cap_{variant}_{round_}"
    with psycopg.connect(server.url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    url = server.url.rsplit("/", 1)[0] + f"/{name}"
    try:
        VARIANTS[variant](url)
        start = time.perf_counter()
        if single_row:
            written = _single_rows(url, changes, seed=7)
        else:
            written = accounts_load.generate(url, changes, seed=7)
        return written / (time.perf_counter() - start)
    finally:
        with psycopg.connect(server.url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _ticker(url: str, stop: threading.Event) -> None:
    """The root's ticker, as a node service runs it: a tick when one is due, every period."""
    cfg = TickerConfig()
    while not stop.wait(cfg.period):
        with open_node_db(url) as db:
            tick_once(db, cfg, time.time())


def roots(changes: int, repeat: int) -> dict[str, list[float]]:
    """Changes/s written at a Londiste root and a baton root (see the module docstring)."""
    out: dict[str, list[float]] = {"baton": [], "londiste": []}
    with temp_dir("roots") as directory:
        cascade = londiste.Cascade(directory, londiste.Settings())
        try:
            cascade.start()
            cascade.stop_workers("branch", "leaf")
            with psycopg.connect(cascade.server.url, autocommit=True) as admin:
                admin.execute("CREATE DATABASE b_root")
            url = cascade.server.url.rsplit("/", 1)[0] + "/b_root"
            _baton_setup(url)
            stop = threading.Event()
            ticker = threading.Thread(target=_ticker, args=(url, stop), daemon=True)
            ticker.start()
            try:
                for r in range(repeat):
                    for name, target in (("baton", url), ("londiste", cascade.url("root"))):
                        start = time.perf_counter()
                        written = accounts_load.generate(target, changes, seed=100 + r)
                        out[name].append(written / (time.perf_counter() - start))
            finally:
                stop.set()
                ticker.join()
        finally:
            cascade.stop()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--single-row", action="store_true", help="one statement per row")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS)
    )
    parser.add_argument("--roots", action="store_true", help="baton and Londiste roots")
    args = parser.parse_args(argv)
    if args.roots:
        by_system = roots(args.changes, args.repeat)
        print(f"{args.changes:,} changes per round, {args.repeat} rounds, load {loadavg():.1f}")
        for name, values in by_system.items():
            print(f"{name:<9} " + "  ".join(f"{v:,.0f}/s" for v in values))
        ratio = statistics.median(by_system["baton"]) / statistics.median(by_system["londiste"])
        print(f"baton / londiste (medians): {ratio:.2f}x")
        return
    variants = [v for v in args.variants.split(",") if v != "pgq" or _pgq_available()]
    results: dict[str, list[float]] = {v: [] for v in variants}
    with temp_dir("capture") as directory, PostgresServer(directory / "pg") as server:
        for r in range(args.repeat):
            for v in variants:
                results[v].append(measure(server, v, args.changes, r, args.single_row))
    shape = "one statement per row" if args.single_row else "set-based statements"
    print(f"{args.changes:,} changes, {shape}, {args.repeat} rounds, load {loadavg():.1f}")
    print(f"{'variant':<10} {'best/s':>9} {'median/s':>9} {'us/change':>9}")
    for v, rates in results.items():
        best, median = max(rates), statistics.median(rates)
        print(f"{v:<10} {best:>9,.0f} {median:>9,.0f} {1e6 / median:>9.1f}")
    if "baton" in results and "pgq" in results:
        ratio = statistics.median(results["baton"]) / statistics.median(results["pgq"])
        print(f"baton / pgq (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
