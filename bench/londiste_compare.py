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
from collections.abc import Callable
from typing import Any

import psycopg

from bench.common import temp_dir
from bench.compare import FILL, PLANTED
from bench.londiste import TABLE, Cascade, Settings, ensure_installed


def _filler(rows: int) -> Callable[[str], None]:
    def fill(url: str) -> None:
        with psycopg.connect(url) as conn:
            conn.execute(FILL, (rows,))
            conn.execute("ANALYZE accounts")

    return fill


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
        c = Cascade(directory, Settings(), fill=_filler(rows))
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
