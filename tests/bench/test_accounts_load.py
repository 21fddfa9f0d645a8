"""The shared cascade workload (bench/accounts_load.py) on SQLite and PostgreSQL: the change mix,
increasing ids, transaction sizes, equality waits and the steady-rate lag prober. No timing
thresholds: only counts and invariants are checked."""

from __future__ import annotations

import math
import random
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from baton.testing.servers import PostgresServer
from bench import accounts_load as al

SQLITE_LOG = [
    "CREATE TABLE change_log (seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT, id INTEGER)",
    "CREATE TRIGGER log_i AFTER INSERT ON accounts "
    "BEGIN INSERT INTO change_log (op, id) VALUES ('I', NEW.id); END",
    "CREATE TRIGGER log_u AFTER UPDATE ON accounts "
    "BEGIN INSERT INTO change_log (op, id) VALUES ('U', NEW.id); END",
    "CREATE TRIGGER log_d AFTER DELETE ON accounts "
    "BEGIN INSERT INTO change_log (op, id) VALUES ('D', OLD.id); END",
]

PG_LOG = """
CREATE TABLE change_log (seq bigserial PRIMARY KEY, op text, id bigint, tx bigint);
CREATE FUNCTION log_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO change_log (op, id, tx) VALUES (
        left(TG_OP, 1),
        CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END,
        txid_current());
    RETURN NULL;
END $$;
CREATE TRIGGER log_change AFTER INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION log_change();
"""


def check_log(ops: list[tuple[str, int]], changes: int) -> None:
    """Every change fired a row trigger, the mix is about 70/20/10, inserted ids increase."""
    assert len(ops) == changes
    share = {op: sum(1 for o, _ in ops if o == op) / changes for op in "IUD"}
    assert share["I"] == pytest.approx(0.7, abs=0.03)
    assert share["U"] == pytest.approx(0.2, abs=0.03)
    assert share["D"] == pytest.approx(0.1, abs=0.03)
    inserted = [key for op, key in ops if op == "I"]
    assert inserted == sorted(inserted)
    assert len(set(inserted)) == len(inserted)


def test_plan_changes_each_row_once_and_ids_increase() -> None:
    rng = random.Random(3)
    live: list[int] = []
    sizes = list(al._sizes(50_000, rng, 100, 1000))
    assert sum(sizes) == 50_000
    assert all(100 <= s <= 1000 for s in sizes[:-1])
    assert 1 <= sizes[-1] <= 1000
    rows: set[int] = set()
    last_id = 0
    for size, txn in zip(sizes, al.plan(rng, live, 1, iter(sizes)), strict=True):
        assert txn.size == size
        for key, *_ in txn.inserts:
            assert key > last_id
            last_id = key
            rows.add(key)
        upd = [key for *_, key in txn.updates]
        assert len(set(upd)) == len(upd) and set(upd) <= rows
        assert len(set(txn.deletes)) == len(txn.deletes) and set(txn.deletes) <= rows
        rows -= set(txn.deletes)
        assert sorted(live) == sorted(rows)


def test_plan_force_insert_keeps_the_marker() -> None:
    rng = random.Random(4)
    live = list(range(1, 4))
    for txn in al.plan(rng, live, 4, iter([1] * 300 + [100] * 50), force_insert=True):
        top = txn.max_inserted
        assert top is not None
        assert top not in txn.deletes
        assert top == max(live)


def test_generate_sqlite_mix_and_triggers(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    al.create_table(db)
    with sqlite3.connect(db) as conn:
        for stmt in SQLITE_LOG:
            conn.execute(stmt)
    assert al.generate(db, 20_000, seed=1, min_tx=100, max_tx=300) == 20_000
    # A second run continues above the existing ids.
    assert al.generate(f"sqlite://{db}", 1000, seed=2) == 1000
    with sqlite3.connect(db) as conn:
        ops = conn.execute("SELECT op, id FROM change_log ORDER BY seq").fetchall()
        (rows,) = conn.execute("SELECT count(*) FROM accounts").fetchone()
    check_log(ops, 21_000)
    assert rows == sum(1 for op, _ in ops if op == "I") - sum(1 for op, _ in ops if op == "D")


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> Iterator[str]:
    with postgres_server.databases("load") as (url,):
        yield url


def test_generate_postgres_mix_and_transactions(pg_url: str) -> None:
    al.create_table(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(PG_LOG)
    assert al.generate(pg_url, 20_000, seed=1, min_tx=100, max_tx=300) == 20_000
    with psycopg.connect(pg_url, autocommit=True) as conn:
        log = conn.execute("SELECT op, id, tx FROM change_log ORDER BY seq").fetchall()
        (rows,) = conn.execute("SELECT count(*) FROM accounts").fetchone()  # type: ignore[misc]
    check_log([(op, key) for op, key, _ in log], 20_000)
    per_tx: dict[int, int] = {}
    for _, _, tx in log:
        per_tx[tx] = per_tx.get(tx, 0) + 1
    sizes = [per_tx[tx] for tx in sorted(per_tx)]
    assert all(100 <= s <= 300 for s in sizes[:-1])
    assert 1 <= sizes[-1] <= 300
    assert rows == sum(1 for op, *_ in log if op == "I") - sum(1 for op, *_ in log if op == "D")
    assert al.wait_equal(pg_url, pg_url, timeout=10) >= 0


def test_wait_equal_sqlite(tmp_path: Path) -> None:
    root, leaf = tmp_path / "root.db", tmp_path / "leaf.db"
    al.generate(root, 2000, seed=5)
    shutil.copy(root, leaf)
    assert al.wait_equal(root, leaf, timeout=10) >= 0
    with sqlite3.connect(leaf) as conn:
        conn.execute(
            "UPDATE accounts SET balance = balance + 1 WHERE id = (SELECT min(id) FROM accounts)"
        )
    with pytest.raises(TimeoutError):
        al.wait_equal(root, leaf, timeout=0.2)


def check_steady(result: dict[str, float | int], rate: float) -> None:
    assert result["rate"] == rate
    assert result["transactions"] > 0
    assert result["changes"] == 100 * result["transactions"]
    assert result["samples"] == result["transactions"]
    assert result["unseen"] == 0
    assert 0 <= result["p50"] <= result["p99"] <= result["max"]
    assert math.isfinite(result["mean"]) and result["achieved_rate"] > 0


def test_steady_sqlite_same_file(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    al.generate(db, 500, seed=1)
    check_steady(al.steady(db, db, rate=3000, seconds=1.0, seed=2, drain=10), 3000)


def test_steady_postgres_same_database(pg_url: str) -> None:
    check_steady(al.steady(pg_url, pg_url, rate=3000, seconds=1.0, seed=2, drain=10), 3000)
