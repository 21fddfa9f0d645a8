"""A set with one difference of each kind planted at its branch, and ``repair`` (which compares
before and after) run through the command line on a given Spark deployment (issue 31: every
deployment)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

from baton.cascade import node_ops
from baton.cascade.db import open_node_db
from baton.testing.cascade import root_and_branch
from tests.cascade.test_root_writer import catch_up, tick
from tests.test_cli import BATON


def planted(directory: Path) -> dict[str, str]:
    """s1 (root) -> s2 (branch) with 50 accounts; at s2 one missing, one extra, one different."""
    loc = root_and_branch(directory)
    conn = sqlite3.connect(directory / "s1.db")
    with conn:
        conn.executemany(
            "INSERT INTO accounts VALUES (?, ?, 'a', 0)", [(i, i * 10) for i in range(1, 51)]
        )
    conn.close()
    node_ops.copy_table(loc["s2"], "accounts")
    for _ in range(2):  # what its worker does, until the events its copy shows are passed
        tick(loc["s1"])
        catch_up(loc["s2"])
    with open_node_db(loc["s2"], readonly=True) as db:
        assert db.tables() == {"accounts": "ok"}
    with open_node_db(loc["s2"]) as db, db.transaction() as cur:
        cur.execute("DELETE FROM accounts WHERE id = 3")
        cur.execute("INSERT INTO accounts VALUES (99, 0, 'stray', 0)")
        cur.execute("UPDATE accounts SET balance = -1 WHERE id = 7")
    return loc


def compare_then_repair(loc: dict[str, str], env: dict[str, str]) -> None:
    """``repair`` on ``env``'s Spark: it compares (finding exactly the three), fixes them in one
    transaction and compares again. One command: each starts its own Spark application."""
    res = subprocess.run(
        [BATON, "cascade", "repair", "s2", "accounts", "--via", loc["s1"], "--json"],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, **env},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["written"], out["deleted"], out["equal_after"]) == (2, 1, True)
    assert "Traceback" not in res.stderr
    with open_node_db(loc["s2"], readonly=True) as db:
        rows = {r[0]: r[1] for r in db.read_rows("accounts")}
    assert rows == {i: i * 10 for i in range(1, 51)}
