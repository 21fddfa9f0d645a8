"""A table's initial copy applies every row change exactly once (invariant 3), even while the
root is written during the copy (the fault campaign, issue 12).

The copy reads the provider's rows at its tick T or later, so they may already show events
after T. Those were applied a second time by the copy's catch-up and by the next batches; a
trigger on the subscriber's table (here an audit table with one row per row version) saw the
same version twice. The copy now names the events its rows show, in the rows' own snapshot
(per key range with Spark), and they are skipped.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from baton.cascade import node_ops
from baton.cascade.apply import apply_batch, claim_epoch
from baton.cascade.batches import reduce_events
from baton.cascade.db import open_node_db
from baton.cascade.model import Role, TableCopy
from baton.errors import FencedOut
from baton.spark.copy import RowRange, TableReader, table_copy

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from baton.testing.servers import PostgresServer

SQLITE_AUDIT = """
CREATE TABLE t_applied (seq INTEGER PRIMARY KEY AUTOINCREMENT, id INTEGER, n INTEGER, op TEXT);
CREATE TRIGGER t_ins AFTER INSERT ON t BEGIN
    INSERT INTO t_applied (id, n, op) VALUES (NEW.id, NEW.n, 'I'); END;
CREATE TRIGGER t_upd AFTER UPDATE ON t BEGIN
    INSERT INTO t_applied (id, n, op) VALUES (NEW.id, NEW.n, 'U'); END;
CREATE TRIGGER t_del AFTER DELETE ON t BEGIN
    INSERT INTO t_applied (id, n, op) VALUES (OLD.id, OLD.n, 'D'); END;
"""

PG_AUDIT = """
CREATE TABLE t_applied (seq bigserial PRIMARY KEY, id bigint, n bigint, op text);
CREATE FUNCTION t_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO t_applied (id, n, op) VALUES (OLD.id, OLD.n, 'D');
    ELSE
        INSERT INTO t_applied (id, n, op) VALUES (NEW.id, NEW.n, left(TG_OP, 1));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER t_audit AFTER INSERT OR UPDATE OR DELETE ON t
    FOR EACH ROW EXECUTE FUNCTION t_audit();
"""


class Node:
    """A node database at ``location`` written and read with plain SQL (``?`` marks)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.pg = location.startswith("postgresql:")

    def _connect(self) -> Any:
        if self.pg:
            return psycopg.connect(self.location, autocommit=True)
        return sqlite3.connect(self.location.removeprefix("sqlite://"), isolation_level=None)

    def script(self, text: str) -> None:
        conn = self._connect()
        try:
            if self.pg:
                conn.execute(text)
            else:
                conn.executescript(text)
        finally:
            conn.close()

    def write(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        """One transaction per statement, as separate writers would."""
        conn = self._connect()
        try:
            for query, args in statements:
                conn.execute(query.replace("?", "%s") if self.pg else query, args)
        finally:
            conn.close()

    def create_table(self, audit: bool) -> None:
        kind = "bigint" if self.pg else "INTEGER"  # SQLite: the rowid is the key
        self.script(f"CREATE TABLE t (id {kind} PRIMARY KEY, n {kind} NOT NULL)")
        if audit:
            self.script(PG_AUDIT if self.pg else SQLITE_AUDIT)

    def audit(self) -> list[tuple[int, int, str]]:
        conn = self._connect()
        try:
            rows = conn.execute("SELECT id, n, op FROM t_applied ORDER BY seq").fetchall()
            return [(int(i), int(n), str(op)) for i, n, op in rows]
        finally:
            conn.close()

    def rows(self) -> list[tuple[Any, ...]]:
        with open_node_db(self.location) as db:
            return db.read_rows("t")

    def tick(self) -> int:
        with open_node_db(self.location) as db, db.transaction() as cur:
            tick = db.make_tick(cur)
        assert tick is not None
        return tick.tick_id


def set_n(*pairs: tuple[int, int]) -> list[tuple[str, tuple[Any, ...]]]:
    return [("UPDATE t SET n = ? WHERE id = ?", (n, i)) for i, n in pairs]


def insert(*ids: int) -> list[tuple[str, tuple[Any, ...]]]:
    return [("INSERT INTO t (id, n) VALUES (?, 0)", (i,)) for i in ids]


def delete(*ids: int) -> list[tuple[str, tuple[Any, ...]]]:
    return [("DELETE FROM t WHERE id = ?", (i,)) for i in ids]


def catch_up(sub: Node, root: Node) -> None:
    """What the subscriber's worker does: apply the root's batches, one micro-batch per tick."""
    with open_node_db(root.location) as r, open_node_db(sub.location) as s:
        last = r.last_tick()
        assert last is not None
        while (position := s.state().position) < last.tick_id:
            ticks = r.ticks(position, position + 1)
            events = list(r.batch_events(position, position + 1))
            result = apply_batch(s, ticks, reduce_events(events), events, 1, provider="r")
            assert result.applied, result


def assert_once_and_equal(sub: Node, root: Node) -> None:
    audit = sub.audit()
    versions = Counter((i, n) for i, n, op in audit if op != "D")
    assert [v for v, k in versions.items() if k > 1] == [], audit
    deletes = Counter(i for i, _, op in audit if op == "D")
    assert [i for i, k in deletes.items() if k > 1] == [], audit
    assert sub.rows() == root.rows()
    with open_node_db(sub.location) as db:
        assert db.tables() == {"t": "ok"}
        assert db.reflected() == {}  # dropped once the position passed its events


def make_set(root: Node, sub: Node) -> None:
    """Root ``r`` capturing ``t`` (ids 1..10 ticked), branch ``b`` starting at that tick with
    ``t`` to copy."""
    root.create_table(audit=False)
    sub.create_table(audit=True)
    node_ops.create_root("r", root.location, "S")
    node_ops.add_table(root.location, "t")
    root.write(*insert(*range(1, 11)))
    root.tick()
    node_ops.create_subscriber(Role.BRANCH, "b", sub.location, "r", root.location)
    assert node_ops.add_table(sub.location, "t") == "copying"


def copy_during_writes(root: Node, sub: Node) -> None:
    """The copy of ``t`` while the root is written: before the read (shown by the copy, some
    ticked and applied by the subscriber meanwhile, some not even ticked), after it (not
    shown), and after the copy."""

    def read(*args: Any) -> TableCopy:
        root.write(*set_n((1, 1)), *insert(11), *delete(3))
        root.tick()
        catch_up(sub, root)  # the subscriber moves past T: the copy's own catch-up replays this
        root.write(*set_n((2, 1), (1, 2)), *insert(12))
        root.tick()
        root.write(*set_n((5, 1)))  # captured, not ticked when the rows are read
        copy: TableCopy = node_ops.direct_rows(*args)
        root.write(*set_n((1, 3), (7, 1)), *delete(11), *insert(14))
        root.tick()
        return copy

    assert node_ops.copy_table(sub.location, "t", read) == "catching-up"
    root.write(*set_n((2, 2), (12, 1)), *insert(15), *delete(6))
    root.tick()
    catch_up(sub, root)


def test_sqlite_copy_during_writes_applies_each_version_once(tmp_path: Path) -> None:
    root, sub = Node(f"sqlite://{tmp_path}/r.db"), Node(f"sqlite://{tmp_path}/b.db")
    make_set(root, sub)
    copy_during_writes(root, sub)
    assert_once_and_equal(sub, root)


def test_a_copy_overtaken_by_another_copier_writes_nothing(tmp_path: Path) -> None:
    """Fault campaign, 2026-11-28: a worker fenced out by a newer one (membership flapping)
    finished the copy it had started, after the new worker had copied the table and applied
    batches: its older rows and their replay applied 6 row versions twice. A copy now writes
    only while the table is still ``copying`` (and a stale worker's epoch refuses it)."""
    root, sub = Node(f"sqlite://{tmp_path}/r.db"), Node(f"sqlite://{tmp_path}/b.db")
    make_set(root, sub)

    def overtaken(*args: Any) -> TableCopy:
        copy: TableCopy = node_ops.direct_rows(*args)
        # Meanwhile the newer worker copies the table and applies the root's next batches.
        assert node_ops.copy_table(sub.location, "t") == "ok"
        root.write(*set_n((1, 1), (2, 1)), *insert(11), *delete(3))
        root.tick()
        catch_up(sub, root)
        return copy

    assert node_ops.copy_table(sub.location, "t", overtaken) == "ok"
    root.write(*set_n((1, 2)))
    root.tick()
    catch_up(sub, root)
    assert_once_and_equal(sub, root)


def test_a_stale_workers_copy_is_fenced(tmp_path: Path) -> None:
    root, sub = Node(f"sqlite://{tmp_path}/r.db"), Node(f"sqlite://{tmp_path}/b.db")
    make_set(root, sub)
    with open_node_db(sub.location) as db:
        claim_epoch(db, 7)  # a newer worker claimed the node
    with pytest.raises(FencedOut, match="epoch 6 is stale"):
        node_ops.copy_table(sub.location, "t", epoch=6)
    with open_node_db(sub.location) as db:
        assert db.tables() == {"t": "copying"} and db.read_rows("t") == []
    assert node_ops.copy_table(sub.location, "t", epoch=7) == "ok"
    assert_once_and_equal(sub, root)


@pytest.fixture
def pg_pair(postgres_server: PostgresServer) -> Iterator[tuple[Node, Node]]:
    with postgres_server.databases("x1", "x2") as (a, b):
        yield Node(a), Node(b)


def test_postgres_copy_during_writes_applies_each_version_once(
    pg_pair: tuple[Node, Node],
) -> None:
    root, sub = pg_pair
    make_set(root, sub)
    copy_during_writes(root, sub)
    assert_once_and_equal(sub, root)


def events_after(root: Node, tick: int) -> dict[tuple[int, int | None], int]:
    """(id, n) of each row event after ``tick`` (n None for a delete) -> its event id."""
    with open_node_db(root.location) as db:
        out = {}
        for e in db.events_after(tick):
            key = json.loads(e.key or "{}")["id"]
            out[(key, json.loads(e.data)["n"] if e.data else None)] = e.ev_id
        return out


def test_spark_partitions_each_name_the_events_of_their_snapshot(tmp_path: Path) -> None:
    """The Spark source's partitions, read at different moments (driven here without a JVM,
    as Spark would call them): each names the events its own snapshot shows for its own keys,
    and the copy they make together applies every version once."""
    root, sub = Node(f"sqlite://{tmp_path}/r.db"), Node(f"sqlite://{tmp_path}/b.db")
    make_set(root, sub)
    seen: dict[str, Any] = {}

    def read(location: str, table: str, tick: int) -> TableCopy:
        options = {"location": location, "table": table, "afterTick": str(tick)}
        reader = TableReader({**options, "rowsPerPartition": "5"})
        parts = reader.partitions()
        assert [(p.low, p.high) for p in parts if isinstance(p, RowRange)] == [(1, 5), (6, 10)]
        root.write(*set_n((1, 1), (6, 1)))
        root.tick()
        first = [r for (r,) in reader.read(parts[0])]
        root.write(*set_n((1, 2), (6, 2), (2, 1)), *insert(11))
        root.tick()
        second = [r for (r,) in reader.read(parts[1])]
        seen.update(tick=tick, first=json.loads(first[-1]), second=json.loads(second[-1]))
        return table_copy(["id", "n"], first + second)

    assert node_ops.copy_table(sub.location, "t", read) == "catching-up"
    ids = events_after(root, seen["tick"])
    # Each partition names only its own keys' events, those its snapshot showed.
    assert seen["first"]["reflected"] == [ids[(1, 1)]]
    assert seen["second"]["reflected"] == sorted([ids[(6, 1)], ids[(6, 2)]])
    # Key 11 was in no range when the source was cut: no partition read it, none names it.
    assert sub.rows() == [(i, {1: 1, 6: 2}.get(i, 0)) for i in range(1, 11)]
    root.tick()
    root.tick()
    catch_up(sub, root)
    assert_once_and_equal(sub, root)


def test_tables_whose_rowid_is_not_the_key_are_read_whole(tmp_path: Path) -> None:
    location = f"sqlite://{tmp_path}/n.db"
    with open_node_db(location) as db:
        db.install()
    conn = sqlite3.connect(tmp_path / "n.db")
    for ddl in (
        "CREATE TABLE a (id INT PRIMARY KEY, n INT)",  # INT is not INTEGER: a separate key
        "CREATE TABLE b (id INTEGER PRIMARY KEY, n INT) WITHOUT ROWID",
        "CREATE TABLE c (x INTEGER, y INTEGER, PRIMARY KEY (x, y))",
        "CREATE TABLE d (id INTEGER PRIMARY KEY, n INT)",
    ):
        conn.execute(ddl)
        table = ddl.split()[2]
        conn.executemany(f"INSERT INTO {table} VALUES (?, ?)", [(i, i) for i in range(1, 10)])
    conn.commit()
    conn.close()

    def ranges(table: str) -> list[tuple[int | None, int | None]]:
        reader = TableReader({"location": location, "table": table, "rowsPerPartition": "3"})
        return [(p.low, p.high) for p in reader.partitions() if isinstance(p, RowRange)]

    for table in "abc":
        assert ranges(table) == [(None, None)], table
    assert ranges("d") == [(1, 3), (4, 6), (7, 9)]


def test_spark_copy_names_the_events_its_rows_show(tmp_path: Path, spark: SparkSession) -> None:
    from baton.spark.copy import spark_rows

    root, sub = Node(f"sqlite://{tmp_path}/r.db"), Node(f"sqlite://{tmp_path}/b.db")
    make_set(root, sub)
    with open_node_db(root.location) as db:
        last = db.last_tick()
    assert last is not None
    root.write(*set_n((2, 5), (9, 5)), *delete(4))
    root.tick()
    root.write(*insert(12))  # not ticked
    read: Callable[[str, str, int], TableCopy] = spark_rows(spark, rows_per_partition=3)
    copy = read(root.location, "t", last.tick_id)
    assert sorted(tuple(r) for r in copy.rows) == sorted(root.rows())
    # Every write came before the read: each partition's snapshot shows its keys' events.
    ids = events_after(root, last.tick_id)
    assert copy.reflected == set(ids.values()) and len(ids) == 4
    assert copy.upto == last.tick_id + 1 + 2
    # It took several partitions (10 rows, 3 a partition), each ending with its own marker.
    df = (
        spark.read.format("batontable")
        .option("location", root.location)
        .option("table", "t")
        .option("afterTick", str(last.tick_id))
        .option("rowsPerPartition", "3")
        .load()
    )
    assert df.rdd.getNumPartitions() == 4
    markers = [json.loads(r.row) for r in df.collect() if r.row.startswith("{")]
    assert sorted(len(m["reflected"]) for m in markers) == [0, 1, 1, 2]
