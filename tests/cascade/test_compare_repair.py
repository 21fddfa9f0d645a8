"""``compare`` and ``repair`` (issue 31): a branch's table against its root's, row by row on
Spark (local), at the branch's tick while writes go on at the root, on SQLite and PostgreSQL
node databases; differences of each kind planted at the branch are found exactly, keys the
root changed after that tick are left to the queue, and repair changes exactly the planted
rows. The value rules are held to capture's by a property test; bad input through the CLI."""

from __future__ import annotations

import json
import math
import random
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baton.cascade import commands, node_ops, observe, set_ops, table_diff, verb_shown
from baton.cascade.codec import encode_row
from baton.cascade.copy_progress import CopyProgress
from baton.cascade.db import open_node_db
from baton.cascade.db.base import bucket_range
from baton.cascade.model import Role, TableCopy
from baton.cascade.set_ops import CascadeSet
from baton.cascade.table_diff import Candidate, Kind, decide, same_value
from baton.errors import NotFinished, Refused
from baton.local.waiting import wait_for
from baton.testing.servers import PostgresServer
from tests.cascade.test_root_writer import catch_up, tick
from tests.test_cli import BATON

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SQLITE_ITEMS = "CREATE TABLE items (id INTEGER PRIMARY KEY, n INTEGER, x REAL, t TEXT, b BLOB)"
PG_ITEMS = (
    "CREATE TABLE items (id bigint PRIMARY KEY, n numeric, x double precision, t text, b bytea)"
)


def build(loc: dict[str, str], create: str, write: Any) -> None:
    for location in loc.values():
        write(location, create)
    commands.create_root("s1", loc["s1"], "S")
    commands.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    commands.add_table(loc["s1"], "items", None, True)
    node_ops.copy_table(loc["s2"], "items")


def sqlite_write(location: str, sql: str, args: tuple[Any, ...] = ()) -> None:
    conn = sqlite3.connect(location.removeprefix("sqlite://"))
    with conn:
        conn.execute(sql, args)
    conn.close()


def pg_write(location: str, sql: str, args: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(location) as conn:
        conn.execute(sql.replace("?", "%s"), args)


def at_branch(location: str, sql: str, args: tuple[Any, ...] = ()) -> None:
    """A write at the branch through the apply path (its guard lets it through): how a bug or
    a person's mistake would make the branch differ."""
    with open_node_db(location) as db, db.transaction() as cur:
        cur.execute(sql if location.startswith("sqlite") else sql.replace("?", "%s"), args)


@pytest.fixture
def lite(tmp_path: Path) -> dict[str, str]:
    loc = {n: f"sqlite://{tmp_path / n}.db" for n in ("s1", "s2")}
    build(loc, SQLITE_ITEMS, sqlite_write)
    return loc


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[dict[str, str]]:
    names = ["c" + uuid.uuid4().hex[:12] for _ in range(2)]
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    port = postgres_server.port
    loc = {
        n: f"postgresql://postgres@127.0.0.1:{port}/{d}"
        for n, d in zip(("s1", "s2"), names, strict=True)
    }
    build(loc, PG_ITEMS, pg_write)
    yield loc
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def filled(root: str, branch: str, write: Any, count: int) -> None:
    """Rows 1..``count`` at the root (``n`` = the id), ticked and applied at the branch."""
    for i in range(1, count + 1):
        write(root, "INSERT INTO items VALUES (?, ?, 0.5, 'a', NULL)", (i, i))
    tick(root)
    catch_up(branch)


def rows(location: str) -> list[tuple[Any, ...]]:
    with open_node_db(location, readonly=True) as db:
        return [tuple(r) for r in db.read_rows("items")]


def plant_and_check(
    loc: dict[str, str], spark: SparkSession, write: Any, *, on_spark: bool = True
) -> None:
    from baton.spark.diff import spark_differ

    s1, s2 = loc["s1"], loc["s2"]
    for i in range(1, 41):
        write(s1, "INSERT INTO items VALUES (?, ?, ?, ?, ?)",
              (i, 10**15 + i, i / 3, f"t{i}", bytes([i, 0, 255])))  # fmt: skip
    tick(s1)
    catch_up(s2)
    assert rows(s1) == rows(s2)
    # Planted at the branch: 2 missing, 1 extra, 3 different (a double's last bit, text, a
    # NULL for a blob).
    at_branch(s2, "DELETE FROM items WHERE id IN (3, 4)")
    at_branch(s2, "INSERT INTO items VALUES (99, 1, 0.5, 'x', NULL)")
    at_branch(s2, "UPDATE items SET x = ? WHERE id = 5", (math.nextafter(5 / 3, 9),))
    at_branch(s2, "UPDATE items SET t = 'T6' WHERE id = 6")
    at_branch(s2, "UPDATE items SET b = NULL WHERE id = 7")
    # Writes go on at the root after the branch's tick: keys 4 and 8 (one of them planted
    # missing) are in flight, left to the queue; key 50 is new there, in flight too.
    write(s1, "UPDATE items SET n = 0 WHERE id IN (4, 8)")
    write(s1, "INSERT INTO items VALUES (50, 5, 5.5, 'new', NULL)")
    tick(s1)
    c = CascadeSet(s2)
    differ = spark_differ(spark, rows_per_partition=7)  # read in several key ranges
    reports: list[tuple[str, str, str, int, int]] = []
    table_diff.use_progress(lambda *r: reports.append(r))
    try:
        found = table_diff.compare(c, "s2", [], differ)
    finally:
        table_diff.use_progress(None)
    if on_spark:
        # Spark's tasks were reported as they went (a progress bar on a terminal), ending done.
        assert reports and reports[-1][:3] == ("s2", "compare", "items")
        assert reports[-1][3] == reports[-1][4] > 0
    else:
        assert not reports  # the first pass and a direct read of the suspect buckets
    t = found.tables["items"]
    keys = {k: sorted(d.key[0] for d in t.of(k)) for k in Kind}
    assert keys == {Kind.MISSING: [3], Kind.EXTRA: [99], Kind.DIFFERENT: [5, 6, 7]}
    assert t.in_flight == 3 and not found.equal
    assert t.as_dict(1)["different_keys"] == [{"id": 5}]
    # compare paused s2 and resumed it; it changed nothing.
    assert not c.state("s2").paused
    assert rows(s2)[0] == rows(s1)[0]
    # repair: exactly the planted rows; then the queue brings the keys in flight.
    fixed = table_diff.repair(c, "s2", "items", differ)
    assert (fixed.written, fixed.deleted, fixed.equal_after) == (4, 1, True)
    catch_up(s2)
    assert rows(s2) == rows(s1)
    assert table_diff.compare(c, "s2", ["items"], differ).equal


def test_sqlite_finds_exactly_what_was_planted_and_repairs_it(
    lite: dict[str, str], spark: SparkSession
) -> None:
    plant_and_check(lite, spark, sqlite_write)


@pytest.mark.parametrize("on_spark", [False, True], ids=["direct", "spark"])
def test_postgres_finds_exactly_what_was_planted_and_repairs_it(
    pg: dict[str, str], spark: SparkSession, on_spark: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first pass finds the suspect buckets; their rows are read directly (a few) or by
    Spark in key-range partitions (many: forced here)."""
    if on_spark:
        monkeypatch.setattr(table_diff, "DIRECT_KEYS", 0)
    plant_and_check(pg, spark, pg_write, on_spark=on_spark)


#: A repair's process that pauses its node and is then killed (SIGKILL) before it resumes.
KILLED_IN_A_REPAIR = """
import sys, time
from baton.cascade import table_diff
from baton.cascade.set_ops import CascadeSet
with table_diff.paused(CascadeSet(sys.argv[1]), "s2", "repair"):
    print("paused", flush=True)
    time.sleep(600)
"""


def test_an_interrupted_repair_run_again_ends_equal(
    lite: dict[str, str], spark: SparkSession
) -> None:
    """A repair that fails resumes its node; one whose process is killed after it paused the
    branch leaves it paused and marked, and running it again continues. An operator's resume
    takes the node over: a pause of theirs afterwards is theirs, not the dead repair's."""
    from baton.spark.diff import spark_differ

    s1, s2 = lite["s1"], lite["s2"]
    sqlite_write(s1, "INSERT INTO items VALUES (1, 1, 1.0, 'a', NULL)")
    tick(s1)
    catch_up(s2)
    at_branch(s2, "UPDATE items SET n = 2 WHERE id = 1")
    c = CascadeSet(s2)
    with pytest.raises(RuntimeError), table_diff.paused(c, "s2", "repair"):
        raise RuntimeError("an error in the run")
    assert not c.state("s2").paused and observe.members(c)[1].paused_by is None

    def killed() -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_IN_A_REPAIR, s2], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline() == "paused\n"
        proc.kill()
        proc.wait()

    killed()
    assert c.state("s2").paused
    # status says whose pause it is, and how far it got
    assert {m.name: m.paused_by for m in observe.members(c)} == {"s1": None, "s2": "repair"}
    table_diff.MarkProgress(c, "s2", "repair", "items")(3, 8)
    assert observe.members(c)[1].paused_by == "repair: items, 3/8 tasks"
    fixed = table_diff.repair(c, "s2", "items", spark_differ(spark))
    assert fixed.written == 1 and fixed.equal_after and not c.state("s2").paused
    assert rows(s2) == rows(s1)

    killed()
    set_ops.set_paused(c, "s2", False)  # the operator resumes the dead repair's node ...
    set_ops.set_paused(c, "s2", True)  # ... and later pauses it for work of their own
    with pytest.raises(Refused, match="paused by someone else"):
        table_diff.repair(c, "s2", "items", spark_differ(spark))
    assert c.state("s2").paused


def test_someone_elses_pause_and_a_resume_meanwhile_are_refused(lite: dict[str, str]) -> None:
    s2 = lite["s2"]
    c = CascadeSet(s2)
    set_ops.set_paused(c, "s2", True)

    def never(*_: Any, **__: Any) -> list[Candidate]:
        raise AssertionError("nothing is read")

    with pytest.raises(Refused, match="paused by someone else"):
        table_diff.compare(c, "s2", [], never)
    set_ops.set_paused(c, "s2", False)

    def resumed(*_: Any, **__: Any) -> list[Candidate]:
        set_ops.set_paused(c, "s2", False)  # an operator's resume during the compare
        with open_node_db(s2) as db, db.transaction() as cur:
            db.set_local(cur, "position", str(db.state().position + 1))
        return []

    with pytest.raises(Refused, match="resumed while it was compared"):
        table_diff.compare(c, "s2", [], resumed)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BATON, "cascade", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_bad_input_is_one_line_and_changes_nothing(lite: dict[str, str]) -> None:
    s1, s2 = lite["s1"], lite["s2"]
    cases = [
        (["compare", "s1", "--via", s2], "is the root of set S"),
        (["compare", "s2", "nosuch", "--via", s2], "does not replicate table 'nosuch'"),
        (["repair", "s2", "nosuch", "--via", s2], "does not replicate table 'nosuch'"),
        (["compare", "s9", "--via", s2], "unknown node 's9'"),
    ]
    for args, said in cases:
        res = cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    set_ops.set_paused(CascadeSet(s2), "s2", True)
    res = cli("repair", "s2", "items", "--via", s1)
    assert res.returncode == 2 and "paused by someone else" in res.stderr
    with open_node_db(s2, readonly=True) as db:
        assert db.get_local(table_diff.MARK) is None and db.state().paused


# -- the value rules, against capture's encoding -----------------------------------------------

values = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=8),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(values, values), min_size=1, max_size=12))
def test_decide_finds_exactly_the_rows_whose_values_differ(pairs: list[tuple[Any, Any]]) -> None:
    """Rows (key, value) on both sides, encoded as the copy encodes them; every pair is a
    candidate (as when Spark's encodings differ): decide keeps exactly those whose values are
    not the same bit for bit."""
    cands = [Candidate(encode_row([k, a]), encode_row([k, b])) for k, (a, b) in enumerate(pairs)]
    found = decide(cands, [0], set())
    want = [k for k, (a, b) in enumerate(pairs) if not same_value(a, b)]
    assert [d.key[0] for d in found] == want
    assert all(d.kind is Kind.DIFFERENT for d in found)
    for a, b in pairs:
        if isinstance(a, float) and isinstance(b, float) and not (math.isnan(a) or math.isnan(b)):
            # Bit for bit: minus zero is not zero, and the next double is another value.
            assert same_value(a, b) == (json.dumps(a) == json.dumps(b))


def test_one_value_read_by_two_backends_is_the_same() -> None:
    assert same_value(1, 1.0) and same_value(True, 1) and same_value(2**70, 2**70)
    assert not same_value(0.0, -0.0) and same_value(math.nan, -math.nan)
    assert not same_value(None, 0) and not same_value("1", 1) and same_value(b"a", b"a")


def test_through_the_command_line(lite: dict[str, str], spark: SparkSession) -> None:
    """``baton cascade repair`` in a process of its own (its own Spark, local[1]), killed
    (SIGKILL) at a random point once it has paused the branch, then run again: it ends equal,
    the branch resumed, and ``compare`` here is clean."""
    import os
    import random
    import signal
    import time

    from baton.spark.diff import spark_differ

    s1, s2 = lite["s1"], lite["s2"]
    filled(s1, s2, sqlite_write, 30)
    at_branch(s2, "DELETE FROM items WHERE id <= 10")
    at_branch(s2, "UPDATE items SET n = -1 WHERE id > 25")
    argv = [BATON, "cascade", "repair", "s2", "items", "--via", s1, "--json"]
    env = {**os.environ, "BATON_SPARK_MASTER": "local[1]"}
    c = CascadeSet(s2)
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        wait_for(lambda: c.state("s2").paused or first.poll() is not None, timeout=120)
        delay = random.uniform(0, 1.5)
        time.sleep(delay)  # a random point of the repair (not a wait for a result)
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.communicate()
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert res.returncode == 0, (delay, res.stderr)
    out = json.loads(res.stdout)
    assert out["equal_after"] and out["written"] + out["deleted"] <= 15, (delay, out)
    assert "Traceback" not in res.stderr and rows(s2) == rows(s1)
    assert not c.state("s2").paused and observe.members(c)[1].paused_by is None
    assert table_diff.compare(c, "s2", [], spark_differ(spark)).equal


def test_resync_copies_again_and_a_copy_killed_midway_is_copied_again(
    lite: dict[str, str], spark: SparkSession
) -> None:
    """resync makes the table copying; the worker's copy (here by hand, as the worker runs it,
    with Spark) replaces the rows in one transaction: one killed midway changed nothing, and
    the next one ends equal."""
    from baton.spark.copy import spark_rows

    s1, s2 = lite["s1"], lite["s2"]
    for i in range(1, 6):
        sqlite_write(s1, "INSERT INTO items VALUES (?, ?, 0.5, 'a', NULL)", (i, i))
    tick(s1)
    catch_up(s2)
    at_branch(s2, "DELETE FROM items WHERE id = 2")
    at_branch(s2, "INSERT INTO items VALUES (77, 0, 0.0, 'stray', NULL)")
    before = rows(s2)
    c = CascadeSet(s2)
    done = table_diff.resync(c, "s2", "items", timeout=0)
    assert (done.state, done.already) == ("copying", False)
    assert table_diff.resync(c, "s2", "items", timeout=0).already  # run again: the same copy
    with pytest.raises(NotFinished, match=r"is copying after 0\.2 s"):
        table_diff.resync(c, "s2", "items", timeout=0.2)  # no worker runs here

    progress = CopyProgress(s2, "items", epoch=1)

    def killed(location: str, table: str, tick_id: int) -> TableCopy:
        copy = spark_rows(spark, rows_per_partition=2, progress=progress)(location, table, tick_id)
        raise RuntimeError(f"killed after reading {len(copy.rows)} rows")

    with pytest.raises(RuntimeError, match="killed after reading 5 rows"):
        node_ops.copy_table(s2, "items", killed)
    assert rows(s2) == before and c.state("s2").position > 0
    # The copy's progress (its Spark tasks) is in s2's database: status shows it beside the
    # table, and resync draws it while it waits.
    (tasks_done, total) = observe.members(c)[1].copies["items"]
    assert tasks_done == total > 1
    shown = verb_shown.members_grid(observe.members(c), "s").rows[1][-1]
    assert shown == f"items (copying {total}/{total} tasks)", shown
    reports: list[tuple[str, str, str, int, int]] = []
    table_diff.use_progress(lambda *r: reports.append(r))
    try:
        with pytest.raises(NotFinished):
            table_diff.resync(c, "s2", "items", timeout=0.2)
    finally:
        table_diff.use_progress(None)
    assert reports and reports[-1] == ("s2", "copy", "items", total, total)
    # A stale worker's progress is fenced like its copy: a newer epoch applied here, and the
    # old worker's clearing leaves the mark alone.
    with open_node_db(s2) as db, db.transaction() as cur:
        db.set_local(cur, "epoch", "7")
    progress.clear()
    assert observe.members(c)[1].copies == {"items": (total, total)}
    CopyProgress(s2, "items", epoch=7).clear()  # as the worker does when its copy ends
    assert observe.members(c)[1].copies == {}
    assert node_ops.copy_table(s2, "items", spark_rows(spark)) == "ok"
    assert rows(s2) == rows(s1)
    res = cli("resync", "s1", "items", "--via", s1)
    assert res.returncode == 2 and "is the root of set S" in res.stderr


def test_the_first_pass_sums_buckets_or_steps_aside(pg: dict[str, str]) -> None:
    """PostgreSQL sums each bucket's rows in the database, whatever the columns' types (json
    by its text); a key that is not one integer column turns the pass off (every row is
    read)."""
    s1 = pg["s1"]
    pg_write(s1, "INSERT INTO items VALUES (1, 1, 0.5, 'a', NULL), (250, 2, 0.5, 'b', NULL), "
             "(-150, 3, 0.5, 'c', NULL)")  # fmt: skip
    pg_write(s1, "CREATE TABLE j (id bigint PRIMARY KEY, doc json)")
    pg_write(s1, "INSERT INTO j VALUES (1, '{}')")
    pg_write(s1, "CREATE TABLE t (id text PRIMARY KEY)")
    with open_node_db(s1, readonly=True) as db:
        sums = db.bucket_sums("items", 100)
        assert sums is not None and sorted(sums) == [-1, 0, 2] and sums[0][0] == 1
        doc = db.bucket_sums("j", 100)
        assert doc is not None and list(doc) == [0] and doc[0][0] == 1
        assert db.bucket_sums("t", 100) is None


#: One table's rows in two databases, alike but for one change each (the first pass must
#: see it), or alike but for what capture's rules call the same (it may not see it).
FINGERPRINTED = (
    "CREATE TABLE f (id int PRIMARY KEY, a bigint, x float8, t text, j jsonb, "
    "ts timestamptz, n numeric)"
)
F_ROWS = (
    "INSERT INTO f VALUES (1, 5, 0.0, 'a', '{\"k\": [1.5]}', '2026-01-01 10:00+00', 1.5), "
    "(2, 6, 2.5, NULL, NULL, NULL, NULL)"
)


@pytest.mark.parametrize(
    ("change", "seen"),
    [
        ("UPDATE f SET x = '-0' WHERE id = 1", True),  # minus zero is not zero
        ("UPDATE f SET a = 11 - a", True),  # the two rows' values swapped
        ("UPDATE f SET t = 'A' WHERE id = 1", True),
        ("UPDATE f SET t = '' WHERE id = 2", True),  # NULL is not empty
        ("UPDATE f SET j = '{\"k\": [1.25]}' WHERE id = 1", True),
        ("UPDATE f SET ts = ts + interval '1 microsecond' WHERE id = 1", True),
        ("UPDATE f SET n = 1.50 WHERE id = 1", False),  # the same number
        ("SET TimeZone = 'Asia/Tokyo'", False),  # a session's settings change nothing
    ],
)
def test_the_first_pass_sees_any_changed_value(
    postgres_server: PostgresServer, change: str, seen: bool
) -> None:
    """The bucket fingerprint is built from each column's hash: a change to any value by
    capture's rules changes it (minus zero, values swapped between rows, NULL against empty),
    and it does not depend on the session's time zone."""
    sums: list[dict[int, tuple[int, int]] | None] = []
    for _ in range(2):
        name = "f" + uuid.uuid4().hex[:12]
        with psycopg.connect(postgres_server.url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        location = postgres_server.url.rsplit("/", 1)[0] + f"/{name}"
        pg_write(location, FINGERPRINTED)
        pg_write(location, F_ROWS)
        if sums:
            pg_write(location, change)
        commands.create_root("f" + str(len(sums)), location, "F")
        with open_node_db(location, readonly=True) as db:
            if change.startswith("SET"):
                db.conn.execute(change)  # type: ignore[attr-defined]
            sums.append(db.bucket_sums("f", 100))
    assert sums[0] is not None and sums[1] is not None
    assert (sums[0] != sums[1]) is seen


def test_repair_checks_again_only_the_ranges_it_found_suspect(
    pg: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its transaction, repair compares again only the key ranges the first pass found
    suspect (the node stays paused at one position, and the repair writes only there): one
    first pass in all, and no Spark for a few rows."""
    s1, s2 = pg["s1"], pg["s2"]
    filled(s1, s2, pg_write, 500)
    at_branch(s2, "UPDATE items SET n = -1 WHERE id = 250")
    at_branch(s2, "DELETE FROM items WHERE id = 420")
    passes: list[str] = []
    first_pass = table_diff._suspects

    def counted(c: CascadeSet, node: str, provider: str, table: str) -> Any:
        passes.append(table)
        return first_pass(c, node, provider, table)

    def no_spark(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark read a table for two suspect buckets")

    monkeypatch.setattr(table_diff, "_suspects", counted)
    fixed = table_diff.repair(CascadeSet(s2), "s2", "items", no_spark)
    assert (fixed.written, fixed.deleted, fixed.equal_after) == (2, 0, True)
    assert passes == ["items"]
    assert rows(s2) == rows(s1)


def test_every_key_is_in_its_buckets_range() -> None:
    """PostgreSQL's bigint division rounds toward zero, as Python's int(k / size) does for
    these keys: each key falls in the range compare reads for its bucket."""
    for size in (1, 7, 100):
        for k in range(-1000, 1001):
            low, high = bucket_range(int(k / size), size)
            assert low <= k <= high, (k, size)


AUDIT = (
    "CREATE TABLE items_applied (id INTEGER, n INTEGER, op TEXT)",
    "CREATE TRIGGER items_ins AFTER INSERT ON items"
    " BEGIN INSERT INTO items_applied VALUES (new.id, new.n, 'I'); END",
    "CREATE TRIGGER items_upd AFTER UPDATE ON items"
    " BEGIN INSERT INTO items_applied VALUES (new.id, new.n, 'U'); END",
    "CREATE TRIGGER items_del AFTER DELETE ON items"
    " BEGIN INSERT INTO items_applied VALUES (old.id, old.n, 'D'); END",
)


def test_compare_and_repair_under_a_running_writer_and_worker(
    lite: dict[str, str], spark: SparkSession
) -> None:
    """A writer commits at the root and ticks, and the branch's worker applies, all the while:
    compare still finds exactly what was planted (the writer's keys in flight are the queue's),
    repair changes exactly those rows, and at the end the branch equals the root with every
    row version of the writer applied at most once (the branch's audit of row versions)."""
    import itertools
    import threading

    from baton.spark.diff import spark_differ

    s1, s2 = lite["s1"], lite["s2"]
    for i in range(1, 41):
        sqlite_write(s1, "INSERT INTO items VALUES (?, ?, 0.5, 'a', NULL)", (i, -i))
    tick(s1)
    catch_up(s2)
    for sql in AUDIT:
        sqlite_write(s2, sql)
    at_branch(s2, "DELETE FROM items WHERE id IN (3, 4)")
    at_branch(s2, "INSERT INTO items VALUES (99, -99, 0.5, 'x', NULL)")
    at_branch(s2, "UPDATE items SET t = 'b' WHERE id IN (5, 6, 7)")
    stop = threading.Event()
    failures: list[BaseException] = []
    versions = itertools.count(1)  # every write of the writer is a new value of n

    def writer() -> None:
        rng = random.Random(31)
        while not stop.is_set():
            for _ in range(10):
                key = rng.randrange(1000, 1030)
                if rng.random() < 0.2:
                    sqlite_write(s1, "DELETE FROM items WHERE id = ?", (key,))
                else:
                    sqlite_write(
                        s1,
                        "INSERT INTO items VALUES (?, ?, 0.5, 'w', NULL)"
                        " ON CONFLICT (id) DO UPDATE SET n = excluded.n",
                        (key, next(versions)),
                    )
            tick(s1)

    def worker() -> None:
        while not stop.wait(0.01):
            catch_up(s2)

    def running(job: Any) -> Any:
        def run() -> None:
            try:
                job()
            except BaseException as exc:  # the test fails on it below
                failures.append(exc)

        return run

    threads = [threading.Thread(target=running(job), daemon=True) for job in (writer, worker)]
    for thread in threads:
        thread.start()
    c = CascadeSet(s2)
    differ = spark_differ(spark, rows_per_partition=16)
    try:
        wait_for(lambda: next(versions) > 200 or bool(failures), what="the writer going")
        found = table_diff.compare(c, "s2", ["items"], differ)
        t = found.tables["items"]
        keys = {k: sorted(d.key[0] for d in t.of(k)) for k in Kind}
        assert keys == {Kind.MISSING: [3, 4], Kind.EXTRA: [99], Kind.DIFFERENT: [5, 6, 7]}
        fixed = table_diff.repair(c, "s2", "items", differ)
        assert (fixed.written, fixed.deleted, fixed.equal_after) == (5, 1, True)
        assert not c.state("s2").paused
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not failures, failures
    tick(s1)
    catch_up(s2)
    assert rows(s2) == rows(s1)
    assert table_diff.compare(c, "s2", ["items"], differ).equal
    db = sqlite3.connect(s2.removeprefix("sqlite://"))
    try:
        twice = db.execute(
            "SELECT id, n, op, count(*) FROM items_applied WHERE n > 0"
            " GROUP BY id, n, op HAVING count(*) > 1"
        ).fetchall()
        applied = db.execute("SELECT count(*) FROM items_applied WHERE n > 0").fetchone()[0]
    finally:
        db.close()
    assert applied > 0 and twice == []
