"""A set with one difference of each kind planted at its branch, and ``compare``/``repair`` run
through the command line on a given Spark deployment (issue 31: every deployment)."""

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
    """``compare`` finds the three (exit 1), ``repair`` fixes them, both on ``env``'s Spark."""

    def baton(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BATON, "cascade", *args, "--via", loc["s1"], "--json"],
            capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, **env},
        )  # fmt: skip

    res = baton("compare", "s2")
    assert res.returncode == 1, res.stderr
    t = json.loads(res.stdout)["tables"]["accounts"]
    assert (t["missing"], t["extra"], t["different"]) == (1, 1, 1), t
    assert [t[f"{k}_keys"] for k in ("missing", "extra", "different")] == [
        [{"id": 3}],
        [{"id": 99}],
        [{"id": 7}],
    ]
    res = baton("repair", "s2", "accounts")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["written"], out["deleted"], out["equal_after"]) == (2, 1, True)
    assert "Traceback" not in res.stderr
