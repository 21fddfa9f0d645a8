"""``baton cascade ...`` run as the real executable on SQLite node databases (and a PostgreSQL
set): building a set, tables, status, providers, tags, pause, events, check; every command is
resumable; bad input is one line, exit 2 (1 for an unreachable database), and changes nothing.

No workers run here (no Spark): switchover, failover and resurrect are run only with bad input;
their effects are tested with real workers in tests/cascade.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from baton.cascade import node_ops, observe, set_ops
from baton.cascade.beat import Phase
from baton.cascade.db import open_node_db
from baton.cascade.db.base import DENY_SQLSTATE
from baton.cascade.model import Role
from baton.testing import free_port
from baton.testing.cascade import served
from baton.testing.servers import PostgresServer
from tests.test_cli import BATON, one_line_error

NAMES = ("s1", "s2", "s3", "s4")
ACCOUNTS = (
    "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, name TEXT, "
    "updated_at REAL)"
)
NOPK = "CREATE TABLE nopk (a INTEGER, b TEXT)"


def run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``baton cascade ARGS`` (BATON_CASCADE only when given in ``env``)."""
    base = {k: v for k, v in os.environ.items() if k != "BATON_CASCADE"}
    return subprocess.run(
        [BATON, "cascade", *args], capture_output=True, text=True, timeout=60, check=False,
        cwd=cwd, env={**base, **(env or {})},
    )  # fmt: skip


def ok(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
    return res.stdout


def sql(path: Path, *statements: str, by_hand: bool = False) -> None:
    """``statements`` in one transaction; ``by_hand``: as an operator repairing a node that
    does not capture (docs/cascade.md), past the guard that refuses direct writes there."""
    conn = sqlite3.connect(path)
    try:
        if by_hand:
            conn.execute("INSERT INTO baton_writer (w) VALUES (1)")
        for s in statements:
            conn.execute(s)
        if by_hand:
            conn.execute("DELETE FROM baton_writer")
        conn.commit()
    finally:
        conn.close()


class Set:
    """SQLite node databases ``<dir>/<name>.db`` with ``accounts`` and ``nopk`` tables."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        for name in NAMES:
            sql(self.path(name), ACCOUNTS, NOPK)
        sql(self.path("s1"), "CREATE TABLE only_root (id INTEGER PRIMARY KEY)")

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.db"

    def loc(self, name: str) -> str:
        return f"sqlite://{self.path(name)}"

    @property
    def via(self) -> list[str]:
        return ["--via", self.loc("s1")]

    def snapshot(self) -> dict[str, Any]:
        """Everything a command could change: each node's state, node list, subscribers,
        tables, queue and capture triggers; the set's status; the files in the directory."""
        # SQLite's -wal and -shm files come and go with connections: not a change.
        files = sorted(p.name for p in self.dir.iterdir() if not p.name.endswith(("-wal", "-shm")))
        out: dict[str, Any] = {"files": files}
        for name in NAMES:
            with open_node_db(self.loc(name)) as db:
                last = db.last_tick()
                out[name] = {
                    "state": dataclasses.asdict(db.state()),
                    "nodes": db.nodes(),
                    "watermarks": db.watermarks(),
                    "tables": db.tables(),
                    "pending": db.pending()[0],
                    "last_tick": last.tick_id if last else None,
                }
            conn = sqlite3.connect(self.path(name))
            out[name]["triggers"] = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
            ).fetchall()
            conn.close()
        out["members"] = [
            dataclasses.asdict(m) for m in observe.members(set_ops.CascadeSet(self.loc("s1")))
        ]
        return out


def build(directory: Path) -> Set:
    """s1 root -> s2 branch -> s3 branch -> s4 leaf, all replicating ``accounts`` (built through
    the Python API: the creation commands are tested on their own below)."""
    s = Set(directory)
    node_ops.create_root("s1", s.loc("s1"), "S")
    node_ops.create_subscriber(Role.BRANCH, "s2", s.loc("s2"), "s1", s.loc("s1"))
    node_ops.create_subscriber(Role.BRANCH, "s3", s.loc("s3"), "s2", s.loc("s1"))
    node_ops.create_subscriber(Role.LEAF, "s4", s.loc("s4"), "s3", s.loc("s1"))
    for name in NAMES:
        if node_ops.add_table(s.loc(name), "accounts") == "copying":
            node_ops.copy_table(s.loc(name), "accounts")  # what the node's worker does, with Spark
    return s


@pytest.fixture
def cset(tmp_path: Path) -> Set:
    """A fresh set for a test that changes it."""
    return build(tmp_path)


@pytest.fixture(scope="module")
def unchanged_set(tmp_path_factory: pytest.TempPathFactory) -> Set:
    """One set for every bad-input case: each must leave it as it found it (and is checked)."""
    s = build(tmp_path_factory.mktemp("bad"))
    sql(s.dir / "plain.db", "CREATE TABLE t (a INTEGER)")  # a database that is not a node
    return s


def status(s: Set) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ok(run("status", "--json", *s.via)))
    return data


def by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in data["members"]}


# -- building a set ------------------------------------------------------------------------------


def test_create_set_add_tables_and_rerun(tmp_path: Path) -> None:
    s = Set(tmp_path)
    # Relative locations are stored absolute: workers started elsewhere must find the node.
    out = ok(run("create-root", "s1", "sqlite://s1.db", "--set", "S", cwd=tmp_path))
    assert out.strip() == f"s1: root of set S at {s.loc('s1')}"
    again = ok(run("create-root", "s1", "sqlite://s1.db", "--set", "S", cwd=tmp_path))
    assert "(already done)" in again
    env = {"BATON_CASCADE": s.loc("s1")}  # --via from the environment
    out = ok(run("create-branch", "s2", s.loc("s2"), "--provider", "s1", env=env))
    assert out.startswith("s2: branch of s1 in set S") and "from tick 1" in out
    ok(run("create-branch", "s3", s.loc("s3"), "--provider", "s2", "--via", s.loc("s2")))
    ok(run("create-leaf", "s4", s.loc("s4"), "--provider", "s3", *s.via))
    before = s.snapshot()
    for args in (
        ["create-branch", "s2", s.loc("s2"), "--provider", "s1"],
        ["create-leaf", "s4", s.loc("s4"), "--provider", "s3"],
    ):
        assert "(already done)" in ok(run(*args, *s.via))
    assert s.snapshot() == before, "a re-run changed the set"
    # Another node's location is refused, and changes nothing.
    one_line_error(run("create-root", "x", s.loc("s2"), "--set", "T"), "already node s2")
    assert s.snapshot() == before
    data = status(s)
    members = by_name(data)
    assert data["set"] == "S" and data["root"] == "s1"
    assert {n: (m["role"], m["provider"]) for n, m in members.items()} == {
        "s1": ("root", None),
        "s2": ("branch", "s1"),
        "s3": ("branch", "s2"),
        "s4": ("leaf", "s3"),
    }
    assert members["s1"]["location"] == s.loc("s1")
    # add-table --all: the root first, then every node after its provider.
    out = ok(run("add-table", "accounts", "--all", *s.via))
    assert out.splitlines() == ["s1: accounts ok"] + [
        f"{n}: accounts copying (the node's worker copies it with Spark)" for n in NAMES[1:]
    ]
    assert ok(run("add-table", "accounts", "--all", *s.via)) == out  # a re-run
    assert json.loads(ok(run("tables", "--node", "s4", "--json", *s.via))) == {
        "accounts": "copying"
    }
    for name in NAMES[1:]:
        node_ops.copy_table(s.loc(name), "accounts")  # what each node's worker does, with Spark
    for name in NAMES:
        assert json.loads(ok(run("tables", "--node", name, "--json", *s.via))) == {"accounts": "ok"}
    assert "accounts" in ok(run("tables", "--node", "s4", *s.via))
    assert json.loads(ok(run("missing", "--node", "s4", "--json", *s.via))) == []
    assert "replicates every table" in ok(run("missing", "--node", "s4", *s.via))
    assert "is the root" in ok(run("missing", "--node", "s1", *s.via))
    table = ok(run("status", *s.via))
    assert "root s1, global watermark 0" in table
    assert all(n in table for n in NAMES)
    assert json.loads(ok(run("members", "--json", *s.via))) == status(s)["members"]


# -- operating it --------------------------------------------------------------------------------


def test_pause_tag_candidates_change_provider(cset: Set) -> None:
    s = cset
    assert ok(run("candidates", "s4", *s.via)).split() == ["s1", "s2", "s3"]
    assert json.loads(ok(run("candidates", "s4", "--json", *s.via))) == ["s1", "s2", "s3"]
    assert ok(run("pause", "s3", *s.via)).strip() == "s3: paused"
    assert by_name(status(s))["s3"]["paused"] is True
    # The tree says so in s3's state; the wide one also in the paused column.
    s3_row = next(line for line in ok(run("status", *s.via)).splitlines() if "s3 " in line)
    assert "paused" in s3_row, s3_row
    wide_row = next(r for r in ok(run("status", "-o", "wide", *s.via)).splitlines() if "s3 " in r)
    assert "yes" in wide_row, wide_row
    ok(run("resume", "s3", *s.via))
    assert by_name(status(s))["s3"]["paused"] is False
    # A node whose service runs is alive: tagging it dead (the wrong node?) is refused, since
    # its provider would stop holding the queue back for it.
    with served(s.loc("s2")):
        line = refused(run("tag-dead", "s2", *s.via))
    assert "s2 is alive: its service runs on" in line and "nothing was changed" in line, line
    assert by_name(status(s))["s2"]["dead"] is False
    # A dead node is no candidate, in every node list.
    assert ok(run("tag-dead", "s2", *s.via)).strip() == "s2: tagged dead"
    assert by_name(status(s))["s2"]["dead"] is True
    assert ok(run("candidates", "s4", *s.via)).split() == ["s1", "s3"]
    for name in ("s1", "s3", "s4"):
        with open_node_db(s.loc(name)) as db:
            assert db.nodes()["s2"][1] is True, name
    ok(run("tag-alive", "s2", *s.via))
    assert by_name(status(s))["s2"]["dead"] is False
    # change-provider, and again (a no-op).
    assert ok(run("change-provider", "s3", "--provider", "s1", *s.via)).strip() == (
        "s3: receives from s1"
    )
    ok(run("change-provider", "s3", "--provider", "s1", *s.via))
    assert by_name(status(s))["s3"]["provider"] == "s1"
    with open_node_db(s.loc("s1")) as db:
        assert "s3" in db.watermarks()
    with open_node_db(s.loc("s2")) as db:
        assert "s3" not in db.watermarks()
    # s2 no longer sits above s3: it may now receive from s3.
    assert ok(run("candidates", "s2", *s.via)).split() == ["s1", "s3"]


def test_emit_adds_an_event_at_the_root(cset: Set) -> None:
    s = cset
    with open_node_db(s.loc("s1")) as db:
        assert db.pending()[0] == 0
    out = ok(run("emit", "app.note", "--data", '{"n": 1}', "--via", s.loc("s4")))
    assert "at root s1" in out
    with open_node_db(s.loc("s1")) as db:
        assert db.pending()[0] == 1
        (event,) = db.events_after(1)
    assert (event.type, json.loads(event.data or "")) == ("app.note", {"n": 1})


def test_remove_table_subscribers_first(cset: Set) -> None:
    s = cset
    one_line_error(run("remove-table", "accounts", "--node", "s1", *s.via), "s2, s3, s4")
    assert ok(run("remove-table", "accounts", "--node", "s4", *s.via)).strip() == (
        "s4: accounts removed"
    )
    assert "nothing to do" in ok(run("remove-table", "accounts", "--node", "s4", *s.via))
    assert json.loads(ok(run("missing", "--node", "s4", "--json", *s.via))) == ["accounts"]
    assert ok(run("missing", "--node", "s4", *s.via)).split() == ["accounts"]
    for name in ("s3", "s2"):
        ok(run("remove-table", "accounts", "--node", name, *s.via))
    out = ok(run("remove-table", "accounts", "--node", "s1", *s.via))
    assert "no longer captured" in out
    # The root no longer captures it: a write makes no event.
    sql(s.path("s1"), "INSERT INTO accounts VALUES (1, 1, 'a', 1.0)")
    with open_node_db(s.loc("s1")) as db:
        assert db.tables() == {} and db.pending()[0] == 0
    out = ok(run("add-table", "accounts", "--all", *s.via))
    assert out.count("accounts ok") == 1 and out.count("accounts copying") == 3


def test_check_equal_then_different(cset: Set) -> None:
    s = cset
    out = ok(run("check", "--node", "s4", *s.via))
    assert "s4 at tick 1; its provider s3 at tick 1" in out and "equal" in out
    # The same rows written in a different order on both sides are equal.
    for name, ids in (("s3", (1, 2, 3)), ("s4", (3, 1, 2))):
        sql(
            s.path(name),
            *(f"INSERT INTO accounts VALUES ({i}, {i * 10}, 'n{i}', {i}.5)" for i in ids),
            by_hand=True,
        )
    assert "equal" in ok(run("check", "--node", "s4", "--table", "accounts", *s.via))
    sql(s.path("s4"), "UPDATE accounts SET balance = 11 WHERE id = 1", by_hand=True)
    res = run("check", "--node", "s4", *s.via)
    assert res.returncode == 1 and res.stderr == ""
    # Both at the same tick: the difference is real (no "until it catches up" excuse).
    assert "different" in res.stdout and "catches up" not in res.stdout
    assert "both at tick 1, so the difference is real" in res.stdout
    data = json.loads(run("check", "--node", "s4", "--json", *s.via).stdout)
    assert data["equal"] is False and data["provider"] == "s3"
    assert data["tables"]["accounts"] == {
        "state": "ok", "rows": 3, "provider_rows": 3, "equal": False
    }  # fmt: skip
    # A row only on the leaf is a different count.
    sql(s.path("s4"), "UPDATE accounts SET balance = 10 WHERE id = 1",
        "INSERT INTO accounts VALUES (9, 9, 'x', 9.0)", by_hand=True)  # fmt: skip
    data = json.loads(run("check", "--node", "s4", "--json", *s.via).stdout)
    assert data["tables"]["accounts"]["rows"] == 4 and not data["equal"]
    assert run("check", "--node", "s3", *s.via).returncode == 1  # rows its provider s2 has not
    # Columns in another order on the subscriber: the checksum names each value's column.
    sql(s.dir / "s5.db", "CREATE TABLE accounts (name TEXT, updated_at REAL, "
        "balance INTEGER NOT NULL, id INTEGER PRIMARY KEY)")  # fmt: skip
    ok(run("create-leaf", "s5", f"sqlite://{s.dir}/s5.db", "--provider", "s3", *s.via))
    ok(run("add-table", "accounts", "--node", "s5", *s.via))
    node_ops.copy_table(f"sqlite://{s.dir}/s5.db", "accounts")  # s5's worker copies s3's 3 rows
    data = json.loads(ok(run("check", "--node", "s5", "--json", *s.via)))
    assert data["equal"] and data["tables"]["accounts"]["rows"] == 3


def test_a_write_that_would_not_be_captured_is_refused(cset: Set) -> None:
    """Issue 28, point 1 (invariant 8): at a branch or a leaf a direct write of a replicated
    table is refused with the root's whereabouts; after a switchover that timed out (no worker
    at the new root) the old root captures no more and refuses too, naming the new root. Before,
    both writes were accepted, and the old root's was an acknowledged write never replicated."""
    s = cset
    for name in ("s2", "s4"):
        with pytest.raises(sqlite3.IntegrityError, match=f"accounts at {name} .* is replicated"):
            sql(s.path(name), "INSERT INTO accounts VALUES (7, 7, 'x', 7.0)")
    sql(s.path("s1"), "INSERT INTO accounts VALUES (7, 7, 'x', 7.0)")  # the root captures it
    # s2's worker says it applies but applies nothing (wedged): the switch begins, then times
    # out.
    with served(s.loc("s2")):
        res = run("switchover", "s2", "--timeout", "0.5", *s.via)
    assert res.returncode != 0 and "run the same switchover again" in res.stderr, res.stderr
    with pytest.raises(
        sqlite3.IntegrityError, match="switchover to s2 is under way; write it at s2"
    ):
        sql(s.path("s1"), "INSERT INTO accounts VALUES (8, 8, 'lost', 8.0)")
    with pytest.raises(sqlite3.IntegrityError, match="under way"):
        sql(s.path("s1"), "DELETE FROM accounts")
    # The switch under way is a state of the set, and says how to finish it.
    shown = ok(run("status", *s.via))
    assert "s1 is switching to s2 since tick 2" in shown and "run the same switchover" in shown
    root = by_name(status(s))["s1"]
    assert (root["switching_to"], root["switch_tick"]) == ("s2", 2)
    assert root["tick_time"] is not None  # when its last tick was made: is a ticker running?
    # Nothing of the refused writes is there; the write made before the switch is.
    with open_node_db(s.loc("s1")) as db:
        assert db.read_rows("accounts") == [(7, 7, "x", 7.0)]
    # Run again now that s2's worker is stopped: refused at once, saying what to start and
    # that the switch is still under way (s1 refuses writes until it finishes).
    res = run("switchover", "s2", "--timeout", "0.5", *s.via)
    line = refused(res)
    assert "s2's worker is not running, last seen" in line and "still under way" in line, line


def refused(res: subprocess.CompletedProcess[str]) -> str:
    """The one line of a command that refused (checked as :func:`one_line_error` does)."""
    one_line_error(res)
    return res.stderr.strip()


def test_a_switchover_that_could_not_finish_changes_nothing(cset: Set) -> None:
    """Issue 28, point 1: the switchover checks its target before it changes anything. With
    no worker at s2, a worker still starting Spark or waiting on an error, or s2 too far
    behind, it refuses in one line saying what to do; the root still captures and takes
    writes. ``--dry-run`` prints the steps and changes nothing either."""
    s = cset

    def unchanged() -> None:
        root = by_name(status(s))["s1"]
        assert root["role"] == "root" and root["switching_to"] is None
        sql(s.path("s1"), "UPDATE accounts SET balance = balance + 1")  # still captured

    res = run("switchover", "s2", *s.via)
    line = refused(res)
    assert "s2's worker is not running: start `baton cascade run" in line, line
    assert s.loc("s2") in line and "nothing was changed" in line
    unchanged()
    shown = ok(run("status", *s.via))
    assert "not running: s1, s2, s3, s4" in shown, shown
    for phase, error, said in [
        (Phase.STARTING, "", "starting Spark"),
        (Phase.WAITING, "s1 is unreachable", "s1 is unreachable"),
    ]:
        with served(s.loc("s2"), phase=phase, error=error):
            line = refused(run("switchover", "s2", *s.via))
            assert f"s2's worker is not applying yet ({said})" in line, line
            member = by_name(status(s))["s2"]["service"]
            assert (member["state"], member["phase"], member["epoch"]) == (
                "running",
                phase.value,
                1,
            )
        unchanged()
    assert by_name(status(s))["s2"]["service"]["state"] == "stopped"
    with served(s.loc("s2")):
        shown = ok(run("status", "-o", "wide", *s.via))
        assert re.search(r"running on \S+:\d+ at\s+epoch 1", shown), shown
        with open_node_db(s.loc("s1")) as db:  # the root ticks twice (s2 applies nothing)
            for _ in range(2):
                with db.transaction() as cur:
                    db.make_tick(cur)
        lag = by_name(status(s))["s2"]["lag_ticks"]
        assert lag >= 2
        line = refused(run("switchover", "s2", "--max-behind", str(lag - 1), *s.via))
        assert f"s2 is {lag} ticks behind s1 (at most {lag - 1})" in line, line
        assert "--max-behind" in line
        unchanged()
        plan = ok(run("switchover", "s2", "--dry-run", *s.via))
        assert "checked: s2's worker applies on" in plan and f"{lag} tick(s) behind s1" in plan
        assert "1. s1 stops capturing accounts" in plan and "nothing was changed" in plan
        unchanged()


# -- bad input -----------------------------------------------------------------------------------

BAD: list[tuple[list[str], int, list[str]]] = [
    (["status"], 2, ["--via"]),
    (["status", "--via", "sqlite://TMP/missing.db"], 2, ["no such node database"]),
    (["status", "--via", "sqlite:///no/such/dir/x.db"], 2, ["does not exist"]),
    (["status", "--via", "mysql://h/db"], 2, ["mysql"]),
    (["status", "--via", "sqlite://TMP/plain.db"], 2, ["not a cascade node"]),
    (["members", "--via", "postgresql://u:sekret@127.0.0.1:PORT/x"], 1, ["cannot connect"]),
    (["tables", "--node", "nope"], 2, ["unknown node 'nope'", "s1"]),
    (["missing", "--node", "nope"], 2, ["unknown node"]),
    (["create-root", "x", "LOC_s2", "--set", "S"], 2, ["already node s2"]),
    (["create-root", "bad name", "sqlite://TMP/new.db", "--set", "S"], 2, ["node name"]),
    (["create-root", "x", "sqlite://TMP/new.db", "--set", "bad/set"], 2, ["bad/set"]),
    (["create-root", "x", "sqlite:///no/such/dir/x.db", "--set", "S"], 2, ["does not exist"]),
    (["create-branch", "s9", "LOC_s2", "--provider", "s1"], 2, ["already node s2"]),
    (["create-branch", "s2", "sqlite://TMP/new.db", "--provider", "s1"], 2, ["taken"]),
    (["create-leaf", "s9", "sqlite://TMP/new.db", "--provider", "s4"], 2, ["s4 is a leaf"]),
    (["create-leaf", "s9", "sqlite://TMP/new.db", "--provider", "zz"], 2, ["unknown node"]),
    (["create-leaf", "s4", "LOC_s4", "--provider", "s2"], 2, ["change-provider"]),
    (["create-branch", "s4", "LOC_s4", "--provider", "s3"], 2, ["a leaf of s3"]),
    (["add-table", "accounts"], 2, ["--node", "--all"]),
    (["add-table", "accounts", "--node", "s1", "--all"], 2, ["--node", "--all"]),
    (["add-table", "nopk", "--node", "s1"], 2, ["primary key"]),
    (["add-table", "nopk", "--all"], 2, ["primary key"]),
    (["add-table", "nosuch", "--all"], 2, ["nosuch"]),
    (["add-table", "only_root", "--all"], 2, ["s2", "only_root"]),
    (["add-table", "only_root", "--node", "s2"], 2, ["only_root"]),
    (["add-table", "accounts", "--node", "zz"], 2, ["unknown node"]),
    (["remove-table", "accounts", "--node", "s1"], 2, ["still replicated"]),
    (["remove-table", "nosuch", "--node", "s2"], 2, ["nosuch"]),
    (["emit", "app.x", "--data", "[1]"], 2, ["JSON object"]),
    (["emit", "app.x", "--data", "{nope"], 2, ["not JSON"]),
    (["emit", "U"], 2, ["reserved"]),
    (["emit", "baton.watermark", "--data", "{}"], 2, ["reserved"]),
    (["change-provider", "s2", "--provider", "s3"], 2, ["cycle"]),
    (["change-provider", "s3", "--provider", "s4"], 2, ["leaf"]),
    (["change-provider", "s3", "--provider", "s3"], 2, ["its own provider"]),
    (["change-provider", "s1", "--provider", "s2"], 2, ["root"]),
    (["change-provider", "s3", "--provider", "zz"], 2, ["unknown node"]),
    (["change-provider", "zz", "--provider", "s1"], 2, ["unknown node"]),
    (["candidates", "zz"], 2, ["unknown node"]),
    (["candidates", "s1"], 2, ["root"]),
    (["tag-dead", "zz"], 2, ["unknown node"]),
    (["pause", "bad name"], 2, ["bad node name 'bad name'", "letters, digits"]),
    (["change-provider", "s4"], 2, ["--provider"]),
    (["tag-alive", "zz"], 2, ["unknown node"]),
    (["pause", "zz"], 2, ["unknown node"]),
    (["resume", "zz"], 2, ["unknown node"]),
    (["switchover", "zz"], 2, ["unknown node"]),
    (["switchover", "s4"], 2, ["leaf"]),
    (["switchover", "s2", "--timeout", "0"], 2, ["--timeout"]),
    (["failover", "zz"], 2, ["unknown node"]),
    (["failover", "s2"], 2, ["not the root"]),
    (["resurrect", "zz", "--save", "TMP/lost.jsonl"], 2, ["unknown node"]),
    (["resurrect", "s1", "--save", "TMP/lost.jsonl"], 2, ["no live root"]),
    (["resurrect", "s3", "--save", "TMP/lost.jsonl"], 2, ["not an old root"]),
    (["resurrect", "s1", "--save", "/no/such/dir/x"], 2, ["does not exist"]),
    (["check", "--node", "s1"], 2, ["root"]),
    (["check", "--node", "zz"], 2, ["unknown node"]),
    (["check", "--node", "s4", "--table", "nopk"], 2, ["does not replicate"]),
]


@pytest.mark.parametrize(("args", "code", "needles"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_input_is_one_line_and_changes_nothing(
    unchanged_set: Set, args: list[str], code: int, needles: list[str]
) -> None:
    s = unchanged_set
    port = str(free_port())

    def fill(arg: str) -> str:
        arg = arg.replace("TMP", str(s.dir)).replace("PORT", port)
        return re.sub(r"LOC_(s\d)", lambda m: s.loc(m[1]), arg)

    args = [fill(a) for a in args]
    if "--via" not in args and args != ["status"] and args[0] != "create-root":
        args += s.via
    before = s.snapshot()
    res = run(*args)
    one_line_error(res, *needles)
    assert res.returncode == code, res.stderr
    assert "sekret" not in res.stdout + res.stderr, "a password reached the output"
    assert s.snapshot() == before, "bad input changed the set"


# -- PostgreSQL ----------------------------------------------------------------------------------


@pytest.fixture
def pg_locations(postgres_server: PostgresServer) -> Iterator[list[str]]:
    """Two fresh PostgreSQL databases with ``accounts`` and ``nopk`` tables."""
    names = ["c" + uuid.uuid4().hex[:12] for _ in range(2)]
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    locations = [f"postgresql://postgres@127.0.0.1:{postgres_server.port}/{n}" for n in names]
    for location in locations:
        with psycopg.connect(location) as conn:
            conn.execute(
                "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, "
                "name text, updated_at double precision)"
            )
            conn.execute("CREATE TABLE nopk (a bigint)")
    yield locations
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_postgres_set(pg_locations: list[str]) -> None:
    root, leaf = pg_locations
    via = ["--via", root]
    ok(run("create-root", "p1", root, "--set", "P"))
    assert "(already done)" in ok(run("create-root", "p1", root, "--set", "P"))
    ok(run("create-leaf", "p2", leaf, "--provider", "p1", *via))
    assert ok(run("add-table", "accounts", "--all", *via)).splitlines() == [
        "p1: accounts ok",
        "p2: accounts copying (the node's worker copies it with Spark)",
    ]
    node_ops.copy_table(leaf, "accounts")  # what p2's worker does, with Spark
    data = json.loads(ok(run("status", "--json", *via)))
    assert [(m["name"], m["role"], m["provider"]) for m in data["members"]] == [
        ("p1", "root", None),
        ("p2", "leaf", "p1"),
    ]
    assert "equal" in ok(run("check", "--node", "p2", *via))
    ok(run("emit", "app.x", "--data", '{"k": "v"}', "--via", leaf))
    with open_node_db(root) as db:
        assert db.pending()[0] == 1
    # Bad input: refused, one line, nothing changed.
    for args, needle in (
        (["add-table", "nopk", "--node", "p1"], "primary key"),
        (["create-root", "x", leaf, "--set", "Q"], "already node p2"),
        (["change-provider", "p2", "--provider", "p9"], "unknown node"),
    ):
        res = run(*args, *([] if args[0] == "create-root" else via))
        one_line_error(res, needle)
        assert res.returncode == 2
    assert json.loads(ok(run("status", "--json", *via))) == data
    # A direct write at the leaf is refused (it would make it differ from its provider for
    # good); an operator repairing by hand says so in the transaction.
    refused = pytest.raises(psycopg.Error, match="replicated, not written here")
    with refused as denied, psycopg.connect(leaf) as conn:
        conn.execute("INSERT INTO accounts VALUES (1, 1, 'only here', 0.5)")
    assert denied.value.sqlstate == DENY_SQLSTATE  # a writer tells it by its code
    with psycopg.connect(leaf) as conn:
        conn.execute("SET LOCAL baton.writer = 'on'")
        conn.execute("INSERT INTO accounts VALUES (1, 1, 'only here', 0.5)")
    with psycopg.connect(root) as conn:  # the root captures it: allowed
        conn.execute("INSERT INTO accounts VALUES (2, 2, 'at the root', 0.5)")
    res = run("check", "--node", "p2", *via)
    assert res.returncode == 1 and "different" in res.stdout
    gone = root.rsplit("/", 1)[0] + "/no_such_database"
    res = run("status", "--via", gone)
    one_line_error(res, "no_such_database")
    assert res.returncode == 1
