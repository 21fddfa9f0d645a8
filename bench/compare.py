"""``compare`` and ``repair`` on PostgreSQL node databases (issue 31), beside reladiff.

The set: root s1 and branch s2 on one PostgreSQL server, ``accounts`` (the accounts workload's
shape) with ``--rows`` rows made alike on both by ``generate_series`` (the branch's table is
registered ok at the root's tick without a Spark copy: this measures the comparison, not the
copy). Then 100 differences of each kind are planted at s2 (missing, extra, different), and:

- **compare, differences**: ``compare`` finds exactly those 300;
- **repair**: changes exactly those rows;
- **compare, clean**: ``compare`` again, nothing found;
- **reladiff** (PyPI, its default bisection on checksums) on the same two tables, before the
  repair (it must find the 300) and after (clean).

Spark: one local session, ``local[2]``, built before the clock starts.

    .venv/bin/python -m bench.compare [--rows 1000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from baton.cascade import commands, node_ops, table_diff
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.set_ops import CascadeSet
from baton.cascade.table_diff import Kind
from baton.testing.servers import PostgresServer

ACCOUNTS = (
    "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, name text, "
    "updated_at double precision)"
)
FILL = (
    "INSERT INTO accounts SELECT g, g * 7 %% 100000, 'acct-' || g, g / 3.0 "
    "FROM generate_series(1, %s) AS g"
)
#: Differences of each kind planted at the branch.
PLANTED = 100


def build(server: PostgresServer, rows: int) -> dict[str, str]:
    names = {n: f"b{uuid.uuid4().hex[:10]}" for n in ("s1", "s2")}
    loc = {n: f"postgresql://postgres@127.0.0.1:{server.port}/{d}" for n, d in names.items()}
    with psycopg.connect(server.url, autocommit=True) as admin:
        for d in names.values():
            admin.execute(f'CREATE DATABASE "{d}"')
    for location in loc.values():
        with psycopg.connect(location) as conn:
            conn.execute(ACCOUNTS)
            conn.execute(FILL, (rows,))
            conn.execute("ANALYZE accounts")
    commands.create_root("s1", loc["s1"], "B")
    commands.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    commands.add_table(loc["s1"], "accounts", "s1")
    node_ops.add_table(loc["s2"], "accounts")
    with open_node_db(loc["s1"]) as db, db.transaction() as cur:
        tick = db.make_tick(cur)
    with open_node_db(loc["s2"]) as db, db.transaction() as cur:
        # Alike already: the table is ok at the root's tick (no copy, see the docstring).
        db.set_table(cur, "accounts", "ok", tick.tick_id if tick else 0)
        db.set_local(cur, "position", str(tick.tick_id if tick else 0))
    return loc


def plant(branch: str, rows: int) -> None:
    """100 missing, 100 extra and 100 different rows at the branch, spread over the keys."""
    step = rows // (3 * PLANTED)
    with open_node_db(branch) as db, db.transaction() as cur:
        for i in range(PLANTED):
            cur.execute("DELETE FROM accounts WHERE id = %s", (1 + i * step,))
            cur.execute("UPDATE accounts SET balance = balance + 1 WHERE id = %s", (2 + i * step,))
            cur.execute("INSERT INTO accounts VALUES (%s, 0, 'extra', 0)", (rows + 1 + i,))


def _reladiff(loc: dict[str, str]) -> tuple[float, int]:
    """(seconds, differing rows) of reladiff on the two tables; -1 rows when it failed."""
    exe = shutil.which("reladiff") or str(Path(sys.executable).with_name("reladiff"))
    started = time.monotonic()
    res = subprocess.run(
        [exe, loc["s1"], "accounts", loc["s2"], "accounts", "-k", "id",
         "-c", "balance", "-c", "name", "-c", "updated_at"],
        capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    if res.returncode not in (0, 1):
        print(f"  reladiff failed: {res.stderr.strip()[-300:]}", flush=True)
        return took, -1
    # One line per differing row version: "- (id, ...)" or "+ (id, ...)".
    keys = {line[2:].split(",")[0] for line in res.stdout.splitlines() if line[:2] in ("- ", "+ ")}
    return took, len(keys)


def run(rows: int, work: Path) -> dict[str, Any]:
    from baton.spark.diff import spark_differ
    from baton.spark.session import build_session

    out: dict[str, Any] = {"rows": rows}
    with PostgresServer(work / "pg") as server:
        started = time.monotonic()
        loc = build(server, rows)
        out["load_s"] = round(time.monotonic() - started, 1)
        spark = build_session(master="local[2]", work_dir=work / "spark", quiet=True)
        try:
            differ = spark_differ(spark)
            c = CascadeSet(loc["s2"])
            # Warm the session (Python workers, the source's classes) with a small read: a
            # clean compare would not run Spark at all (its first pass finds nothing).
            list(differ(loc["s2"], loc["s1"], "accounts", [0], ranges=[(1, 1000)]))
            table_diff.compare(c, "s2", ["accounts"], differ)
            plant(loc["s2"], rows)
            t0 = time.monotonic()
            found = table_diff.compare(c, "s2", ["accounts"], differ).tables["accounts"]
            out["compare_diff_s"] = round(time.monotonic() - t0, 2)
            out["found"] = {k.value: len(found.of(k)) for k in Kind}
            out["reladiff_diff_s"], out["reladiff_found"] = _reladiff(loc)
            t0 = time.monotonic()
            fixed = table_diff.repair(c, "s2", "accounts", differ)
            out["repair_s"] = round(time.monotonic() - t0, 2)
            out["repaired"] = {"written": fixed.written, "deleted": fixed.deleted,
                               "equal_after": fixed.equal_after}  # fmt: skip
            t0 = time.monotonic()
            clean = table_diff.compare(c, "s2", ["accounts"], differ)
            out["compare_clean_s"] = round(time.monotonic() - t0, 2)
            out["clean"] = clean.equal
            out["reladiff_clean_s"], out["reladiff_clean_found"] = _reladiff(loc)
        finally:
            spark.stop()
    out["reladiff_diff_s"] = round(out["reladiff_diff_s"], 2)
    out["reladiff_clean_s"] = round(out["reladiff_clean_s"], 2)
    return out


#: Issue 31's targets: compare at least this much faster than the fastest of reladiff and
#: Londiste, repair at least this much faster than Londiste's.
COMPARE_TARGET = 2.0
REPAIR_TARGET = 5.0


def suite(quick: bool, say: Callable[[str], None]) -> dict[str, Any]:
    """``make bench``'s compare benchmark: baton (with reladiff) and Londiste 3 on the same
    sizes, one after the other (1M rows; 10M too in a full run)."""
    from bench import londiste_compare
    from bench.londiste import ensure_installed

    sizes = [1_000_000] if quick else [1_000_000, 10_000_000]
    say(f"londiste {ensure_installed()}")
    out: dict[str, Any] = {"baton": [], "londiste": []}
    for rows in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
            out["baton"].append(run(rows, Path(tmp)))
        say(f"baton and reladiff: {out['baton'][-1]}")
        out["londiste"].append(londiste_compare.run(rows))
        say(f"londiste: {out['londiste'][-1]}")
    return out


def _ratios(b: dict[str, Any], lon: dict[str, Any]) -> tuple[float, float, float]:
    """(compare with differences, compare clean, repair): the fastest other's time over
    baton's."""
    diff = min(b["reladiff_diff_s"], lon["compare_diff_s"]) / max(b["compare_diff_s"], 1e-3)
    clean = min(b["reladiff_clean_s"], lon["compare_clean_s"]) / max(b["compare_clean_s"], 1e-3)
    return diff, clean, lon["repair_s"] / max(b["repair_s"], 1e-3)


def _exact(b: dict[str, Any]) -> bool:
    found = b["found"]
    return (
        all(found[k] == PLANTED for k in ("missing", "extra", "different"))
        and b["repaired"] == {"written": 2 * PLANTED, "deleted": PLANTED, "equal_after": True}
        and b["clean"]
    )


def summary(res: dict[str, Any]) -> list[str]:
    """The summary's line: the targets, met or not, at each size."""
    parts, ok = [], True
    for b, lon in zip(res["baton"], res["londiste"], strict=True):
        diff, clean, repair = _ratios(b, lon)
        ok = ok and _exact(b) and min(diff, clean) >= COMPARE_TARGET and repair >= REPAIR_TARGET
        parts.append(
            f"{b['rows'] / 1e6:g}M rows compare {diff:.1f}x / clean {clean:.1f}x, "
            f"repair {repair:.1f}x"
        )
    mark = "met" if ok else "**not met**"
    return [
        f"- **compare and repair** (issue 31; compare >= {COMPARE_TARGET:g}x the fastest of "
        f"reladiff and Londiste, repair >= {REPAIR_TARGET:g}x Londiste's, exactly the planted "
        f"rows): {mark}; " + "; ".join(parts) + "."
    ]


def section(res: dict[str, Any]) -> list[str]:
    """The markdown section of docs/benchmarks.md."""
    rows = []
    for b, lon in zip(res["baton"], res["londiste"], strict=True):
        diff, clean, repair = _ratios(b, lon)
        n = f"{b['rows']:,}"
        found = ", ".join(f"{v} {k}" for k, v in b["found"].items())
        rows += [
            f"| {n} | compare, {3 * PLANTED} differences | {b['compare_diff_s']:.2f} s ({found}) "
            f"| {b['reladiff_diff_s']:.2f} s | {lon['compare_diff_s']:.2f} s | {diff:.1f}x |",
            f"| {n} | compare, clean | {b['compare_clean_s']:.2f} s | "
            f"{b['reladiff_clean_s']:.2f} s | {lon['compare_clean_s']:.2f} s | {clean:.1f}x |",
            f"| {n} | repair | {b['repair_s']:.2f} s ({b['repaired']['written']} written, "
            f"{b['repaired']['deleted']} deleted) | - | {lon['repair_s']:.2f} s | {repair:.1f}x |",
        ]
    return [
        "## 11b. compare and repair, beside reladiff and Londiste 3 (issue 31)",
        "",
        "`bench/compare.py` and `bench/londiste_compare.py`: root and branch on one PostgreSQL "
        "server, `accounts` filled alike on both, then 100 missing, 100 extra and 100 different "
        "rows planted at the branch. baton on one local Spark session (`local[2]`), reladiff "
        "(PyPI, its default bisection) on the same tables, Londiste 3's `compare` and `repair "
        "--apply` on its own cascade with the same rows. The last column is the fastest "
        "other's time over baton's (repair: Londiste's). More in section 17.",
        "",
        "| rows | | baton | reladiff | Londiste 3 | baton vs fastest other |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, action="append", help="(repeatable) default 1,000,000")
    args = ap.parse_args()
    for rows in args.rows or [1_000_000]:
        with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
            r = run(rows, Path(tmp))
        print(r, flush=True)
        per_m = rows / 1e6
        print(
            f"{rows:,} rows: compare with differences {r['compare_diff_s']} s "
            f"({r['compare_diff_s'] / per_m:.2f} s per million), found {r['found']}; repair "
            f"{r['repair_s']} s {r['repaired']}; compare clean {r['compare_clean_s']} s; "
            f"reladiff {r['reladiff_diff_s']} s (found {r['reladiff_found']}), clean "
            f"{r['reladiff_clean_s']} s; load {r['load_s']} s; load average "
            f"{os.getloadavg()[0]:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
