"""Issue 16, items 4-5: queue-only branches, create-node, fkeys and triggers, sequences, scripts
through the queue (execute), node-switchover and node-failover. Without Spark: batches are
applied in-process with :func:`baton.cascade.apply.apply_batch`, as a worker does; real SQLite
files and real PostgreSQL databases."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from baton.cascade import commands, node_ops, set_ops
from baton.cascade.apply import ApplyResult, apply_batch
from baton.cascade.batches import reduce_events
from baton.cascade.db import open_node_db
from baton.cascade.model import ROW_TYPES, Role
from baton.cascade.node_replace import replace
from baton.cascade.ticker import TickerConfig, tick_once
from baton.errors import CascadeError, CascadeInputError, NodeDatabaseError, NotFinished, Refused
from baton.testing.cascade import served
from baton.testing.servers import PostgresServer
from tests.cascade.test_nodedb import Backend
from tests.test_cli import one_line_error
from tests.test_cli_cascade import run

#: Ticks whenever asked (idle 0): the tests decide when batches close.
NOW = TickerConfig(idle=0.0)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = str(request.param)
    pg = request.getfixturevalue("postgres_server") if kind == "postgres" else None
    b = Backend(kind, tmp_path, pg)
    yield b
    b.drop()


@pytest.fixture
def pg(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[Backend]:
    b = Backend("postgres", tmp_path, postgres_server)
    yield b
    b.drop()


def tick(root: str) -> None:
    with open_node_db(root) as db:
        assert tick_once(db, NOW, time.time() + 1) is not None


def step(provider: str, node: str) -> ApplyResult:
    """Apply every batch ``node``'s provider has past its position, as its worker would."""
    with open_node_db(provider) as p, open_node_db(node) as db:
        st = db.state()
        last = p.last_tick()
        assert last is not None
        ticks = p.ticks(st.position, last.tick_id)
        events = list(p.batch_events(st.position, last.tick_id))
        reduced = reduce_events(events)
        if not st.role.carries_queue:
            events = [e for e in events if e.type not in ROW_TYPES]
        return apply_batch(db, ticks, reduced, events, 1, provider=st.provider)


def chain(b: Backend, *roles: Role) -> list[str]:
    """A root and then one subscriber of the previous node per role; their locations (each
    with ``accounts`` replicated and copied)."""
    locs = [b.new() for _ in range(len(roles) + 1)]
    commands.create_root("n0", locs[0], "S")
    for i, role in enumerate(roles, 1):
        commands.create_subscriber(role, f"n{i}", locs[i], f"n{i - 1}", locs[0])
    for loc in locs:
        if node_ops.add_table(loc, "accounts") == "copying":
            node_ops.copy_table(loc, "accounts")
    return locs


# -- queue-only and create-node, through the CLI ---------------------------------------------


def test_queue_only_and_create_node_cli(tmp_path: Path) -> None:
    b = Backend("sqlite", tmp_path, None)
    s1, q2, l3, b4 = (b.new() for _ in range(4))
    via = ["--via", s1]
    assert "root of set S" in run("create-node", "root", "s1", s1, "--set", "S").stdout
    out = run("create-node", "queue-only", "q2", q2, "--provider", "s1", *via).stdout
    assert out.startswith("q2: queue-only of s1 in set S")
    assert "(already done)" in run("create-node", "queue-only", "q2", q2, "--provider", "s1",
                                   *via).stdout  # fmt: skip
    assert run("create-node", "leaf", "l3", l3, "--provider", "q2", *via).returncode == 0
    assert run("create-node", "branch", "b4", b4, "--provider", "s1", *via).returncode == 0
    # Bad input: one line, exit 2.
    for args, needle in (
        (["create-node", "hub", "x", b4, *via], "invalid choice"),
        (["create-node", "root", "x", b.new()], "--set"),
        (["create-node", "leaf", "x", b.new(), *via], "provider"),
        (["create-branch", "q2", q2, "--provider", "s1", *via], "not a branch with tables"),
        (["add-table", "accounts", "--node", "q2", *via], "keeps only the queue"),
    ):
        res = run(*args)
        assert res.returncode == 2, (args, res.stderr)
        if needle != "invalid choice":
            one_line_error(res, needle)
    assert run("add-table", "accounts", "--node", "s1", *via).returncode == 0
    res = run("add-table", "accounts", "--node", "l3", *via)
    assert res.returncode == 2
    one_line_error(res, "does not replicate", "queue-only", "change-provider", "candidates")
    assert set_ops.tables(set_ops.CascadeSet(l3), "l3") == {}
    added = run("add-table", "accounts", "--all", *via).stdout.splitlines()
    assert "b4: accounts copying (the node's worker copies it with Spark)" in added
    assert "q2: skipped (queue-only: it keeps only the queue)" in added
    assert any(line.startswith("l3: skipped (its provider q2") for line in added)
    # candidates: q2 is marked, in text and with --json --detail.
    lines = run("candidates", "l3", *via).stdout.splitlines()
    assert "q2 (queue-only: it cannot provide the initial copy of a table" in "\n".join(lines)
    assert "b4" in lines and "s1" in lines
    detail = json.loads(run("candidates", "l3", "--json", "--detail", *via).stdout)
    assert {d["name"]: d["queue_only"] for d in detail} == {"b4": False, "q2": True, "s1": False}
    status = json.loads(run("status", "--json", *via).stdout)
    flags = {m["name"]: m.get("queue_only", False) for m in status["members"]}
    assert flags == {"s1": False, "q2": True, "l3": False, "b4": False}
    assert "branch (queue-only)" in run("members", *via, env={"COLUMNS": "200"}).stdout
    # A queue-only node carries the queue: its leaf gets every event through it.
    b.sql(s1, "INSERT INTO accounts (id, balance) VALUES (1, 5)")
    tick(s1)
    assert step(s1, q2).events > 0
    step(q2, l3)
    commands.change_provider(s1, "l3", "s1")
    assert commands.add_table(s1, "accounts", "l3").nodes[0].state == "copying"


# -- fkeys and triggers -----------------------------------------------------------------------


def test_fkeys_and_triggers(backend: Backend) -> None:
    b = backend
    root, leaf = chain(b, Role.LEAF)
    text = "text" if b.kind == "postgres" else "TEXT"
    for loc in (root, leaf):
        b.sql(
            loc,
            f"CREATE TABLE parent (id bigint PRIMARY KEY, name {text})",
            "CREATE TABLE child (id bigint PRIMARY KEY, parent_id bigint REFERENCES parent (id))",
            "CREATE TABLE note (id bigint PRIMARY KEY, child bigint REFERENCES child (id))",
        )
    for loc in (root, leaf):
        node_ops.add_table(loc, "parent")
    found = {f.table: f for f in commands.fkeys(root, "n1").items}
    assert set(found) == {"child"}, found  # parent replicated, child not; note: neither side
    f = found["child"]
    assert (f.table, f.references, f.columns, f.ref_columns) == ("child", "parent", ["parent_id"],
                                                                  ["id"])  # fmt: skip
    assert "not on n1" in f.problem and "add-table" in f.fix
    node_ops.add_table(root, "child")
    node_ops.add_table(leaf, "child")
    both = {f.table: f for f in commands.fkeys(root, "n1").items}
    assert set(both) == {"child", "note"}  # note now refers to a replicated table
    assert "DEFERRABLE INITIALLY DEFERRED" in both["child"].fix
    assert commands.fkeys(root, "n0").applies is False
    if b.kind == "postgres":  # checked at commit: the pair is not in the way any more
        name = both["child"].name
        b.sql(leaf, f"ALTER TABLE child ALTER CONSTRAINT {name} DEFERRABLE INITIALLY DEFERRED")
        assert [f.table for f in commands.fkeys(root, "n1").items] == ["note"]
    # Triggers: a user trigger on a replicated table of the leaf fires when it applies; the
    # root's capture triggers are baton's and never listed.
    if b.kind == "postgres":
        b.sql(
            leaf,
            "CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$",
            "CREATE TRIGGER audit AFTER INSERT ON parent FOR EACH ROW EXECUTE FUNCTION noop()",
            "CREATE TRIGGER other AFTER INSERT ON note FOR EACH ROW EXECUTE FUNCTION noop()",
        )
    else:
        b.sql(
            leaf,
            "CREATE TRIGGER audit AFTER INSERT ON parent BEGIN SELECT 1; END",
            "CREATE TRIGGER other AFTER INSERT ON note BEGIN SELECT 1; END",
        )
    r = commands.triggers(root, "n1")
    assert [(t.table, t.name) for t in r.items] == [("parent", "audit")]
    assert "fires for each row applied" in r.items[0].fix
    root_r = commands.triggers(root, "n0")
    assert root_r.items == [] and "root" in root_r.note
    with pytest.raises(CascadeInputError, match="unknown node"):
        commands.fkeys(root, "zz")


# -- sequences --------------------------------------------------------------------------------


def seq_value(b: Backend, loc: str) -> int:
    conn = b.connect(loc)
    try:
        return int(conn.execute("SELECT last_value FROM ids").fetchone()[0])
    finally:
        conn.close()


def test_sequences_follow_the_root(pg: Backend) -> None:
    root, branch, leaf = chain(pg, Role.BRANCH, Role.LEAF)
    for loc in (root, branch):
        pg.sql(loc, "CREATE SEQUENCE ids")
    # Missing on the leaf: refused, and nothing registered anywhere.
    with pytest.raises(CascadeInputError, match="n2: no sequence 'ids'"):
        commands.add_seq(root, "ids", everywhere=True)
    assert all(commands.list_seqs(root, n) == {} for n in ("n0", "n1", "n2"))
    pg.sql(leaf, "CREATE SEQUENCE ids")
    with pytest.raises(Refused, match="root n0 does not send"):
        commands.add_seq(root, "ids", "n1")
    added = commands.add_seq(root, "ids", everywhere=True)
    assert added.nodes == [("n0", False), ("n1", False), ("n2", False)]
    assert commands.add_seq(root, "ids", everywhere=True).nodes[0] == ("n0", True)
    pg.sql(root, "SELECT nextval('ids') FROM generate_series(1, 41)")
    pg.sql(leaf, "SELECT setval('ids', 100)")  # ahead of the root: never lowered
    tick(root)
    step(root, branch)
    step(branch, leaf)  # the branch carries the event in its queue
    assert seq_value(pg, branch) == 41 and seq_value(pg, leaf) == 100
    assert commands.list_seqs(root, "n1") == {"ids": 41}
    pg.sql(root, "SELECT nextval('ids') FROM generate_series(1, 100)")
    tick(root)
    tick(root)  # unchanged since: no second event
    with open_node_db(root) as db:
        sent = [e for e in db.events_after(0) if e.type == "baton.seq"]
    assert [json.loads(e.data or "")["seqs"] for e in sent] == [{"ids": 41}, {"ids": 141}]
    step(root, branch)
    step(branch, leaf)
    assert seq_value(pg, branch) == 141 and seq_value(pg, leaf) == 141
    with pytest.raises(Refused, match="still kept by n1, n2"):
        commands.remove_seq(root, "ids", "n0")
    assert commands.remove_seq(root, "ids", "n2").removed is True
    assert commands.remove_seq(root, "ids", "n2").removed is False


def test_sequences_refused_on_sqlite(tmp_path: Path) -> None:
    b = Backend("sqlite", tmp_path, None)
    root, _ = chain(b, Role.LEAF)
    with pytest.raises(CascadeInputError, match="SQLite has no sequences"):
        commands.add_seq(root, "ids", everywhere=True)
    res = run("add-seq", "ids", "--node", "n0", "--via", root)
    assert res.returncode == 2
    one_line_error(res, "SQLite has no sequences")
    assert commands.list_seqs(root, "n0") == {}


# -- execute ----------------------------------------------------------------------------------


def pending(loc: str) -> int:
    with open_node_db(loc) as db:
        return db.pending()[0]


def test_execute_runs_at_its_place_in_the_batch(backend: Backend) -> None:
    b = backend
    root, branch, leaf = chain(b, Role.BRANCH, Role.LEAF)
    text = "text" if b.kind == "postgres" else "TEXT"
    # One batch: a row before the script, the script adding a column, a row that uses it.
    b.sql(root, "INSERT INTO accounts (id, balance, name) VALUES (1, 10, 'a')")
    r = commands.execute(root, "001_note.sql", f"ALTER TABLE accounts ADD COLUMN note {text};")
    assert r.already is False and r.ev_id is not None
    b.sql(root, "INSERT INTO accounts (id, balance, note) VALUES (2, 20, 'n')")
    again = commands.execute(root, "001_note.sql", f"ALTER TABLE accounts ADD COLUMN note {text};")
    assert again.already is True  # not run twice
    with pytest.raises(Refused, match="other content"):
        commands.execute(root, "001_note.sql", "SELECT 1")
    # Then a column dropped, with row images from before the drop in the same batch.
    b.sql(root, "UPDATE accounts SET name = 'b' WHERE id = 1")
    commands.execute(root, "002_drop.sql", "ALTER TABLE accounts DROP COLUMN name")
    b.sql(root, "UPDATE accounts SET balance = 11 WHERE id = 1")
    tick(root)
    step(root, branch)
    step(branch, leaf)
    for loc in (branch, leaf):
        with open_node_db(loc) as db:
            assert db.columns("accounts")[0] == ["id", "balance", "updated_at", "note"]
            assert db.read_rows("accounts") == [(1, 11, None, None), (2, 20, None, "n")]
            assert db.get_local("execute.002_drop.sql") is not None
    # Bad SQL at the root: refused, nothing changed, nothing queued.
    before = pending(root)
    with pytest.raises(CascadeInputError):
        commands.execute(root, "003_bad.sql", "ALTER TABLE nosuch ADD COLUMN x int")
    assert pending(root) == before
    with open_node_db(root) as db:
        assert db.get_local("execute.003_bad.sql") is None
    # A script that fails on one node stops its apply at that batch; fixed, it goes on.
    b.sql(root, "CREATE TABLE extra (id bigint PRIMARY KEY)")
    commands.execute(root, "004_index.sql", "CREATE INDEX extra_ix ON extra (id)")
    b.sql(root, "INSERT INTO accounts (id, balance) VALUES (3, 30)")
    tick(root)
    at = commands.status(root).members[1].position
    with pytest.raises(NodeDatabaseError, match=r"n1: script 004_index.sql .* failed") as exc:
        step(root, branch)
    assert len(str(exc.value).splitlines()) == 1
    with open_node_db(branch) as db:
        assert db.state().position == at and len(db.read_rows("accounts")) == 2
    b.sql(branch, "CREATE TABLE extra (id bigint PRIMARY KEY)")
    assert step(root, branch).applied
    with open_node_db(branch) as db:
        assert len(db.read_rows("accounts")) == 3


def test_execute_cli(tmp_path: Path) -> None:
    b = Backend("sqlite", tmp_path, None)
    root, _leaf = chain(b, Role.LEAF)
    script = tmp_path / "005_col.sql"
    script.write_text("ALTER TABLE accounts ADD COLUMN extra INTEGER;\n")
    out = run("execute", str(script), "--via", root).stdout
    assert out.startswith("005_col.sql: executed at root n0; event")
    assert "already executed" in run("execute", str(script), "--via", root).stdout
    bad = tmp_path / "006_bad.sql"
    bad.write_text("ALTER TABLE nosuch ADD COLUMN x INTEGER;")
    before = pending(root)
    res = run("execute", str(bad), "--via", root)
    assert res.returncode == 2
    one_line_error(res, "nosuch")
    assert pending(root) == before


# -- node-switchover and node-failover --------------------------------------------------------


def driver(locs: dict[str, str]) -> Callable[[Callable[[], bool], float], None]:
    """A wait that does the workers' job: tick the root and apply each node from its provider
    until the condition holds (or the deadline passes)."""

    def wait(cond: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise NotFinished("not within the timeout")
            tick(locs["s1"])
            c = set_ops.CascadeSet(locs["s1"])
            states = set_ops.live_states(c)
            for name in set_ops.subscription_order(states):
                provider = states[name].provider
                if provider is not None and not states[name].paused:
                    step(locs[provider], locs[name])

    return wait


def test_node_switchover_then_failover(tmp_path: Path) -> None:
    b = Backend("sqlite", tmp_path, None)
    locs = {n: b.new() for n in ("s1", "b2", "b3", "l4")}
    commands.create_root("s1", locs["s1"], "S")
    commands.create_subscriber(Role.BRANCH, "b2", locs["b2"], "s1", locs["s1"])
    commands.create_subscriber(Role.BRANCH, "b3", locs["b3"], "b2", locs["s1"])
    commands.create_subscriber(Role.LEAF, "l4", locs["l4"], "b2", locs["s1"])
    wait = driver(locs)
    b.sql(locs["s1"], "INSERT INTO accounts (id, balance) VALUES (1, 1)")
    c = set_ops.CascadeSet(locs["s1"])
    with pytest.raises(CascadeError, match="leaf"):
        replace(c, "l4", "b2", failover=False, wait=wait)
    with pytest.raises(CascadeInputError, match="itself"):
        replace(c, "b2", "b2", failover=False, wait=wait)
    with pytest.raises(Refused, match="root"):
        replace(c, "b3", "s1", failover=False, wait=wait)
    # No worker at b3: refused before b2 (and its subtree) is paused for nothing.
    with pytest.raises(Refused, match=r"b3.s worker is not running: start .* nothing was changed"):
        replace(c, "b3", "b2", failover=False, wait=wait, timeout=30)
    assert not c.state("b2").paused and c.state("b3").provider == "b2"
    with served(locs["b3"]):  # the driver applies for it
        r = replace(c, "b3", "b2", failover=False, wait=wait, timeout=30)
    assert (r.provider, r.moved, r.already) == ("s1", ["l4"], False)
    st = {n: set_ops.CascadeSet(locs["s1"]).state(n) for n in locs}
    assert {n: s.provider for n, s in st.items()} == {"s1": None, "b3": "s1", "l4": "b3",
                                                      "b2": "b3"}  # fmt: skip
    assert not st["b2"].paused
    assert replace(c, "b3", "b2", failover=False, wait=wait).already is True
    # node-failover through the commands (and the API's code): b2 takes b3's place, b3 dead.
    b.sql(locs["s1"], "INSERT INTO accounts (id, balance) VALUES (2, 2)")
    wait(lambda: set_ops.CascadeSet(locs["s1"]).state("l4").position >= 3, 30)
    c = set_ops.CascadeSet(locs["s1"])
    with served(locs["b2"]):
        r = replace(c, "b2", "b3", failover=True, wait=wait, timeout=30)
    assert (r.provider, r.moved, r.failover) == ("s1", ["l4"], True)
    c = set_ops.CascadeSet(locs["s1"])
    assert c.dead("b3") and c.state("b2").provider == "s1" and c.state("l4").provider == "b2"
    assert replace(c, "b2", "b3", failover=True, wait=wait).already is True
    res = run("node-failover", "b2", "--old", "zz", "--via", locs["s1"])
    assert res.returncode == 2
    one_line_error(res, "unknown node 'zz'")


def test_create_node_merge_leaf(tmp_path: Path) -> None:
    b = Backend("sqlite", tmp_path, None)
    part, combined = b.new(), b.new()
    commands.create_node("root", "p0", part, set_name="P")
    commands.create_node("root", "c0", combined, set_name="C")
    made = commands.create_node("merge-leaf", "m1", combined, provider="p0", via=part)
    assert (made.role, made.provider, made.set_name) == ("merge-leaf", "p0", "P")
    assert made.location.endswith("#P") and made.already is False
    # The merge-leaf's own location reaches its set, on the command line too (its file is the
    # host's: the "#P" is not part of the path).
    assert [m.name for m in commands.status(made.location).members] == ["m1", "p0"]
    shown = run("status", "--via", made.location)
    assert shown.returncode == 0, shown.stderr
    assert "m1" in shown.stdout and "p0" in shown.stdout
    again = commands.create_node("merge-leaf", "m1", combined, provider="p0", via=part)
    assert again.already is True
    with pytest.raises(CascadeInputError, match="the same"):
        commands.create_node("merge-leaf", "m2", combined, provider="p0", via=part, host=part)
