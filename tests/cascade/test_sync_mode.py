"""Synchronous mode (issue 30, step 3): ``baton cascade sync SET K``, the writer's commit that
waits for K branches, and the failover that keeps every acknowledged transaction. Real SQLite
and PostgreSQL node databases, no Spark: a branch's worker is a thread here that applies
batches by hand (:func:`catch_up`), as :mod:`tests.cascade.test_root_writer` does."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import psycopg
import pytest

from baton.cascade import commands, node_ops, sync_mode
from baton.cascade.db import open_node_db
from baton.cascade.member_setting import Copy
from baton.cascade.model import Role
from baton.cascade.writer import RootWriter
from baton.errors import CascadeInputError, Refused, SyncTimeout, SyncUnsafe
from baton.local.waiting import wait_for
from baton.testing.servers import PostgresServer
from tests.cascade.test_root_writer import ACCOUNTS, catch_up, rows
from tests.test_cli import BATON

NODES = ("s1", "s2", "s3")


def build(locations: dict[str, str]) -> None:
    """Set S: s1 root -> s2 and s3 branches, replicating ``accounts``."""
    commands.create_root("s1", locations["s1"], "S")
    for name in ("s2", "s3"):
        commands.create_subscriber(Role.BRANCH, name, locations[name], "s1", locations["s1"])
    commands.add_table(locations["s1"], "accounts", None, True)
    for name in ("s2", "s3"):
        node_ops.copy_table(locations[name], "accounts")


@pytest.fixture
def lite(tmp_path: Path) -> dict[str, str]:
    locations = {n: f"sqlite://{tmp_path / n}.db" for n in NODES}
    for name in locations:
        conn = sqlite3.connect(tmp_path / f"{name}.db")
        conn.execute(ACCOUNTS)
        conn.close()
    build(locations)
    return locations


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[dict[str, str]]:
    names = ["y" + uuid.uuid4().hex[:12] for _ in NODES]
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        for name in names:
            admin.execute(f'CREATE DATABASE "{name}"')
    port = postgres_server.port
    url = f"postgresql://postgres@127.0.0.1:{port}/"
    locations = {n: url + db for n, db in zip(NODES, names, strict=True)}
    for location in locations.values():
        with psycopg.connect(location) as conn:
            conn.execute(ACCOUNTS.replace("INTEGER", "bigint"))
    build(locations)
    yield locations
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        for name in names:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Applier:
    """A branch's worker, by hand, in a thread: once ``gate`` is set, applies whatever its
    provider ticked, until the block ends."""

    def __init__(self, location: str, gate: threading.Event | None = None) -> None:
        self.location = location
        self.gate = gate or threading.Event()
        if gate is None:
            self.gate.set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.gate.wait(0.05):
                    catch_up(self.location)
                    self._stop.wait(0.002)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc

    def __enter__(self) -> Applier:
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self.error is None, self.error


def position(location: str) -> int:
    with open_node_db(location, readonly=True) as db:
        return db.state().position


def last_tick(location: str) -> int:
    with open_node_db(location, readonly=True) as db:
        last = db.last_tick()
        return 0 if last is None else last.tick_id


def insert(key: int) -> Callable[[object], object]:
    return lambda cur: cur.execute(f"INSERT INTO accounts VALUES ({key}, {key * 10})")  # type: ignore[attr-defined]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BATON, "cascade", *args], capture_output=True, text=True, timeout=60, check=False
    )


# -- the commit ------------------------------------------------------------------------------


def no_transaction_open(location: str) -> bool:
    """Whether another writer can take the root's write lock (SQLite: waiting for it while
    anyone holds it), or no session of the root's database is inside a transaction for long
    (PostgreSQL: a forced tick's own is short)."""
    if location.startswith("sqlite:"):
        lite = sqlite3.connect(location.removeprefix("sqlite://"), timeout=5)
        try:
            lite.execute("BEGIN IMMEDIATE")
            lite.rollback()
        finally:
            lite.close()
        return True
    with psycopg.connect(location, autocommit=True) as pg:
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()"
        )
        return bool(wait_for(lambda: pg.execute(query).fetchone() == (0,), timeout=5))


def blocks_until_applied(loc: dict[str, str]) -> None:
    """With sync 1, a commit returns only once s2 applied the tick that includes it."""
    commands.sync(loc["s3"], "S", 1)
    gate = threading.Event()
    done = threading.Event()
    seen_at_return: list[list[tuple[object, ...]]] = []
    with RootWriter("S", via=loc["s2"], sync_timeout=30) as writer, Applier(loc["s2"], gate):
        assert writer.root.node == "s1" and writer.sync == 1
        before = last_tick(loc["s1"])

        def commit() -> None:
            writer.run(insert(1))
            seen_at_return.append(rows(loc["s2"]))
            done.set()

        committer = threading.Thread(target=commit)
        committer.start()
        # The writer made the tick that includes its transaction (no ticker runs here)...
        wait_for(lambda: last_tick(loc["s1"]) > before, timeout=10, what="the forced tick")
        # ...and cannot have returned: nothing applied it yet.
        assert not done.is_set() and rows(loc["s2"]) == []
        # Waiting holds no lock and no transaction at the root.
        assert no_transaction_open(loc["s1"])
        assert not done.is_set()
        gate.set()
        committer.join(30)
        assert done.is_set()
        assert seen_at_return == [[(1, 10)]]
        ack = writer.last_ack
        assert ack is not None and ack.branches == ("s2",) and ack.tick > before
        assert position(loc["s2"]) >= ack.tick
    # s3 was behind: it holds the acknowledged tick (recorded once the commit returned, by the
    # time the writer is closed), for a failover to read.
    with open_node_db(loc["s3"], readonly=True) as db:
        assert sync_mode.read_acked(db) == ack.tick


def test_sqlite_commit_waits_for_a_branch_then_times_out_then_async(
    lite: dict[str, str],
) -> None:
    blocks_until_applied(lite)
    # No branch applies: SyncTimeout, which says the transaction is committed, not lost.
    with RootWriter("S", via=lite["s1"], sync_timeout=0.3) as writer:
        with pytest.raises(SyncTimeout) as late:
            writer.run(insert(2))
        err = late.value
        assert (err.root, err.wanted, err.confirmed) == ("s1", 1, ())
        assert err.tick > position(lite["s2"])
        assert "not lost and not rolled back" in str(err) and "committed at root s1" in str(err)
        assert rows(lite["s1"]) == [(1, 10), (2, 20)]
        # A transaction that wrote nothing waits for nothing.
        assert writer.run(lambda cur: cur.execute("SELECT count(*) FROM accounts").fetchone())
    # K = 0: the commit returns at once, no tick made, nothing waited for.
    commands.sync(lite["s2"], "S", 0)
    before = last_tick(lite["s1"])
    with RootWriter("S", via=lite["s3"]) as writer:
        assert writer.sync == 0
        writer.run(insert(3))
        assert writer.last_ack is None
    assert last_tick(lite["s1"]) == before and rows(lite["s1"])[-1] == (3, 30)
    # An explicit K overrides the set's; a negative one is bad input.
    with pytest.raises(CascadeInputError):
        RootWriter("S", via=lite["s3"], sync=-1)


def test_postgres_commit_waits_for_a_branch(pg: dict[str, str]) -> None:
    blocks_until_applied(pg)
    # Two in a row on the same connection: each waits for its own tick.
    with RootWriter("S", via=pg["s1"], sync_timeout=30) as writer, Applier(pg["s2"]):
        for key in (2, 3):
            writer.run(insert(key))
            assert writer.last_ack is not None
            assert (key, key * 10) in rows(pg["s2"])
    with RootWriter("S", via=pg["s1"], sync_timeout=0.3) as writer, pytest.raises(SyncTimeout):
        writer.run(insert(4))
    assert (4, 40) in rows(pg["s1"])


# -- the setting -----------------------------------------------------------------------------


def test_the_setting_its_bad_input_and_status(lite: dict[str, str]) -> None:
    def copies() -> list[Copy[int] | None]:
        out = []
        for location in lite.values():
            with open_node_db(location, readonly=True) as db:
                out.append(sync_mode.SYNC.read(db))
        return out

    # Bad input: one line, nothing written anywhere.
    with pytest.raises(Refused, match="2 branch"):
        commands.sync(lite["s1"], "S", 3)
    with pytest.raises(CascadeInputError, match="no set 'T'"):
        commands.sync(lite["s1"], "T", 1)
    with pytest.raises(CascadeInputError, match="give a number of branches"):
        commands.sync(lite["s1"], "S", -1)
    assert copies() == [None, None, None]
    res = cli("sync", "S", "3", "--via", lite["s2"])
    assert res.returncode == 2 and res.stdout == "", res
    (line,) = res.stderr.splitlines()
    assert line.startswith("baton: error: set S has 2 branch(es)"), line
    assert copies() == [None, None, None]
    assert commands.status(lite["s2"]).as_dict()["sync"] == 0

    assert commands.sync(lite["s3"], "S", 2).missed == []
    assert {c.value for c in copies() if c is not None} == {2}
    assert commands.status(lite["s1"]).as_dict()["sync"] == 2
    res = cli("status", "--via", lite["s2"])
    assert "sync: 2 (a commit returns once 2 branches hold it)" in res.stdout.splitlines()


# -- the failover ----------------------------------------------------------------------------


def tag_dead(location: str, name: str, dead: bool) -> None:
    """What a lost branch looks like to a failover (tagged dead in the list it reads)."""
    with open_node_db(location) as db, db.transaction() as cur:
        db.put_node(cur, name, db.nodes()[name][0], dead=dead)


def test_a_failover_in_sync_mode_keeps_the_acknowledged_write(lite: dict[str, str]) -> None:
    s1, s2, s3 = lite["s1"], lite["s2"], lite["s3"]
    commands.sync(s1, "S", 1)
    with RootWriter("S", via=s1, sync_timeout=30) as writer, Applier(s2):
        writer.run(insert(1))
        ack = writer.last_ack
    assert ack is not None and ack.branches == ("s2",)
    assert position(s3) < ack.tick  # s3 never applied it: only s2 holds the write
    # The root and s2 lost (more than K - 1 = 0 branches): refused, nothing changed.
    tag_dead(s3, "s2", True)
    with pytest.raises(SyncUnsafe) as unsafe:
        commands.failover(s3, "s1")
    assert (unsafe.value.acked, unsafe.value.highest) == (ack.tick, position(s3))
    with open_node_db(s3, readonly=True) as db:
        assert db.nodes()["s1"][1] is False and db.state().role is Role.BRANCH
    # s2 is back (the root alone lost): the failover promotes s2, which holds the write.
    tag_dead(s3, "s2", False)
    done = commands.failover(s3, "s1")
    assert done.new_root == "s2"
    assert rows(s2) == [(1, 10)]
    assert done.fork >= ack.tick


def test_a_failover_accepting_the_loss_forgets_what_it_lost(lite: dict[str, str]) -> None:
    s1, s2, s3 = lite["s1"], lite["s2"], lite["s3"]
    with RootWriter("S", via=s1, sync=1, sync_timeout=30) as writer, Applier(s2):
        writer.run(insert(1))
        ack = writer.last_ack
    assert ack is not None
    tag_dead(s3, "s2", True)
    with pytest.raises(SyncUnsafe):
        commands.failover(s3, "s1")
    done = commands.failover(s3, "s1", accept_loss=True)
    assert done.new_root == "s3" and done.fork < ack.tick and rows(s3) == []
    # The new line of ticks reuses the ids after the fork: the old record is lowered to it.
    with open_node_db(s3, readonly=True) as db:
        assert sync_mode.read_acked(db) == done.fork
