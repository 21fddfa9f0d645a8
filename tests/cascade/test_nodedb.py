"""The node database contract, on SQLite (a temp file) and PostgreSQL (a fresh database per
test): schema and state, capture, ticks and batches, copy, trim, and replicated rows; and on
PostgreSQL the snapshot rule that keeps an event committed after a tick out of that tick's batch
even though its id is lower."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.db.postgres import PostgresNodeDB
from baton.cascade.model import Event, Tick
from baton.errors import CascadeError
from baton.testing.servers import PostgresServer

ACCOUNTS = (
    "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, name text, "
    "updated_at double precision)"
)
COLS = ["id", "balance", "name", "updated_at"]
#: Needs 17 significant digits to read back exactly.
PRECISE = 1795247700.6466696


class Backend:
    """Fresh node databases of one kind, and plain SQL on them through that kind's own driver
    (the application's writes, which the capture triggers see)."""

    def __init__(self, kind: str, tmp_path: Path, pg: PostgresServer | None) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.pg = pg
        self.created: list[str] = []

    def new(self) -> str:
        """The location of a fresh database holding an empty ``accounts`` table."""
        name = "t" + uuid.uuid4().hex[:12]
        if self.pg is None:
            location = f"sqlite://{self.tmp_path / name}.db"
        else:
            with psycopg.connect(self.pg.url, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
            self.created.append(name)
            location = f"postgresql://postgres@127.0.0.1:{self.pg.port}/{name}"
        self.sql(location, ACCOUNTS)
        return location

    def connect(self, location: str) -> Any:
        """A connection of the backend's own driver, not in autocommit."""
        if self.pg is None:
            return sqlite3.connect(location.removeprefix("sqlite://"), timeout=30)
        return psycopg.connect(location)

    def sql(self, location: str, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
        """Run ``statements`` (with ``?`` parameters) in one committed transaction."""
        conn = self.connect(location)
        try:
            for s in statements:
                text, args = (s, ()) if isinstance(s, str) else s
                conn.execute(text if self.pg is None else text.replace("?", "%s"), args)
            conn.commit()
        finally:
            conn.close()

    def drop(self) -> None:
        if self.pg is None:
            return
        with psycopg.connect(self.pg.url, autocommit=True) as admin:
            for name in self.created:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = str(request.param)
    pg = request.getfixturevalue("postgres_server") if kind == "postgres" else None
    b = Backend(kind, tmp_path, pg)
    yield b
    b.drop()


@pytest.fixture
def pg_nodes(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[Backend]:
    b = Backend("postgres", tmp_path, postgres_server)
    yield b
    b.drop()


@pytest.fixture
def db(nodes: Backend) -> Iterator[NodeDB]:
    """An installed node database with ``accounts`` captured (not yet ticked)."""
    with open_node_db(nodes.new()) as d:
        d.install()
        with d.transaction() as cur:
            d.capture(cur, "accounts", True)
            d.set_table(cur, "accounts", "ok")
        yield d


def tick(db: NodeDB, min_events: int = 0) -> Tick | None:
    with db.transaction() as cur:
        return db.make_tick(cur, min_events)


def must_tick(db: NodeDB) -> Tick:
    t = tick(db)
    assert t is not None
    return t


def emit(db: NodeDB, n: int, type_: str = "custom") -> list[int]:
    with db.transaction() as cur:
        return [db.insert_event(cur, type_, None, None, json.dumps({"n": i})) for i in range(n)]


def shape(events: list[Event]) -> list[tuple[Any, ...]]:
    """What a consumer sees of events, whatever backend made them."""
    return [(e.type, e.table, e.key, json.loads(e.data) if e.data else None) for e in events]


# -- schema and state ---------------------------------------------------------------------


def test_install_state_and_nodes(nodes: Backend) -> None:
    with open_node_db(nodes.new()) as d:
        assert not d.is_installed()
        with pytest.raises(CascadeError, match="not a cascade node"):
            d.get_local("node_name")
        d.install()
        d.install()  # idempotent
        assert not d.is_installed()
        assert d.get_local("missing", "dflt") == "dflt"
        with d.transaction() as cur:
            d.set_local(cur, "role", "root")
            d.set_local(cur, "node_name", "n1")
            d.set_local(cur, "node_name", "n2")
            d.put_node(cur, "n2", "loc-2")
            d.put_node(cur, "n1", "loc-1")
        assert d.is_installed()
        assert d.state().name == "n2"
        assert d.state().role.value == "root"
        with d.transaction() as cur:
            d.set_local(cur, "role", None)
            d.put_node(cur, "n1", "loc-1b", dead=True)
        assert d.get_local("role") is None
        assert d.nodes() == {"n1": ("loc-1b", True), "n2": ("loc-2", False)}
        d.install()  # again, on a used node: nothing lost
        assert d.get_local("node_name") == "n2"


def test_failed_transaction_changes_nothing(db: NodeDB) -> None:
    with pytest.raises(RuntimeError), db.transaction() as cur:
        db.set_local(cur, "k", "v")
        db.insert_event(cur, "x", None, None, None)
        raise RuntimeError("boom")
    assert db.get_local("k") is None
    assert db.pending() == (0, None)


# -- capture ------------------------------------------------------------------------------


def test_capture_writes_exact_events(nodes: Backend) -> None:
    location = nodes.new()
    with open_node_db(location) as d:
        d.install()
        with d.transaction() as cur:
            d.capture(cur, "accounts", True)
        t1 = must_tick(d)
        nodes.sql(
            location,
            ("INSERT INTO accounts VALUES (?, ?, ?, ?)", (1, 100, 'alice "A" é', PRECISE)),
            ("INSERT INTO accounts VALUES (?, ?, ?, ?)", (2, 200, None, 0.1)),
        )
        nodes.sql(location, "UPDATE accounts SET balance = 150 WHERE id = 1")
        nodes.sql(location, "UPDATE accounts SET id = 3 WHERE id = 2")  # a key change
        nodes.sql(location, "DELETE FROM accounts WHERE id = 1")
        # A rolled-back change leaves no event: the event is written in its transaction.
        conn = nodes.connect(location)
        conn.execute("INSERT INTO accounts VALUES (9, 9, 'gone', 9.5)")
        conn.rollback()
        conn.close()
        assert d.pending()[0] == 6
        t2 = must_tick(d)
        events = list(d.batch_events(t1.tick_id, t2.tick_id))
    alice = {"id": 1, "balance": 100, "name": 'alice "A" é', "updated_at": PRECISE}
    bob = {"id": 2, "balance": 200, "name": None, "updated_at": 0.1}
    assert shape(events) == [
        ("I", "accounts", '{"id":1}', alice),
        ("I", "accounts", '{"id":2}', bob),
        ("U", "accounts", '{"id":1}', {**alice, "balance": 150}),
        ("D", "accounts", '{"id":2}', None),
        ("U", "accounts", '{"id":3}', {**bob, "id": 3}),
        ("D", "accounts", '{"id":1}', None),
    ]
    for e in events:
        assert e.tick == t2.tick_id
        if e.data:
            assert list(json.loads(e.data)) == COLS  # every column, in table order
            assert isinstance(json.loads(e.data)["updated_at"], float)
    assert [e.ev_id for e in events] == sorted(e.ev_id for e in events)


def test_capture_key_order_and_off(nodes: Backend) -> None:
    location = nodes.new()
    nodes.sql(location, "CREATE TABLE pairs (b text, a bigint, v text, PRIMARY KEY (a, b))")
    with open_node_db(location) as d:
        d.install()
        assert d.columns("pairs") == (["b", "a", "v"], ["a", "b"])
        with d.transaction() as cur:
            d.capture(cur, "pairs", True)
            d.capture(cur, "pairs", True)  # again: still one event per change
        t1 = must_tick(d)
        nodes.sql(location, "INSERT INTO pairs VALUES ('x', 1, 'v1')")
        with d.transaction() as cur:
            d.capture(cur, "pairs", False)
        nodes.sql(location, "INSERT INTO pairs VALUES ('y', 2, 'v2')")
        t2 = must_tick(d)
        events = list(d.batch_events(t1.tick_id, t2.tick_id))
    assert shape(events) == [("I", "pairs", '{"a":1,"b":"x"}', {"b": "x", "a": 1, "v": "v1"})]


def test_capture_of_multi_row_statements(nodes: Backend) -> None:
    """Each row a statement changes is one event (a key change two: the old key's delete, then
    the new key's row), in the order the statement changed the rows, each after-image paired
    with its own before-image; a statement that changes no row captures nothing."""
    location = nodes.new()
    n = 500
    with open_node_db(location) as d:
        d.install()
        with d.transaction() as cur:
            d.capture(cur, "accounts", True)
        t1 = must_tick(d)
        values = ", ".join(f"({i}, {i}, 'n{i}', {i}.5)" for i in range(1, n + 1))
        nodes.sql(
            location,
            f"INSERT INTO accounts VALUES {values}",
            "UPDATE accounts SET balance = -1 WHERE id < 0",  # no row
            # Even rows move to a new key and keep their old one in balance (a before-image
            # paired with another row's after-image would show as a mismatch).
            "UPDATE accounts SET id = id + 10000, balance = id WHERE id / 2 * 2 = id",
            "UPDATE accounts SET name = 'odd' WHERE id / 2 * 2 <> id",
            "DELETE FROM accounts WHERE id > 10000 AND id <= 10010",
            "DELETE FROM accounts WHERE id < 0",  # no row
        )
        t2 = must_tick(d)
        events = list(d.batch_events(t1.tick_id, t2.tick_id))

    def row(i: int, **changed: Any) -> dict[str, Any]:
        return {"id": i, "balance": i, "name": f"n{i}", "updated_at": i + 0.5, **changed}

    expected: list[tuple[Any, ...]] = [
        ("I", "accounts", f'{{"id":{i}}}', row(i)) for i in range(1, n + 1)
    ]
    for i in range(2, n + 1, 2):
        expected.append(("D", "accounts", f'{{"id":{i}}}', None))
        expected.append(("U", "accounts", f'{{"id":{i + 10000}}}', row(i, id=i + 10000)))
    for i in range(1, n + 1, 2):
        expected.append(("U", "accounts", f'{{"id":{i}}}', row(i, name="odd")))
    got = shape(events)
    assert got[: len(expected)] == expected
    # The order in which a DELETE visits rows is the scan's: only the set is known here.
    deleted = sorted(got[len(expected) :])
    assert deleted == [("D", "accounts", f'{{"id":{i}}}', None) for i in range(10002, 10011, 2)]
    ids = [e.ev_id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert len({e.txid for e in events}) == 1  # one transaction


def test_capture_with_columns_named_like_its_own_aliases(nodes: Backend) -> None:
    """Columns named like the capture's own names, and a key of two columns (in key order)."""
    location = nodes.new()
    nodes.sql(
        location, "CREATE TABLE odd (t text, n bigint, j text, txid bigint, PRIMARY KEY (n, t))"
    )
    with open_node_db(location) as d:
        d.install()
        with d.transaction() as cur:
            d.capture(cur, "odd", True)
        t1 = must_tick(d)
        nodes.sql(
            location,
            "INSERT INTO odd VALUES ('a', 1, 'b', 7), ('c', 2, 'd', 8)",
            "UPDATE odd SET n = n + 1, t = 'moved' WHERE n = 2",
            "DELETE FROM odd WHERE n = 1",
        )
        t2 = must_tick(d)
        events = list(d.batch_events(t1.tick_id, t2.tick_id))
    assert shape(events) == [
        ("I", "odd", '{"n":1,"t":"a"}', {"t": "a", "n": 1, "j": "b", "txid": 7}),
        ("I", "odd", '{"n":2,"t":"c"}', {"t": "c", "n": 2, "j": "d", "txid": 8}),
        ("D", "odd", '{"n":2,"t":"c"}', None),
        ("U", "odd", '{"n":3,"t":"moved"}', {"t": "moved", "n": 3, "j": "d", "txid": 8}),
        ("D", "odd", '{"n":1,"t":"a"}', None),
    ]


def test_capture_replaces_an_older_row_trigger(pg_nodes: Backend) -> None:
    """A node whose table an older baton captured with one row trigger ``baton_capture``: the
    next capture drops it, so each change is captured once, by the statement triggers."""
    location = pg_nodes.new()
    pg_nodes.sql(
        location,
        "CREATE FUNCTION baton_capture() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO baton_event (ev_time, ev_type) VALUES (0, 'old'); RETURN NULL; END $$",
    )
    with open_node_db(location) as d:
        d.install()
        pg_nodes.sql(
            location,
            "CREATE TRIGGER baton_capture AFTER INSERT OR UPDATE OR DELETE ON accounts "
            "FOR EACH ROW EXECUTE FUNCTION baton_capture('id')",
        )
        with d.transaction() as cur:
            d.capture(cur, "accounts", True)
        t1 = must_tick(d)
        pg_nodes.sql(location, "INSERT INTO accounts VALUES (1, 1, 'a', 1.5), (2, 2, 'b', 2.5)")
        t2 = must_tick(d)
        events = list(d.batch_events(t1.tick_id, t2.tick_id))
        assert d.user_triggers() == []
    assert [(e.type, e.key) for e in events] == [("I", '{"id":1}'), ("I", '{"id":2}')]


# -- ticks and batches --------------------------------------------------------------------


def test_ticks_batches_and_pending(db: NodeDB) -> None:
    assert db.last_tick() is None
    assert db.pending() == (0, None)
    t1 = must_tick(db)  # the first tick, on an empty queue
    assert t1.tick_id == 1
    assert list(db.batch_events(0, 1)) == []
    ids = emit(db, 3)
    count, oldest = db.pending()
    assert count == 3
    assert oldest is not None and oldest > t1.time - 5
    assert tick(db, min_events=4) is None
    t2 = tick(db, min_events=3)
    assert t2 is not None and t2.tick_id == 2
    assert t2.ev_high >= max(ids)
    assert db.pending() == (0, None)
    emit(db, 2)
    t3 = must_tick(db)
    t4 = must_tick(db)  # an empty batch
    assert db.last_tick() == t4
    assert db.get_tick(3) == t3
    assert db.get_tick(99) is None
    assert db.ticks(1, 3) == [t2, t3]
    assert db.ticks(0, 9) == [t1, t2, t3, t4]
    assert [e.ev_id for e in db.batch_events(1, 2)] == ids
    assert [(e.tick, json.loads(e.data or "")["n"]) for e in db.batch_events(1, 4)] == [
        (2, 0), (2, 1), (2, 2), (3, 0), (3, 1)
    ]  # fmt: skip
    assert list(db.batch_events(3, 4)) == []
    assert list(db.batch_events(1, 99)) == []  # no such tick yet


def test_copy_batch_gives_the_same_batches(nodes: Backend, db: NodeDB) -> None:
    must_tick(db)
    emit(db, 2)
    nodes.sql(db.location, "INSERT INTO accounts VALUES (1, 10, 'a', 0.1)")
    must_tick(db)
    nodes.sql(db.location, "UPDATE accounts SET balance = 11 WHERE id = 1")
    must_tick(db)
    with open_node_db(nodes.new()) as branch:
        branch.install()
        with branch.transaction() as cur:
            branch.copy_batch(cur, [], db.ticks(0, 1))  # the base tick, as create_subscriber
        for after, upto in ((1, 2), (2, 3)):
            with branch.transaction() as cur:
                branch.copy_batch(cur, list(db.batch_events(after, upto)), db.ticks(after, upto))
        assert branch.ticks(0, 3) == db.ticks(0, 3)
        for after, upto in ((1, 2), (2, 3), (1, 3), (0, 3)):
            assert list(branch.batch_events(after, upto)) == list(db.batch_events(after, upto))
        assert branch.pending() == (0, None)
        # The branch's own ids (should it become the root) go on above the copied ones.
        top = max(e.ev_id for e in db.batch_events(0, 3))
        assert emit(branch, 1)[0] > top


def test_first_local_tick_after_copied_ticks(nodes: Backend, db: NodeDB) -> None:
    """A promoted branch: its first batch is what it captured since, not the copied queue."""
    must_tick(db)
    emit(db, 3)
    must_tick(db)
    location = nodes.new()
    with open_node_db(location) as branch:
        branch.install()
        with branch.transaction() as cur:
            branch.copy_batch(cur, list(db.batch_events(0, 2)), db.ticks(0, 2))
            branch.capture(cur, "accounts", True)
        assert branch.pending() == (0, None)
        nodes.sql(location, "INSERT INTO accounts VALUES (5, 50, 'new', 1.5)")
        assert branch.pending()[0] == 1
        t3 = must_tick(branch)
        assert t3.tick_id == 3
        assert shape(list(branch.batch_events(2, 3))) == [
            (
                "I",
                "accounts",
                '{"id":5}',
                {"id": 5, "balance": 50, "name": "new", "updated_at": 1.5},
            )
        ]
        assert [e.tick for e in branch.batch_events(0, 3)] == [2, 2, 2, 3]
        nodes.sql(location, "DELETE FROM accounts")
        t4 = must_tick(branch)
        assert shape(list(branch.batch_events(3, 4))) == [("D", "accounts", '{"id":5}', None)]
        assert t4.ev_high > t3.ev_high


def test_bump_event_ids(db: NodeDB) -> None:
    first = emit(db, 1)[0]
    with db.transaction() as cur:
        db.bump_event_ids(cur, 1000)
        db.bump_event_ids(cur, 10)  # never lowers
    bumped = emit(db, 1)[0]
    assert first < 1000 < bumped
    with db.transaction() as cur:
        db.bump_event_ids(cur, 0)
    assert emit(db, 1)[0] > bumped


def test_trim(nodes: Backend, db: NodeDB) -> None:
    must_tick(db)
    batches = []
    for _ in range(3):
        batches.append(emit(db, 2))
        must_tick(db)
    with open_node_db(nodes.new()) as branch:
        branch.install()
        with branch.transaction() as cur:
            branch.copy_batch(cur, list(db.batch_events(0, 4)), db.ticks(0, 4))
        for d in (db, branch):
            with d.transaction() as cur:
                assert d.trim(cur, 99) == 0  # no such tick: nothing
                assert d.trim(cur, 3) == 2 + 2  # the events of batch 2, and ticks 1 and 2
            assert [t.tick_id for t in d.ticks(0, 9)] == [3, 4]
            assert [e.ev_id for e in d.batch_events(3, 4)] == batches[2]
            assert [e.ev_id for e in d.batch_events(0, 4)] == batches[1] + batches[2]
            with d.transaction() as cur:
                assert d.trim(cur, 3) == 0  # again: nothing left below


def test_a_big_trim_goes_in_steps_and_whole(
    nodes: Backend, db: NodeDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trim runs in a writer's transaction (SQLite's one writer; a branch's apply), so it
    deletes about TRIM_STEP events at most, the oldest, and the next trims (to the same or a
    later watermark) delete the rest, never an event at or above the watermark: at a root
    (captured events, PostgreSQL's snapshot rule) and at a branch (copied events)."""
    from baton.cascade.db import postgres, sqlite

    step = 100
    monkeypatch.setattr(sqlite, "TRIM_STEP", step)
    monkeypatch.setattr(postgres, "TRIM_STEP", step)
    must_tick(db)
    for _ in range(6):
        emit(db, step // 2)
        must_tick(db)
    kept = emit(db, 3)
    top = must_tick(db).tick_id
    with open_node_db(nodes.new()) as branch:
        branch.install()
        with branch.transaction() as cur:
            branch.copy_batch(cur, list(db.batch_events(0, top)), db.ticks(0, top))
        for d in (db, branch):
            counts = [_trim(d, top)]
            assert 0 < counts[0] <= step + 2  # events plus the ticks below the step's bound
            while (n := _trim(d, top)) > 0:
                counts.append(n)
            assert 2 < len(counts) < 6
            assert sum(counts) == 6 * (step // 2) + top - 1  # every event and tick below
            assert [t.tick_id for t in d.ticks(0, top + 1)] == [top]
            assert [e.ev_id for e in d.batch_events(0, top)] == kept


def _trim(db: NodeDB, below: int) -> int:
    with db.transaction() as cur:
        return db.trim(cur, below)


def test_events_after_and_discard_after(db: NodeDB) -> None:
    must_tick(db)
    first = emit(db, 2)
    must_tick(db)
    second = emit(db, 2)
    must_tick(db)
    third = emit(db, 1)  # not ticked
    assert [e.ev_id for e in db.events_after(2)] == second + third
    assert [e.ev_id for e in db.events_after(0)] == first + second + third
    with db.transaction() as cur:
        db.discard_after(cur, 2)
    assert [t.tick_id for t in db.ticks(0, 9)] == [1, 2]
    assert list(db.events_after(2)) == []
    assert [e.ev_id for e in db.batch_events(1, 2)] == first


# -- replicated tables --------------------------------------------------------------------


def test_rows_round_trip(db: NodeDB) -> None:
    assert db.columns("accounts") == (COLS, ["id"])
    with pytest.raises(CascadeError, match="no table"):
        db.columns("nope")
    with pytest.raises(CascadeError, match="bad table or column name"):
        db.columns("accounts; DROP TABLE accounts")
    with db.transaction() as cur:
        db.upsert(cur, "accounts", COLS, [])
        db.upsert(
            cur,
            "accounts",
            COLS,
            [[2, 20, "b", 0.1], [1, 10, None, PRECISE], [3, 30, "c", -1.5], [2, 21, "b2", 2.5]],
        )
    assert db.read_rows("accounts") == [
        (1, 10, None, PRECISE),
        (2, 21, "b2", 2.5),
        (3, 30, "c", -1.5),
    ]
    with db.transaction() as cur:
        db.upsert(cur, "accounts", ["id", "balance"], [[1, 11], [4, 40]])  # some columns only
        db.delete_keys(cur, "accounts", ["id"], [[3], [99]])
        db.delete_keys(cur, "accounts", ["id"], [])
    assert db.read_rows("accounts") == [
        (1, 11, None, PRECISE),
        (2, 21, "b2", 2.5),
        (4, 40, None, None),
    ]
    assert db.read_keys("accounts", ["id"], [[4], [98], [1]]) == [
        (4, 40, None, None),
        (1, 11, None, PRECISE),
    ]


def test_subscribers_and_tables(db: NodeDB) -> None:
    assert db.tables() == {"accounts": "ok"}
    with db.transaction() as cur:
        db.set_watermark(cur, "b", 3)
        db.set_watermark(cur, "a", 1)
        db.set_watermark(cur, "a", 2)
        db.set_table(cur, "other", "copying", 7)
    assert db.watermarks() == {"a": 2, "b": 3}
    assert db.tables() == {"accounts": "ok", "other": "copying"}
    assert db.table_tick("other") == 7
    assert db.table_tick("accounts") == 0
    with db.transaction() as cur:
        db.drop_subscriber(cur, "a")
        db.set_table(cur, "other", None)
    assert db.watermarks() == {"b": 3}
    assert db.tables() == {"accounts": "ok"}


# -- PostgreSQL ---------------------------------------------------------------------------


def test_trims_start_from_the_floor_earlier_trims_left(pg_nodes: Backend) -> None:
    """A trim's delete of captured events starts at the transaction id earlier trims left no
    event below (so it does not walk their dead rows again); a floor above the database's own
    ids (a node database restored into a new cluster) is not taken: every event still goes."""
    from baton.cascade.db.postgres import TRIM_FLOOR_KEY

    with open_node_db(pg_nodes.new()) as d:
        d.install()
        must_tick(d)
        emit(d, 3)
        must_tick(d)
        emit(d, 2)
        third = must_tick(d).tick_id
        assert _trim(d, third) == 3 + 2  # batch 2's events; ticks 1 and 2
        floor = d.get_local(TRIM_FLOOR_KEY)
        assert floor is not None and int(floor) > 0
        kept = emit(d, 4)
        top = must_tick(d).tick_id
        with d.transaction() as cur:
            d.set_local(cur, TRIM_FLOOR_KEY, str(2**62))
        assert _trim(d, top) == 2 + 1  # batch 3's events, tick 3
        assert [e.ev_id for e in d.batch_events(0, top)] == kept
        assert int(d.get_local(TRIM_FLOOR_KEY) or 0) < 2**62


def test_snapshot_rule_keeps_late_commits_for_the_next_batch(pg_nodes: Backend) -> None:
    location = pg_nodes.new()
    with open_node_db(location) as d:
        d.install()
        with d.transaction() as cur:
            d.capture(cur, "accounts", True)
        t0 = must_tick(d)
        a = psycopg.connect(location)
        b = psycopg.connect(location)
        try:
            a.execute("INSERT INTO accounts VALUES (1, 10, 'A', 0.5)")  # takes the lower id
            b.execute("INSERT INTO accounts VALUES (2, 20, 'B', 0.5)")
            b.commit()
            t1 = must_tick(d)
            assert d.pending() == (0, None)  # A is still open
            a.commit()
            assert d.pending()[0] == 1
            t2 = must_tick(d)
        finally:
            a.close()
            b.close()
        first = list(d.batch_events(t0.tick_id, t1.tick_id))
        second = list(d.batch_events(t1.tick_id, t2.tick_id))
        both = list(d.batch_events(t0.tick_id, t2.tick_id))
        trimmed = 0
        with d.transaction() as cur:
            trimmed = d.trim(cur, t2.tick_id)
        after_trim = list(d.batch_events(t1.tick_id, t2.tick_id))
    assert [json.loads(e.key or "")["id"] for e in first] == [2]
    assert [json.loads(e.key or "")["id"] for e in second] == [1]
    (ev_b,), (ev_a,) = first, second
    assert (ev_a.tick, ev_b.tick) == (t2.tick_id, t1.tick_id)
    # An id range would have failed: A's id is below B's and within T1's high, though A had
    # not committed when T1 was made (and above T2's low it is not).
    assert ev_a.ev_id < ev_b.ev_id <= t1.ev_high
    assert not t1.ev_high < ev_a.ev_id <= t2.ev_high
    # Across both batches: each event once, in id order, each with its own tick.
    assert both == [ev_a, ev_b]
    # Trimming below T2 deletes B's batch and keeps A's, whose id is lower.
    assert trimmed == 1 + 2  # B's event, ticks T0 and T1
    assert after_trim == [ev_a]


def test_make_tick_wants_a_transaction_of_its_own(pg_nodes: Backend) -> None:
    with open_node_db(pg_nodes.new()) as d:
        d.install()
        with pytest.raises(CascadeError, match="transaction of its own"), d.transaction() as cur:
            d.insert_event(cur, "x", None, None, None)
            d.make_tick(cur)
        assert d.last_tick() is None


def test_types_travel_through_events(pg_nodes: Backend) -> None:
    """What capture writes, upsert reads back: timestamps, dates, big integers, doubles,
    numerics, booleans, JSON and bytes."""
    table = (
        "CREATE TABLE kinds (id bigint PRIMARY KEY, ts timestamptz, day date, big bigint, "
        "f float8, n numeric(12, 3), flag boolean, doc jsonb, raw bytea, t text)"
    )
    root, target = pg_nodes.new(), pg_nodes.new()
    pg_nodes.sql(root, table)
    pg_nodes.sql(target, table)
    with open_node_db(root) as d:
        d.install()
        with d.transaction() as cur:
            d.capture(cur, "kinds", True)
        must_tick(d)
        pg_nodes.sql(
            root,
            "SET TIME ZONE 'Asia/Kolkata'",
            "SET extra_float_digits = 0",  # a writer's setting must not cut digits
            "INSERT INTO kinds VALUES (1, '2024-02-29 23:59:59.123456+00', '2024-02-29', "
            "9007199254740993, 1795247700.6466696, 123456789.125, true, "
            """'{"a": [1, 2.5, "x"]}', '\\x00ff', 'línea'), """
            "(2, NULL, NULL, NULL, 'NaN', NULL, false, NULL, NULL, NULL)",
        )
        t = must_tick(d)
        events = list(d.batch_events(t.tick_id - 1, t.tick_id))
        expected = d.read_rows("kinds")
    cols = ["id", "ts", "day", "big", "f", "n", "flag", "doc", "raw", "t"]
    rows = [[json.loads(e.data or "")[c] for c in cols] for e in events]
    with open_node_db(target) as d:
        with d.transaction() as cur:
            d.upsert(cur, "kinds", cols, rows)
        got = d.read_rows("kinds")
    assert got[0] == expected[0]
    assert got[1][4] != got[1][4]  # NaN
    assert got[1][:4] == expected[1][:4]


def test_large_upsert_and_stream(pg_nodes: Backend) -> None:
    location = pg_nodes.new()
    n = 12_000
    with open_node_db(location) as d:
        d.install()
        with d.transaction() as cur:
            d.capture(cur, "accounts", True)
        t0 = must_tick(d)
        rows = [[i, i * 10, f"n{i}", i / 7] for i in range(n)]
        with d.transaction() as cur:
            d.upsert(cur, "accounts", COLS, rows)
        t1 = must_tick(d)
        assert d.read_rows("accounts") == [tuple(r) for r in rows]
        seen = 0
        for e in d.batch_events(t0.tick_id, t1.tick_id):  # more than one fetch
            if seen == 0:
                assert d.get_local("anything") is None  # the node stays usable meanwhile
            assert json.loads(e.data or "")["updated_at"] == rows[seen][3]
            seen += 1
        assert seen == n
        with d.transaction() as cur:
            d.delete_keys(cur, "accounts", ["id"], [[r[0]] for r in rows[::2]])
        assert len(d.read_rows("accounts")) == n // 2


@pytest.mark.parametrize(
    "location",
    [
        "postgresql://u:s3cr3t@127.0.0.1:1/db",  # nobody listening
        "postgresql://u:s3cr3t@127.0.0.1:port/db",
        "postgres://u:s3 cr3t@127.0.0.1/db",  # the driver quotes this one
        "postgresql://u@127.0.0.1:1/db?password=s3cr3t",
    ],
)
def test_bad_location_is_one_line_without_password(location: str) -> None:
    with pytest.raises(CascadeError) as err:
        open_node_db(location)
    msg = str(err.value)
    assert "s3cr3t" not in msg and "s3 cr3t" not in msg
    assert "\n" not in msg
    assert msg.startswith("cannot connect to PostgreSQL node postgres")


def test_both_schemes_open_postgres(pg_nodes: Backend) -> None:
    location = pg_nodes.new()
    for loc in (location, location.replace("postgresql://", "postgres://")):
        with open_node_db(loc) as d:
            assert isinstance(d, PostgresNodeDB)
            assert not d.is_installed()


def test_concurrent_writers_and_tickers_lose_nothing(pg_nodes: Backend) -> None:
    """Writers whose transactions stay open across ticks, and two tickers that each read the
    batch of the tick they made at once (as a subscriber would): every committed event is read
    exactly once, and the tickers never make the same tick."""
    location = pg_nodes.new()
    with open_node_db(location) as d:
        d.install()
        with d.transaction() as cur:
            d.capture(cur, "accounts", True)
        must_tick(d)
    stop = threading.Event()
    errors: list[BaseException] = []
    read: dict[int, list[Event]] = {}

    def writer(w: int) -> None:
        try:
            with psycopg.connect(location) as conn:
                for i in range(40):
                    conn.execute("INSERT INTO accounts VALUES (%s, %s, 'w', 0.5)", (w * 100 + i, i))
                    if i % 3 == 0:
                        time.sleep(0.01)  # open across a few ticks, with ids below theirs
                        conn.execute("UPDATE accounts SET balance = -1 WHERE id = %s", (w * 100,))
                    conn.commit()
        except BaseException as exc:
            errors.append(exc)

    def ticker() -> None:
        try:
            with open_node_db(location) as t:
                while True:
                    done = stop.is_set()  # one more tick after the writers are done
                    made = must_tick(t)
                    read[made.tick_id] = list(t.batch_events(made.tick_id - 1, made.tick_id))
                    if done:
                        return
                    time.sleep(0.002)
        except BaseException as exc:
            errors.append(exc)

    tickers = [threading.Thread(target=ticker) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for th in tickers + writers:
        th.start()
    for th in writers:
        th.join()
    stop.set()
    for th in tickers:
        th.join()
    assert errors == []
    with open_node_db(location) as d:
        last = d.last_tick()
        assert last is not None
        assert d.pending() == (0, None)
        everything = list(d.events_after(0))
    assert sorted(read) == list(range(2, last.tick_id + 1))  # each tick made once
    assert all(e.tick == t for t, batch in read.items() for e in batch)
    got = sorted(e.ev_id for batch in read.values() for e in batch)
    assert got == [e.ev_id for e in everything]
    assert len(got) == 4 * 40 + 4 * 14  # the inserts, and the updates of each writer's row


# -- the ticker on a node demoted meanwhile ----------------------------------------------------


class _DemotedWhileLooking:
    """Wraps a node database so that the node is demoted (by another connection, as a
    switchover does) right after the ticker read its pending events: the ticker's first look
    saw a root, its write finds a branch."""

    def __init__(self, db: NodeDB) -> None:
        self.db = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def pending(self) -> tuple[int, float | None]:
        out = self.db.pending()
        with open_node_db(self.db.location) as other, other.transaction() as cur:
            other.set_local(cur, "role", "branch")
        return out


def test_a_demoted_root_neither_ticks_nor_emits(db: NodeDB) -> None:
    from baton.cascade.ticker import TickerConfig, publish_watermark, tick_once

    with db.transaction() as cur:
        db.set_local(cur, "node_name", "r")
        db.set_local(cur, "role", "root")
    must_tick(db)
    emit(db, 3)
    cfg = TickerConfig(max_count=1)
    # A tick is due (3 events >= max_count), but the node is demoted before the ticker writes.
    assert tick_once(_DemotedWhileLooking(db), cfg, time.time()) is None  # type: ignore[arg-type]
    assert db.last_tick() is not None and db.last_tick().tick_id == 1  # type: ignore[union-attr]
    # A demoted node writes no watermark event of its own: its ids would collide with the new
    # root's events when it follows it.
    with db.transaction() as cur:
        db.set_watermark(cur, "sub", 1)
    before = db.pending()[0]
    assert publish_watermark(db) is None
    assert db.pending()[0] == before


def test_a_task_never_makes_a_missing_sqlite_node(tmp_path: Path) -> None:
    """Spark's tasks open nodes with ``existing=True``: on a host that does not see the file,
    one clear error, and no new empty database where the node is not."""
    from baton.errors import NodeUnreachable

    missing = tmp_path / "elsewhere.db"
    with pytest.raises(NodeUnreachable, match="reachable at the same path wherever Spark runs"):
        open_node_db(f"sqlite:///{missing}", existing=True)
    assert not missing.exists()
    with open_node_db(f"sqlite:///{missing}") as db:  # where the node is made: made
        db.install()
    with open_node_db(f"sqlite:///{missing}", existing=True) as db:
        assert db.is_installed() is False  # opened, not refused
