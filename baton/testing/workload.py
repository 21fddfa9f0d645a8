"""A generated row-change workload on an ``accounts`` table (SQLite or PostgreSQL), for cascade
tests, the demo and the benchmarks."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

ACCOUNTS = """CREATE TABLE IF NOT EXISTS accounts (
    id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, name TEXT, updated_at DOUBLE PRECISION
)"""


def _connect(target: Path | str) -> tuple[Any, str]:
    """(connection in autocommit mode, parameter mark) for a SQLite path or a PostgreSQL URL."""
    if isinstance(target, str) and target.startswith(("postgresql:", "postgres:")):
        import psycopg

        return psycopg.connect(target, autocommit=True), "%s"
    path = str(target).removeprefix("sqlite://")
    return sqlite3.connect(path, isolation_level=None, timeout=30), "?"


def create_accounts(target: Path | str) -> None:
    """Create the ``accounts`` table (a SQLite path or file location, or a PostgreSQL URL)."""
    conn, _ = _connect(target)
    try:
        conn.execute(ACCOUNTS)
    finally:
        conn.close()


#: Concurrent writers each keep to their own ids: ``id_base`` up to ``id_base + ID_SPAN``.
ID_SPAN = 10**9


def _execute_retrying(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """``conn.execute`` retried while SQLite answers SQLITE_PROTOCOL: in WAL mode a reader
    frozen (SIGSTOP) in the instant it updates a shared-memory read mark holds that lock, and
    others give up after their own retries with "locking protocol". A transient answer that an
    application retries, as this one does, for up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return conn.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_PROTOCOL or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def run_workload(
    target: Path | str, transactions: int, seed: int = 1, max_rows: int = 20, id_base: int = 0
) -> int:
    """Random inserts (70%), updates (20%) and deletes (10%) in transactions of 1..max_rows
    changes, including rows inserted and deleted in one transaction; the number of changes.
    Only ids from ``id_base`` (below ``id_base + ID_SPAN``) are written, so that writers with
    different bases can run at the same time."""
    rng = random.Random(seed)
    conn, p = _connect(target)
    changes = 0
    begin = "BEGIN IMMEDIATE" if p == "?" else "BEGIN"
    try:
        live: list[int] = [
            r[0]
            for r in _execute_retrying(
                conn,
                f"SELECT id FROM accounts WHERE id > {p} AND id < {p} ORDER BY id",
                (id_base, id_base + ID_SPAN),
            ).fetchall()
        ]
        next_id = max(live, default=id_base) + 1
        for _ in range(transactions):
            _execute_retrying(conn, begin)
            for _ in range(rng.randint(1, max_rows)):
                roll = rng.random()
                if roll < 0.7 or not live:
                    conn.execute(
                        f"INSERT INTO accounts (id, balance, name, updated_at) "
                        f"VALUES ({p}, {p}, {p}, {p})",
                        (next_id, rng.randint(0, 10**6), f"n{next_id}", time.time()),
                    )
                    live.append(next_id)
                    if rng.random() < 0.05:  # inserted and deleted in the same transaction
                        conn.execute(f"DELETE FROM accounts WHERE id = {p}", (next_id,))
                        live.pop()
                        changes += 1
                    next_id += 1
                elif roll < 0.9:
                    key = rng.choice(live)
                    conn.execute(
                        f"UPDATE accounts SET balance = {p}, updated_at = {p} WHERE id = {p}",
                        (rng.randint(0, 10**6), time.time(), key),
                    )
                else:
                    key = live.pop(rng.randrange(len(live)))
                    conn.execute(f"DELETE FROM accounts WHERE id = {p}", (key,))
                changes += 1
            conn.execute("COMMIT")
    finally:
        conn.close()
    return changes


class Writer(threading.Thread):
    """A steady application at ``target``: :func:`run_workload` of ``transactions`` at a time
    (a new seed each call, from ``seed`` on), ``pause`` seconds apart, until :meth:`stop`.
    :attr:`written` holds the changes of each call. A context manager: started on entry,
    stopped on exit."""

    def __init__(
        self, target: Path | str, transactions: int = 10, pause: float = 0.1, seed: int = 0
    ) -> None:
        super().__init__(daemon=True, name=f"writer:{target}")
        self.target = target
        self.transactions = transactions
        self.pause = pause
        self.seed = seed
        self.written: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        seed = self.seed
        while not self.halt.is_set():
            self.written.append(run_workload(self.target, self.transactions, seed=seed))
            seed += 1
            self.halt.wait(self.pause)

    def stop(self, timeout: float = 60) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(timeout)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
