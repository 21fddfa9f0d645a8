"""The workload that the cascade benchmarks share (baton's ``bench/cascade.py`` and the Londiste 3
reference in ``bench/londiste.py``), so that both systems are measured in the same way.

All three functions work on an ``accounts`` table (:data:`baton.testing.workload.ACCOUNTS`) in a
SQLite file (a path, or ``sqlite://`` + path) or a PostgreSQL database (a ``postgresql://`` URL):

- :func:`generate` writes a backlog of row changes as fast as it can: about 70% inserts, 20%
  updates and 10% deletes of existing rows, in transactions of ``min_tx..max_tx`` rows, with ids
  that only increase. Every change is one row of an ordinary ``INSERT``/``UPDATE``/``DELETE``
  statement (no ``COPY``, no ``TRUNCATE``), so row-level triggers (baton's capture, PgQ's
  ``logutriga``) see every change. On PostgreSQL each kind is one set-based statement per
  transaction (``unnest`` of arrays); on SQLite ``executemany`` in one transaction.
- :func:`steady` writes transactions of 100 changes at a fixed rate on a root and measures how
  long each takes to become visible on a leaf.
- :func:`wait_equal` waits until a leaf's table equals the root's.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baton.testing.workload import ACCOUNTS

__all__ = [
    "ACCOUNTS",
    "Txn",
    "create_table",
    "generate",
    "plan",
    "signature",
    "steady",
    "wait_equal",
]

Target = Path | str

#: The share of inserts and of updates among the changes (the rest are deletes).
INSERT_SHARE = 0.7
UPDATE_SHARE = 0.2

#: Tables up to this many rows are compared row by row by :func:`wait_equal`.
SMALL_TABLE = 10_000


def _is_postgres(target: Target) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql:", "postgres:"))


def _sqlite_path(target: Target) -> str:
    return str(target).removeprefix("sqlite://")


# -- the plan: which rows each transaction changes ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Txn:
    """One transaction of the workload, applied in this order: the inserts (``(id, balance,
    name, updated_at)``, ids increasing), then the updates (``(balance, updated_at, id)``, each
    id once, of rows that exist after the inserts), then the deletes (ids, each once, of rows
    that exist after the inserts; a row may be updated and then deleted)."""

    inserts: list[tuple[int, int, str, float]]
    updates: list[tuple[int, float, int]]
    deletes: list[int]

    @property
    def size(self) -> int:
        return len(self.inserts) + len(self.updates) + len(self.deletes)

    @property
    def max_inserted(self) -> int | None:
        return self.inserts[-1][0] if self.inserts else None


def plan(
    rng: random.Random,
    live: list[int],
    next_id: int,
    sizes: Iterator[int],
    *,
    force_insert: bool = False,
) -> Iterator[Txn]:
    """Transactions of the given sizes over the ``live`` ids (updated in place: the ids that
    exist after each transaction), inserting from ``next_id`` on. Each change is one row event:
    updates and deletes never name a row twice in a transaction and only name existing rows.
    With ``force_insert`` every transaction inserts at least one row and keeps the highest id
    it inserted (it may update it, but does not delete it)."""
    for size in sizes:
        n_ins = n_upd = n_del = 0
        for _ in range(size):
            roll = rng.random()
            if roll < INSERT_SHARE:
                n_ins += 1
            elif roll < INSERT_SHARE + UPDATE_SHARE:
                n_upd += 1
            else:
                n_del += 1
        if force_insert and n_ins == 0:
            if n_upd:
                n_upd -= 1
            else:
                n_del -= 1
            n_ins = 1
        # Early on there may be too few rows to update or delete: insert instead. With
        # force_insert the highest new id is never deleted in its own transaction (steady()
        # watches for it on the leaf).
        keep = 1 if force_insert else 0
        while n_upd > len(live) + n_ins or n_del > len(live) + n_ins - keep:
            if n_upd > len(live) + n_ins:
                n_upd -= 1
            else:
                n_del -= 1
            n_ins += 1
        now = time.time()
        inserts = []
        for key in range(next_id, next_id + n_ins):
            inserts.append((key, rng.randrange(10**6), f"n{key}", now))
            live.append(key)
        next_id += n_ins
        updates = [(rng.randrange(10**6), now, key) for key in rng.sample(live, n_upd)]
        protected = live.pop() if keep else None
        deletes = []
        for _ in range(n_del):
            # Swap the chosen id with the last one and pop it: O(1) per delete.
            pos = rng.randrange(len(live))
            live[pos], live[-1] = live[-1], live[pos]
            deletes.append(live.pop())
        if protected is not None:
            live.append(protected)
        yield Txn(inserts, updates, deletes)


# -- writers -----------------------------------------------------------------------------------


class _Writer:
    """Applies :class:`Txn` to one database, each in one transaction."""

    def __init__(self, target: Target) -> None:
        self.postgres = _is_postgres(target)
        self.conn: Any
        if self.postgres:
            import psycopg

            self.conn = psycopg.connect(str(target), autocommit=False)
        else:
            self.conn = sqlite3.connect(_sqlite_path(target), isolation_level=None, timeout=60)

    def create_table(self) -> None:
        self.conn.execute(ACCOUNTS)
        if self.postgres:
            self.conn.commit()

    def state(self) -> tuple[list[int], int]:
        """(the ids in the table, the next id to insert)."""
        rows = self.conn.execute("SELECT id FROM accounts").fetchall()
        if self.postgres:
            self.conn.commit()
        live = [int(r[0]) for r in rows]
        return live, max(live, default=0) + 1

    def apply(self, txn: Txn) -> None:
        if self.postgres:
            self._apply_postgres(txn)
        else:
            self._apply_sqlite(txn)

    def _apply_postgres(self, txn: Txn) -> None:
        cur = self.conn.cursor()
        if txn.inserts:
            ids, balances, names, times = zip(*txn.inserts, strict=True)
            cur.execute(
                "INSERT INTO accounts (id, balance, name, updated_at) "
                "SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::float8[])",
                (list(ids), list(balances), list(names), list(times)),
            )
        if txn.updates:
            balances, times, ids = zip(*txn.updates, strict=True)
            cur.execute(
                "UPDATE accounts AS a SET balance = u.balance, updated_at = u.updated_at "
                "FROM unnest(%s::bigint[], %s::float8[], %s::bigint[]) "
                "AS u(balance, updated_at, id) WHERE a.id = u.id",
                (list(balances), list(times), list(ids)),
            )
        if txn.deletes:
            cur.execute("DELETE FROM accounts WHERE id = ANY(%s::bigint[])", (txn.deletes,))
        self.conn.commit()

    def _apply_sqlite(self, txn: Txn) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            if txn.inserts:
                conn.executemany(
                    "INSERT INTO accounts (id, balance, name, updated_at) VALUES (?, ?, ?, ?)",
                    txn.inserts,
                )
            if txn.updates:
                conn.executemany(
                    "UPDATE accounts SET balance = ?, updated_at = ? WHERE id = ?", txn.updates
                )
            if txn.deletes:
                conn.executemany("DELETE FROM accounts WHERE id = ?", [(k,) for k in txn.deletes])
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


def create_table(target: Target) -> None:
    """Create the ``accounts`` table if it does not exist."""
    writer = _Writer(target)
    try:
        writer.create_table()
    finally:
        writer.close()


def _sizes(changes: int, rng: random.Random, min_tx: int, max_tx: int) -> Iterator[int]:
    left = changes
    while left > 0:
        size = min(rng.randint(min_tx, max_tx), left)
        left -= size
        yield size


def generate(
    target: Target,
    changes: int,
    seed: int,
    min_tx: int = 100,
    max_tx: int = 1000,
    *,
    show: bool = False,
) -> int:
    """Write exactly ``changes`` row changes to ``accounts`` at ``target`` (created if missing) as
    fast as possible, in transactions of ``min_tx..max_tx`` changes (the last one may be
    smaller); about 70% inserts with ids above any existing one, 20% updates and 10% deletes of
    existing rows. Returns the number of changes (``changes``). ``show``: a progress bar on
    stderr."""
    if not 1 <= min_tx <= max_tx:
        raise ValueError(f"bad transaction bounds {min_tx}..{max_tx}")
    rng = random.Random(seed)
    writer = _Writer(target)
    try:
        writer.create_table()
        live, next_id = writer.state()
        total = 0
        with _progress(show, changes, "generating changes") as advance:
            for txn in plan(rng, live, next_id, _sizes(changes, rng, min_tx, max_tx)):
                writer.apply(txn)
                total += txn.size
                advance(txn.size)
        return total
    finally:
        writer.close()


@contextlib.contextmanager
def _progress(show: bool, total: int, what: str) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr while the block runs (nothing when ``show`` is false)."""
    if not show:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


def insert_marker(target: Target) -> int:
    """One row in ``accounts`` at ``target`` with an id above every other, committed when this
    returns; its id. (One statement: reading every id first took a second on a large table, which
    a switchover's timing must not include.)"""
    writer = _Writer(target)
    try:
        row = writer.conn.execute(
            "INSERT INTO accounts (id, balance, name, updated_at) "
            "SELECT coalesce(max(id), 0) + 1, 0, 'marker', 0 FROM accounts RETURNING id"
        ).fetchone()
        if writer.postgres:
            writer.conn.commit()
        assert row is not None
        return int(row[0])
    finally:
        writer.close()


# -- reading -----------------------------------------------------------------------------------


class Reader:
    """An autocommit connection (every query sees the latest commits, and a PostgreSQL reader
    holds no snapshot between queries)."""

    def __init__(self, target: Target) -> None:
        self.conn: Any
        if _is_postgres(target):
            import psycopg

            self.conn = psycopg.connect(str(target), autocommit=True)
        else:
            self.conn = sqlite3.connect(_sqlite_path(target), isolation_level=None, timeout=60)

    def max_id(self) -> int:
        row = self.conn.execute("SELECT max(id) FROM accounts").fetchone()
        return -1 if row is None or row[0] is None else int(row[0])

    def signature(self) -> tuple[int, int]:
        row = self.conn.execute(
            "SELECT count(*), coalesce(sum(id * 31 + balance), 0) FROM accounts"
        ).fetchone()
        return int(row[0]), int(row[1])

    def rows(self) -> list[tuple[Any, ...]]:
        rows = self.conn.execute(
            "SELECT id, balance, name, updated_at FROM accounts ORDER BY id"
        ).fetchall()
        return [tuple(r) for r in rows]

    def close(self) -> None:
        self.conn.close()


def signature(target: Target) -> tuple[int, int]:
    """(row count, sum of ``id * 31 + balance``) of ``accounts`` at ``target``."""
    reader = Reader(target)
    try:
        return reader.signature()
    finally:
        reader.close()


def wait_equal(
    root: Target,
    leaf: Target,
    timeout: float,
    poll: float = 0.05,
    start: float | None = None,
) -> float:
    """Wait until ``accounts`` on ``leaf`` equals the one on ``root``; the seconds it took,
    counted from ``start`` (a :func:`time.monotonic` value; default: now). Raises
    :class:`TimeoutError` after ``timeout`` seconds.

    Each poll first compares ``max(id)`` (an index lookup), and only when that matches the
    count and a checksum (``sum(id * 31 + balance)``) of both sides, or for tables of at most
    :data:`SMALL_TABLE` rows the full sorted content; so polling a large table that is still far
    behind costs almost nothing. The time is taken when the successful poll began: the result is
    at most one poll interval (plus the query time) late."""
    t0 = time.monotonic() if start is None else start
    deadline = time.monotonic() + timeout
    src, dst = Reader(root), Reader(leaf)
    try:
        while True:
            seen = time.monotonic()
            if dst.max_id() == src.max_id():
                sig = src.signature()
                if dst.signature() == sig and (sig[0] > SMALL_TABLE or dst.rows() == src.rows()):
                    return seen - t0
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"leaf {dst.signature()} != root {src.signature()} after {timeout}s"
                )
            time.sleep(poll)
    finally:
        src.close()
        dst.close()


# -- steady rate and lag ---------------------------------------------------------------------


def _quantile(samples: Sequence[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def steady(
    root_target: Target,
    leaf_target: Target,
    rate: float,
    seconds: float,
    seed: int,
    *,
    tx_size: int = 100,
    probe_interval: float = 0.01,
    drain: float = 60.0,
) -> dict[str, Any]:
    """Write transactions of ``tx_size`` changes (the :func:`generate` mix, at least one insert
    each) on ``root_target`` at ``rate`` changes per second for ``seconds``, and measure each
    one's lag: the time from its commit to the first probe of ``leaf_target`` that sees it.

    A prober thread reads ``SELECT max(id) FROM accounts`` on the leaf every
    ``probe_interval`` seconds. A transaction counts as visible once the leaf's ``max(id)``
    reaches the highest id it inserted. This is sound because there is one writer and ids only
    increase: the transaction that inserted id N committed after every earlier transaction, and
    both systems apply the root's transactions in commit order and atomically (a batch of
    events, then its position, in one transaction), so a leaf holding id N holds all of that
    transaction and every earlier one. Every transaction inserts an id above all earlier ones and
    does not delete that id itself, so the leaf's ``max(id)`` never goes down between
    transactions: later deletes cannot hide an earlier transaction from the prober.

    After ``seconds`` the writer stops and the prober keeps going until every transaction was
    seen or ``drain`` seconds passed. Returns the lag quantiles in seconds (``p50``, ``p99``,
    ``max``, ``mean``), ``rate`` (asked) and ``achieved_rate`` (changes per second),
    ``samples`` (transactions seen), ``transactions`` and ``unseen``."""
    if rate <= 0 or seconds <= 0:
        raise ValueError("rate and seconds must be positive")
    rng = random.Random(seed)
    writer = _Writer(root_target)
    writer.create_table()
    live, next_id = writer.state()
    pending: deque[tuple[int, float]] = deque()  # (highest inserted id, commit wall time)
    lock = threading.Lock()
    lags: list[float] = []
    series: list[tuple[float, float]] = []  # (seconds since the start, lag) per transaction
    started = time.time()
    writing = threading.Event()
    writing.set()
    errors: list[BaseException] = []

    def probe() -> None:
        reader = Reader(leaf_target)
        try:
            drain_deadline: float | None = None
            while True:
                top = reader.max_id()
                now = time.time()
                with lock:
                    # Only transactions whose commit had returned before this probe returned
                    # count as seen by it, so that no lag is negative; one the probe saw before
                    # the writer recorded it is taken by the next probe (<= probe_interval late).
                    while pending and pending[0][0] <= top and pending[0][1] <= now:
                        committed = pending.popleft()[1]
                        lags.append(now - committed)
                        series.append((committed - started, now - committed))
                    empty = not pending
                if not writing.is_set():
                    if empty:
                        return
                    if drain_deadline is None:
                        drain_deadline = time.monotonic() + drain
                    elif time.monotonic() > drain_deadline:
                        return
                time.sleep(probe_interval)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        finally:
            reader.close()

    prober = threading.Thread(target=probe, name="lag-prober", daemon=True)
    prober.start()
    interval = tx_size / rate
    sizes = iter(lambda: tx_size, 0)  # an endless supply of tx_size
    transactions = changes = 0
    t0 = time.monotonic()
    end = t0 + seconds
    try:
        for txn in plan(rng, live, next_id, sizes, force_insert=True):
            due = t0 + transactions * interval
            if due >= end:
                break
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            writer.apply(txn)
            committed = time.time()
            top = txn.max_inserted
            assert top is not None  # force_insert
            with lock:
                pending.append((top, committed))
            transactions += 1
            changes += txn.size
            if errors:
                break
        elapsed = time.monotonic() - t0
    finally:
        writing.clear()
        writer.close()
        prober.join()
    if errors:
        raise errors[0]
    return {
        "rate": rate,
        "achieved_rate": changes / elapsed if elapsed > 0 else 0.0,
        "seconds": elapsed,
        "transactions": transactions,
        "changes": changes,
        "samples": len(lags),
        "unseen": len(pending),
        "p50": _quantile(lags, 0.5),
        "p99": _quantile(lags, 0.99),
        "max": max(lags, default=float("nan")),
        "mean": sum(lags) / len(lags) if lags else float("nan"),
        "series": [(round(t, 3), round(lag, 4)) for t, lag in series],
    }


def catch_up(
    root: Target,
    branch: Target,
    leaf: Target,
    changes: int,
    *,
    seed: int,
    stop: Callable[[], None],
    start: Callable[[], None],
) -> dict[str, float]:
    """The throughput measurement both cascade benchmarks make: ``stop`` the subscribers,
    :func:`generate` ``changes`` on ``root``, ``start`` them again and time until ``branch``
    and ``leaf`` equal ``root``."""
    stop()
    t = time.monotonic()
    generate(root, changes, seed, show=changes >= 100_000)
    gen = time.monotonic() - t
    timeout = max(600.0, changes / 500)
    branch_s: list[float] = []
    t0 = time.monotonic()
    start()

    def wait_branch() -> None:
        with contextlib.suppress(TimeoutError):
            branch_s.append(wait_equal(root, branch, timeout, 0.2, t0))

    waiter = threading.Thread(target=wait_branch, daemon=True)
    waiter.start()
    leaf_s = wait_equal(root, leaf, timeout, 0.2, t0)
    waiter.join()
    to_branch = branch_s[0] if branch_s else float("nan")
    return {
        "changes": changes,
        "generate_s": gen,
        "generate_per_s": changes / gen,
        "root_to_branch_s": to_branch,
        "root_to_branch_per_s": changes / to_branch,
        "root_to_leaf_s": leaf_s,
        "events_per_s": changes / leaf_s,
    }


def switchovers(
    target: Callable[[str], Target],
    switch: Callable[[str, str], object],
    trials: int,
    rate: int = 2000,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Planned switchovers under a steady writer, measured the same way for every system:
    the root alternates between the nodes ``root`` and ``branch`` (the leaf stays under
    ``branch``). Each trial: a writer at ``rate`` changes/s on the root for 2 s stops (the
    application's step before a switch), at once ``switch(old, new)`` runs, then one marker row
    is written at the new root. Times from the command to the marker's commit (the writers'
    gap) and to the leaf showing it; after the last trial, how many nodes differ from the root.
    ``target(node)`` is where a node's tables are."""
    accepted: list[float] = []
    at_leaf: list[float] = []
    for i in range(trials):
        old, new = ("root", "branch") if i % 2 == 0 else ("branch", "root")
        steady(target(old), target("leaf"), rate, 2.0, seed=200 + i, drain=0.0)
        t0 = time.monotonic()
        switch(old, new)
        marker = insert_marker(target(new))
        accepted.append(time.monotonic() - t0)
        leaf = Reader(target("leaf"))
        try:
            deadline = time.monotonic() + timeout
            while leaf.max_id() < marker:
                if time.monotonic() > deadline:
                    raise TimeoutError("the leaf did not show the row written after a switch")
                time.sleep(0.002)
        finally:
            leaf.close()
        at_leaf.append(time.monotonic() - t0)
    root = target("root" if trials % 2 == 0 else "branch")
    others = (target("branch" if trials % 2 == 0 else "root"), target("leaf"))
    for other in others:
        wait_equal(root, other, timeout)
    return {
        "trials": trials,
        "rate": rate,
        "to_new_root_write_s": accepted,
        "to_leaf_s": at_leaf,
        "to_new_root_write_p50": _quantile(accepted, 0.5),
        "to_leaf_p50": _quantile(at_leaf, 0.5),
        "to_leaf_max": max(at_leaf),
        "nodes_differing": sum(signature(o) != signature(root) for o in others),
    }
