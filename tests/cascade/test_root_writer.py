"""Writers always find the root (issue 30, step 2): ``baton cascade root SET`` and the writer
helper of :mod:`baton.cascade.writer`, on real SQLite and PostgreSQL node databases, without
Spark (a table's copy and a worker's apply are done here by hand, as the workers would).

A writer still connected to a demoted root gets an error, never a lost write; through the
helper the same write lands at the new root."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from baton.cascade import commands, handover, node_ops
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.root import RootState, locate_root
from baton.cascade.writer import RootWriter, connect_root, refused_here
from baton.errors import (
    CascadeInputError,
    NodeUnreachable,
    NotANode,
    NotFinished,
    NoWritableRoot,
    RootMoved,
)
from baton.local.waiting import wait_for
from baton.node.agent import NodeAgent
from baton.testing.cascade import apply_from_provider, served
from baton.testing.servers import PostgresServer
from tests.node.test_api import client, config
from tests.test_cli import BATON

ACCOUNTS = "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)"


def build(locations: dict[str, str]) -> None:
    """Set S: s1 root -> s2 branch, replicating ``accounts`` (s2's copy made as its worker
    would)."""
    commands.create_root("s1", locations["s1"], "S")
    commands.create_subscriber(Role.BRANCH, "s2", locations["s2"], "s1", locations["s1"])
    commands.add_table(locations["s1"], "accounts", None, True)
    node_ops.copy_table(locations["s2"], "accounts")


@pytest.fixture
def lite(tmp_path: Path) -> dict[str, str]:
    locations = {n: f"sqlite://{tmp_path / n}.db" for n in ("s1", "s2")}
    for name in locations:
        conn = sqlite3.connect(tmp_path / f"{name}.db")
        conn.execute(ACCOUNTS)
        conn.close()
    build(locations)
    return locations


def catch_up(location: str) -> int:
    """What a node's worker does: apply everything its provider has ticked; its position."""
    with open_node_db(location) as db:
        assert db.state().provider is not None
    return apply_from_provider(location)


def switch(via: str, new_root: str, new_location: str) -> None:
    """A switchover to ``new_root``, whose worker's apply this test does (:func:`catch_up`)."""

    def applying(condition: Callable[[], bool], timeout: float) -> None:
        wait_for(lambda: catch_up(new_location) > 0 and condition(), timeout=timeout)

    with served(new_location):
        handover.switchover(commands.open_set(via), new_root, applying, 10)


def rows(location: str) -> list[tuple[Any, ...]]:
    with open_node_db(location, readonly=True) as db:
        return [tuple(r) for r in db.read_rows("accounts")]


def root_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BATON, "cascade", "root", *args], capture_output=True, text=True, timeout=60, check=False
    )


# -- SQLite ----------------------------------------------------------------------------------


def test_a_switchover_refuses_the_old_connection_and_the_writer_follows(
    lite: dict[str, str],
) -> None:
    s1, s2 = lite["s1"], lite["s2"]
    found = commands.root(s2, "S")
    assert (found.state, found.node, found.location, found.writable) == (
        RootState.WRITABLE, "s1", s1, True,
    )  # fmt: skip
    old = connect_root("S", s2)
    old.execute("INSERT INTO accounts VALUES (1, 10)")
    old.commit()
    with RootWriter("S", via=[s2]) as writer, RootWriter("S", via=s1) as other:
        assert writer.run(lambda cur: cur.execute("INSERT INTO accounts VALUES (2, 20)").rowcount)
        with other.transaction() as cur:
            cur.execute("INSERT INTO accounts VALUES (3, 30)")
        assert writer.root.node == other.root.node == "s1"

        switch(s1, "s2", s2)

        # The connection still open at the demoted root: an error, nothing written there.
        with pytest.raises(sqlite3.IntegrityError) as refused:
            old.execute("INSERT INTO accounts VALUES (4, 40)")
        assert refused_here(refused.value)
        old.rollback()
        old.close()
        # Through the helper the same write lands at the new root, retried once.
        writer.run(lambda cur: cur.execute("INSERT INTO accounts VALUES (4, 40)"))
        assert writer.root.node == "s2"
        # A transaction block cannot run twice: it says the root moved; the next one lands.
        with pytest.raises(RootMoved) as moved, other.transaction() as cur:
            cur.execute("INSERT INTO accounts VALUES (5, 50)")
        assert (moved.value.old, moved.value.new) == ("s1", "s2")
        with other.transaction() as cur:
            cur.execute("INSERT INTO accounts VALUES (5, 50)")
    assert rows(s1) == [(1, 10), (2, 20), (3, 30)]
    assert rows(s2) == [(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)]
    with open_node_db(s2, readonly=True) as db:
        assert db.pending()[0] == 2  # both captured at the new root: they travel on
    # s1 receives them once it applies as s2's branch: nothing was lost.
    tick(s2)
    catch_up(s1)
    assert rows(s1) == rows(s2)
    found = commands.root(s1, "S")
    assert (found.node, found.location) == ("s2", s2)


def tick(root: str) -> None:
    with open_node_db(root) as db, db.transaction() as cur:
        assert db.make_tick(cur) is not None


def test_no_writable_root_and_no_such_set(lite: dict[str, str], tmp_path: Path) -> None:
    s1, s2 = lite["s1"], lite["s2"]
    sqlite3.connect(tmp_path / "plain.db").close()
    writer = RootWriter("S", via=s2, recheck=None)
    with writer.transaction() as cur:
        cur.execute("INSERT INTO accounts VALUES (1, 10)")

    def never(condition: Callable[[], bool], timeout: float) -> None:
        raise NotFinished("s2 applies nothing in this test")

    # A switchover under way: s1 refuses writes, and no node takes them yet.
    with served(s2), pytest.raises(NotFinished):
        handover.switchover(commands.open_set(s1), "s2", never, 1)
    found = locate_root("S", [s2])
    assert (found.state, found.node, found.writable) == (RootState.SWITCHING, "s1", False)
    assert "hands over to s2" in found.reason
    with pytest.raises(NoWritableRoot), writer.transaction() as cur:
        cur.execute("INSERT INTO accounts VALUES (2, 20)")
    assert rows(s1) == [(1, 10)]
    with pytest.raises(NoWritableRoot):
        connect_root("S", s1)

    # Another set's name: no such set there (the helper: bad input).
    other = commands.root(s1, "T")
    assert (other.state, other.node) == (RootState.NO_SET, None)
    assert "no set 'T' there" in other.reason and "is in set S" in other.reason
    with pytest.raises(CascadeInputError, match="no set 'T'"):
        connect_root("T", s1)

    # Pointed at what is not a member: one line each, the password masked.
    with pytest.raises(NotANode):
        connect_root("S", f"sqlite://{tmp_path / 'plain.db'}")
    with pytest.raises(NodeUnreachable) as down:
        RootWriter("S", via="postgresql://u:pw-secret@127.0.0.1:1/db").root  # noqa: B018
    assert "pw-secret" not in str(down.value) and "u:***@" in str(down.value)

    # The command line: the root and that it refuses writes now (exit 0); no such set, and no
    # live root, exit 1 with one line, nothing changed.
    res = root_cli("S", "--via", s2)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("set S: root s1 at sqlite://")
    assert "not writable now" in res.stdout
    res = root_cli("T", "--via", s1, "--json")
    assert res.returncode == 1 and res.stderr == ""
    assert json.loads(res.stdout)["state"] == "no-set"


def test_after_a_failover_the_old_roots_own_list_does_not_mislead(lite: dict[str, str]) -> None:
    s1, s2 = lite["s1"], lite["s2"]
    pinned = RootWriter("S", via=s1, recheck=0)
    pinned.run(lambda cur: cur.execute("INSERT INTO accounts VALUES (1, 10)"))
    tick(s1)
    catch_up(s2)
    commands.failover(s2, "s1")
    # s1 was down during the failover (here it was reached: its own node list is put back as
    # an unreached one would be): it still says it is alive and the root. s2's list tags it
    # dead, and the writer, asked through s1 alone, finds s2.
    with open_node_db(s1) as db, db.transaction() as cur:
        db.put_node(cur, "s1", s1, dead=False)
    with open_node_db(s1, readonly=True) as db:
        assert db.state().role is Role.ROOT and db.nodes()["s1"][1] is False
    found = locate_root("S", s1)
    assert (found.state, found.node) == (RootState.WRITABLE, "s2")
    pinned.run(lambda cur: cur.execute("INSERT INTO accounts VALUES (2, 20)"))
    assert pinned.root.node == "s2" and rows(s2) == [(1, 10), (2, 20)]
    pinned.close()
    # s2 lost too (tagged dead by hand): no live root, exit 1 with one line.
    with open_node_db(s2) as db, db.transaction() as cur:
        db.put_node(cur, "s2", s2, dead=True)
    res = root_cli("S", "--via", s2)
    assert res.returncode == 1, res
    (line,) = res.stdout.splitlines()
    assert line.startswith("set S has no live root") and "tagged dead: s1, s2" in line


async def test_the_api_route(lite: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()
    async with client(NodeAgent(config(tmp_path / "agent", "a"))) as c:
        res = await c.get("/v1/cascade/root", params={"set": "S", "via": lite["s2"]})
        assert res.status_code == 200, res.text
        assert res.json() == {"set": "S", "state": "writable", "root": "s1",
                              "location": lite["s1"], "tick": 1, "writable": True,
                              "reason": ""}  # fmt: skip
        res = await c.get("/v1/cascade/root", params={"set": "T", "via": lite["s2"]})
        assert (res.status_code, res.json()["state"]) == (200, "no-set")


# -- PostgreSQL ------------------------------------------------------------------------------


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[dict[str, str]]:
    """Set S on two fresh PostgreSQL databases; s1's location carries a password."""
    names = ["r" + uuid.uuid4().hex[:12] for _ in range(2)]
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    port = postgres_server.port
    locations = {
        "s1": f"postgresql://postgres:pw-secret@127.0.0.1:{port}/{names[0]}",
        "s2": f"postgresql://postgres@127.0.0.1:{port}/{names[1]}",
    }
    for location in locations.values():
        with psycopg.connect(location) as conn:
            conn.execute(ACCOUNTS.replace("INTEGER", "bigint"))
    build(locations)
    yield locations
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_postgres_refuses_by_sqlstate_and_masks_the_password(pg: dict[str, str]) -> None:
    s1, s2 = pg["s1"], pg["s2"]
    res = root_cli("S", "--via", s2)
    assert res.returncode == 0, res.stderr
    assert "pw-secret" not in res.stdout + res.stderr and ":***@" in res.stdout
    assert res.stdout.strip().endswith("writable")
    assert "pw-secret" not in json.dumps(commands.root(s2, "S").as_dict())

    old = connect_root("S", s2)
    with RootWriter("S", via=[s2, s1]) as writer:
        writer.run(lambda cur: cur.execute("INSERT INTO accounts VALUES (1, 10)"))
        switch(s1, "s2", s2)
        with pytest.raises(psycopg.Error) as refused:
            old.execute("INSERT INTO accounts VALUES (2, 20)")
        assert refused_here(refused.value) and refused.value.sqlstate == "BTN01"
        old.rollback()
        old.close()
        writer.run(lambda cur: cur.execute("INSERT INTO accounts VALUES (2, 20)"))
        assert writer.root.node == "s2"
    assert rows(s1) == [(1, 10)] and rows(s2) == [(1, 10), (2, 20)]
