"""Every value arrives bit for bit: through the root's capture trigger and the apply step (the
path every event takes), and through the initial copy's row codec, on SQLite and PostgreSQL,
for doubles across the whole range (subnormals, -0.0, infinities), text, blobs, big integers and
PostgreSQL numerics."""

from __future__ import annotations

import datetime
import math
import sqlite3
import struct
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baton.cascade import codec
from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.model import Tick
from baton.cascade.node_ops import _apply_table_events
from baton.testing.servers import PostgresServer

SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None
)
INT64 = st.integers(-(2**63), 2**63 - 1)
DOUBLES = st.floats(allow_nan=False)  # SQLite stores NaN as NULL; everything else must arrive
SQLITE_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
PG_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))


def same(a: Any, b: Any) -> bool:
    """Equal, and for doubles the same bits (so -0.0 differs from 0.0)."""
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def differences(x: list[tuple[Any, ...]], y: list[tuple[Any, ...]]) -> list[Any]:
    """The values that differ between two lists of rows (empty when equal bit for bit)."""
    if len(x) != len(y):
        return [("rows", len(x), len(y))]
    return [
        (a, b)
        for r, s in zip(x, y, strict=True)
        for a, b in zip(r, s, strict=True)
        if not same(a, b)
    ]


class Pair:
    """A root node database capturing table ``v`` and a target holding the same table."""

    def __init__(self, root: str, target: str, write: Any) -> None:
        self.root, self.target, self.write = root, target, write
        with open_node_db(root) as db:
            db.install()
            with db.transaction() as cur:
                db.capture(cur, "v", True)
                db.set_table(cur, "v", "ok")
        self.next_key = 0

    def round_trip(self, rows: list[tuple[Any, ...]]) -> None:
        keyed = []
        for r in rows:
            self.next_key += 1
            keyed.append((self.next_key, *r))
        self.write(keyed)
        with open_node_db(self.root) as root:
            last = tick(root)
            events = list(root.batch_events(0, last.tick_id))
            wanted = [r for r in root.read_rows("v") if r[0] > self.next_key - len(rows)]
            copied = [codec.decode(codec.encode_row(r), root.exact_numbers("v")) for r in wanted]
        keys = {r[0] for r in keyed}
        mine = [e for e in events if codec.decode(e.key or "")["k"] in keys]
        with open_node_db(self.target) as target:
            with target.transaction() as cur:
                _apply_table_events(target, cur, "v", mine)
            got = [r for r in target.read_rows("v") if r[0] in keys]
            # The initial copy's codec: a row read, encoded and decoded writes the same values.
            with target.transaction() as cur:
                cols, pk = target.columns("v")
                target.delete_keys(cur, "v", pk, [[r[0]] for r in got])
                target.upsert(cur, "v", cols, copied)
            recopied = [r for r in target.read_rows("v") if r[0] in keys]
        assert differences(got, wanted) == []
        assert differences(recopied, wanted) == []


def tick(db: NodeDB) -> Tick:
    with db.transaction() as cur:
        db.make_tick(cur)
    last = db.last_tick()
    assert last is not None
    return last


@pytest.fixture
def sqlite_pair(tmp_path: Path) -> Pair:
    ddl = "CREATE TABLE v (k INTEGER PRIMARY KEY, r REAL, u, t TEXT, b BLOB, i INTEGER)"
    paths = [tmp_path / "root.db", tmp_path / "target.db"]
    for p in paths:
        with sqlite3.connect(p) as conn:
            conn.execute(ddl)

    def write(rows: list[tuple[Any, ...]]) -> None:
        with sqlite3.connect(paths[0]) as conn:  # the application's own writes
            conn.executemany("INSERT INTO v VALUES (?, ?, ?, ?, ?, ?)", rows)

    return Pair(f"sqlite://{paths[0]}", f"sqlite://{paths[1]}", write)


def _pg_pair(server: PostgresServer, ddl: str) -> Iterator[Pair]:
    names = ["v" + uuid.uuid4().hex[:10] for _ in range(2)]
    with psycopg.connect(server.url, autocommit=True) as admin:
        for n in names:
            admin.execute(f'CREATE DATABASE "{n}"')
    urls = [f"postgresql://postgres@127.0.0.1:{server.port}/{n}" for n in names]
    for u in urls:
        with psycopg.connect(u, autocommit=True) as conn:
            conn.execute(ddl)
    marks = ", ".join(["%s"] * (ddl.count(",") + 1))  # one per column

    def write(rows: list[tuple[Any, ...]]) -> None:
        with psycopg.connect(urls[0]) as conn, conn.cursor() as cur:
            cur.executemany(f"INSERT INTO v VALUES ({marks})", rows)

    yield Pair(urls[0], urls[1], write)
    with psycopg.connect(server.url, autocommit=True) as admin:
        for n in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)')


@pytest.fixture
def pg_pair(postgres_server: PostgresServer) -> Iterator[Pair]:
    """A table with a numeric column: its rows are decoded by the apply step (exactly)."""
    yield from _pg_pair(
        postgres_server,
        "CREATE TABLE v (k bigint PRIMARY KEY, r double precision, n numeric, t text, "
        "b bytea, i bigint, f real)",
    )


@pytest.fixture
def pg_image_pair(postgres_server: PostgresServer) -> Iterator[Pair]:
    """A table whose rows the apply step has PostgreSQL read from their JSON images
    (``upsert_images``)."""
    yield from _pg_pair(
        postgres_server,
        "CREATE TABLE v (k bigint PRIMARY KEY, r double precision, t text, b bytea, "
        "i bigint, f real, z boolean, s timestamp with time zone)",
    )


def test_sqlite_values_arrive_bit_for_bit(sqlite_pair: Pair) -> None:
    anything = st.one_of(st.none(), DOUBLES, INT64, SQLITE_TEXT, st.binary(max_size=20))
    row = st.tuples(DOUBLES, anything, SQLITE_TEXT, st.binary(max_size=20), INT64)

    @SETTINGS
    @given(st.lists(row, min_size=1, max_size=8))
    def check(rows: list[tuple[Any, ...]]) -> None:
        sqlite_pair.round_trip(rows)

    # The values the issue names first: the largest double (printf('%!.17g') changed it),
    # subnormals, both zeros (an untyped column keeps the sign), infinities.
    sqlite_pair.round_trip(
        [
            (1.7976931348623157e308, -0.0, "", b"", 2**63 - 1),
            (5e-324, float("inf"), "é\x00", b"\x00\xff", -(2**63)),
            (-2.2250738585072014e-308, float("-inf"), "x", bytes(range(20)), 0),
            (float("inf"), 5e-324, "y", b"z", 1),
        ]
    )
    check()


def test_postgres_values_arrive_bit_for_bit(pg_pair: Pair) -> None:
    numerics = st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
        lambda d: abs(d.adjusted()) < 100
    )
    doubles = st.floats()  # PostgreSQL keeps NaN and the infinities
    row = st.tuples(doubles, numerics, PG_TEXT, st.binary(max_size=20), INT64, st.floats(width=32))

    @SETTINGS
    @given(st.lists(row, min_size=1, max_size=8))
    def check(rows: list[tuple[Any, ...]]) -> None:
        pg_pair.round_trip(rows)

    pg_pair.round_trip(
        [
            (1.7976931348623157e308, Decimal("123456789012345678901234567890.000001"), "", b"",
             2**63 - 1, 3.4028234663852886e38),
            (-0.0, Decimal("-0.000000000000000000000000000001"), "é", b"\x00", -(2**63),
             -0.0),
            (float("inf"), Decimal("18446744073709551616"), "x", b"\xff", 0, float("-inf")),
            (5e-324, Decimal("0.1"), "y", b"z", 1, 1.401298464324817e-45),
        ]
    )  # fmt: skip
    check()


def test_postgres_values_arrive_bit_for_bit_as_images(pg_image_pair: Pair) -> None:
    """The same values through the apply step's other way: the target reads each row image
    itself (json_to_record), for tables of the column types that allow it."""
    with open_node_db(pg_image_pair.target) as target:
        assert target.image_types("v") is not None
    moments = st.datetimes(timezones=st.just(datetime.UTC))
    row = st.tuples(
        st.floats(), PG_TEXT, st.binary(max_size=20), INT64, st.floats(width=32),
        st.one_of(st.none(), st.booleans()), st.one_of(st.none(), moments),
    )  # fmt: skip

    @SETTINGS
    @given(st.lists(row, min_size=1, max_size=8))
    def check(rows: list[tuple[Any, ...]]) -> None:
        pg_image_pair.round_trip(rows)

    when = datetime.datetime(2026, 11, 28, 16, 0, 0, 123456, tzinfo=datetime.UTC)
    pg_image_pair.round_trip(
        [
            (1.7976931348623157e308, "", b"", 2**63 - 1, 3.4028234663852886e38, True, when),
            (-0.0, "é\\x\"'", b"\x00", -(2**63), -0.0, False, None),
            (float("inf"), "x", b"\xff", 0, float("-inf"), None, when),
            (float("nan"), "y", b"z", 1, 1.401298464324817e-45, None, when),
            (5e-324, "\n\t{}", b"z", 1, float("nan"), None, when),
        ]
    )  # fmt: skip
    check()
