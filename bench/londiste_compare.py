"""Londiste 3's ``compare`` and ``repair``, on the tables ``bench.compare`` gives baton's.

A Londiste cascade (:class:`bench.londiste.Cascade`: root -> branch -> leaf on one PostgreSQL
server, ``pgqd``, a worker per node) whose ``accounts`` tables are filled alike by
``generate_series`` before ``add-table`` (``--expect-sync`` on the subscribers: no copy), the
same 100 missing, 100 extra and 100 different rows planted at the branch (with
``session_replication_role = replica``: past Londiste's deny trigger), then timed:
``londiste branch.ini compare public.accounts`` (counts and checksums on both sides, after
waiting for the branch to be in sync), ``londiste branch.ini repair --apply public.accounts``
(both tables dumped, sorted and diffed, the fixes applied) and ``compare`` again.

    .venv/bin/python -m bench.londiste_compare [--rows 1000000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import psycopg

from bench import accounts_load
from bench.common import temp_dir
from bench.compare import FILL, PLANTED
from bench.londiste import NODES, QUEUE, TABLE, Cascade, Settings, ensure_installed


class FilledCascade(Cascade):
    """A Londiste cascade whose tables hold ``rows`` rows alike before they are added."""

    def __init__(self, directory: Path, settings: Settings, rows: int) -> None:
        super().__init__(directory, settings)
        self.rows = rows

    def start(self) -> None:
        self.server.start()
        with psycopg.connect(self.server.url, autocommit=True) as conn:
            for node in NODES:
                conn.execute(f"CREATE DATABASE l_{node}")
        for node in NODES:
            accounts_load.create_table(self.url(node))
            with psycopg.connect(self.url(node)) as conn:
                conn.execute(FILL, (self.rows,))
                conn.execute("ANALYZE accounts")
            self.ini(node).write_text(
                "[londiste]\n"
                f"job_name = londiste_{node}\n"
                f"db = {self.connstr(node)}\n"
                f"queue_name = {QUEUE}\n"
                f"logfile = {self.directory / f'{node}.log'}\n"
                f"pidfile = {self.directory / f'{node}.pid'}\n"
                "use_skylog = 0\n"
                f"loop_delay = {self.settings.loop_delay}\n"
            )
        self.londiste("root", "create-root", "root", self.connstr("root"))
        self.londiste("branch", "create-branch", "branch", self.connstr("branch"),
                      f"--provider={self.connstr('root')}")  # fmt: skip
        self.londiste("leaf", "create-leaf", "leaf", self.connstr("leaf"),
                      f"--provider={self.connstr('branch')}")  # fmt: skip
        self.start_pgqd()
        self.start_workers(*NODES)
        self.londiste("root", "add-table", TABLE)
        for node in NODES[1:]:
            self.londiste(node, "add-table", TABLE, "--expect-sync")
        self.wait_tables_ok(timeout=120)


def plant(url: str, rows: int) -> None:
    step = rows // (3 * PLANTED)
    with psycopg.connect(url) as conn:
        conn.execute("SET session_replication_role = replica")
        for i in range(PLANTED):
            conn.execute("DELETE FROM accounts WHERE id = %s", (1 + i * step,))
            conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (2 + i * step,))
            conn.execute("INSERT INTO accounts VALUES (%s, 0, 'extra', 0)", (rows + 1 + i,))


def run(rows: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": rows}
    with temp_dir("londiste-compare") as directory:
        c = FilledCascade(directory, Settings(), rows)
        try:
            c.start()
            plant(c.url("branch"), rows)
            for name, args in (
                ("compare_diff", ("compare", TABLE)),
                ("repair", ("repair", "--apply", TABLE)),
                ("compare_clean", ("compare", TABLE)),
            ):
                t0 = time.monotonic()
                try:
                    said = c.londiste("branch", *args, timeout=3600)
                    out[f"{name}_s"] = round(time.monotonic() - t0, 2)
                    out[f"{name}_said"] = said.strip()[-300:]
                except Exception as exc:
                    # compare exits 1 when the tables differ ("Results do not match!"): that is
                    # its answer, timed like the others; anything else is reported, not raised.
                    out[f"{name}_s"] = round(time.monotonic() - t0, 2)
                    out[f"{name}_said"] = str(exc)[-300:]
        finally:
            c.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, action="append", help="(repeatable) default 1,000,000")
    args = ap.parse_args()
    print(f"londiste {ensure_installed()}", flush=True)
    for rows in args.rows or [1_000_000]:
        print(run(rows), flush=True)


if __name__ == "__main__":
    main()
