"""Londiste 3's failover of a dead root, beside baton's automatic one (``bench.auto_failover``):
the same question, how soon a steady writer writes again after the root's host is lost, and
how soon the leaf applies that write.

Londiste has no automatic failover: a person notices, runs ``londiste branch.ini takeover
root --dead-root`` and points the writers at the branch. Here that person is instant: the
command starts the moment the root is lost, and the writer moves the moment it returns. So
this measures the least Londiste needs, not a night's page-out.

One trial, on a fresh cascade (``bench.londiste``: root -> branch -> leaf on one PostgreSQL
server, ``pgqd``, a worker per node): a writer inserts a row every 20 ms at the root; once the
leaf applies, the root is lost (its worker SIGKILLed, its database closed to connections and
its sessions ended: what the branch and the writer see of a dead host); the takeover runs;
the writer moves to the branch. **write**: from the loss to the first insert committed at the
branch; **leaf**: to the leaf holding that row; **takeover**: how long the command ran.

    .venv/bin/python -m bench.londiste_dead_root [--trials 3]
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import psycopg

from bench.common import quantile
from bench.londiste import Cascade, Settings, cascade, ensure_installed


class Writer(threading.Thread):
    """Inserts a row every ``interval`` at ``url``; :meth:`move_to` points it elsewhere.
    ``acked``: (id, url, the monotonic time its commit returned)."""

    def __init__(self, url: str, interval: float = 0.02) -> None:
        super().__init__(daemon=True, name="londiste-writer")
        self.url = url
        self.interval = interval
        self.acked: list[tuple[int, str, float]] = []
        self.halt = threading.Event()
        self._next = 10**9  # above the cascade's own rows

    def move_to(self, url: str) -> None:
        self.url = url

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        at = ""
        while not self.halt.wait(self.interval):
            try:
                if conn is None or at != self.url:
                    if conn is not None:
                        conn.close()
                    at = self.url
                    conn = psycopg.connect(at, autocommit=True, connect_timeout=2)
                id_ = self._next
                self._next += 1
                conn.execute(
                    "INSERT INTO accounts (id, balance, name, updated_at) VALUES (%s, 0, 'w', %s)",
                    (id_, time.time()),
                )
                self.acked.append((id_, at, time.monotonic()))
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None  # the root is gone: try again (at the new root once moved)
        if conn is not None:
            conn.close()


def _has(url: str, id_: int) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM accounts WHERE id = %s", (id_,)).fetchone() is not None


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def lose_root(c: Cascade) -> None:
    """The root's host is gone, as the branch and the writer see it."""
    worker = c.workers.pop("root")
    worker.kill()
    worker.wait()
    with psycopg.connect(c.server.url, autocommit=True) as admin:
        admin.execute("ALTER DATABASE l_root ALLOW_CONNECTIONS false")
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = 'l_root' AND pid <> pg_backend_pid()"
        )


def trial(settings: Settings) -> dict[str, float]:
    with cascade(settings) as c:
        writer = Writer(c.url("root"))
        writer.start()
        try:
            _wait(lambda: len(writer.acked) > 20, 60, "writes at the root")
            last = writer.acked[-1][0]
            _wait(lambda: _has(c.url("leaf"), last), 120, "the leaf to apply")
            lost_at = time.monotonic()
            lose_root(c)
            c.londiste("branch", "takeover", "root", "--dead-root")
            took = time.monotonic() - lost_at
            writer.move_to(c.url("branch"))
            branch = c.url("branch")
            first = _wait(
                lambda: next((a for a in writer.acked if a[1] == branch), None),
                60,
                "a write at the branch",
            )
            _wait(lambda: _has(c.url("leaf"), first[0]), 120, "the leaf to apply it")
            leaf = time.monotonic() - lost_at
        finally:
            writer.halt.set()
            writer.join(10)
        return {"write_s": first[2] - lost_at, "leaf_s": leaf, "takeover_s": took}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    version = ensure_installed()
    results = []
    for k in range(args.trials):
        r = trial(Settings())
        results.append(r)
        print(
            f"trial {k}: takeover {r['takeover_s']:.2f} s, write {r['write_s']:.2f} s, "
            f"leaf {r['leaf_s']:.2f} s",
            flush=True,
        )
    writes = [r["write_s"] for r in results]
    leaves = [r["leaf_s"] for r in results]
    print(
        f"londiste {version} takeover --dead-root ({len(results)} trials, the settings of "
        f"bench.londiste): write p50 {quantile(writes, 0.5):.2f} / max {max(writes):.2f} s; "
        f"leaf p50 {quantile(leaves, 0.5):.2f} / max {max(leaves):.2f} s"
    )


if __name__ == "__main__":
    main()
