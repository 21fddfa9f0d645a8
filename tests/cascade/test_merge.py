"""Combined sets (seed 004's complex case), applied in-process (Spark only for the workers that
must stay idle during a switchover): partition sets A and B, each a root; S1 their combined-root
(merge-leaves a2, b2), S2 the combined-failover (merge-leaves a3, b3, tracking), S3 a branch of
S1 with an audit trigger. Each cell of the seed's node behaviour table that says "yes" for a
merge-leaf is asserted, then S1 is lost and S2 takes over: S3 keeps equal to the union of A and
B, with every row version applied once."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest

from baton.cascade import handover, merge, node_ops, observe, set_ops, takeover
from baton.cascade.apply import ApplyResult, apply_batch
from baton.cascade.batches import Outcome, reduce_events
from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.model import PARTITION_TICK, Role
from baton.errors import CascadeInputError, Refused
from baton.service.worker import LOW_LATENCY, Worker
from baton.testing.cascade import served
from baton.testing.servers import PostgresServer
from baton.testing.workload import create_accounts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PARTS = ("A", "B")


def tick(location: str) -> None:
    with open_node_db(location) as db, db.transaction() as cur:
        db.make_tick(cur)


def pump(location: str, epoch: int = 1, copy: bool = True) -> ApplyResult:
    """Apply everything the node's provider has, as a worker's micro-batch would (after the
    initial copies of its tables, unless ``copy`` is False)."""
    with open_node_db(location) as db:
        st = db.state()
        provider = st.provider
        assert provider is not None
        ploc = db.nodes()[provider][0]
    with open_node_db(ploc) as p:
        last = p.last_tick()
        assert last is not None
        ticks = p.ticks(st.position, last.tick_id)
        events = list(p.batch_events(st.position, last.tick_id))
    with open_node_db(location) as db:
        for table, state in db.tables().items():
            if copy and state == "copying" and node_ops.copy_ready(location, table):
                node_ops.copy_table(location, table)
        return apply_batch(db, ticks, reduce_events(events), events, epoch, provider=provider)


def write(location: str, rows: dict[int, int], delete: tuple[int, ...] = ()) -> None:
    """Upsert ``rows`` (id -> balance) and delete ``delete`` at a partition root."""
    with open_node_db(location) as db, db.transaction() as cur:
        db.upsert(cur, "accounts", ["id", "balance"], [[k, v] for k, v in rows.items()])
        db.delete_keys(cur, "accounts", ["id"], [[k] for k in delete])


def rows(location: str) -> list[tuple[object, ...]]:
    with open_node_db(location) as db:
        return [tuple(r[:2]) for r in db.read_rows("accounts")]


@pytest.fixture(params=["sqlite", "postgres"])
def locations(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    names = ["a1", "b1", "s1", "s2", "s3"]
    if request.param == "sqlite":
        yield {n: f"sqlite://{tmp_path}/{n}.db" for n in names}
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    with server.databases(*names) as urls:
        yield dict(zip(names, urls, strict=True))


def audit(location: str) -> None:
    """Count every row version S3's table sees (a trigger): a version applied twice shows."""
    if location.startswith("sqlite:"):
        with sqlite3.connect(location.removeprefix("sqlite://")) as c:
            c.executescript(
                "CREATE TABLE audit (id INTEGER, balance INTEGER);"
                "CREATE TRIGGER audit_i AFTER INSERT ON accounts BEGIN "
                "INSERT INTO audit VALUES (NEW.id, NEW.balance); END;"
                "CREATE TRIGGER audit_u AFTER UPDATE ON accounts BEGIN "
                "INSERT INTO audit VALUES (NEW.id, NEW.balance); END;"
            )
        return
    with psycopg.connect(location, autocommit=True) as c:
        c.execute("CREATE TABLE audit (id bigint, balance bigint)")
        c.execute(
            "CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO audit VALUES (NEW.id, NEW.balance); RETURN NULL; END $$"
        )
        c.execute(
            "CREATE TRIGGER audit AFTER INSERT OR UPDATE ON accounts "
            "FOR EACH ROW EXECUTE FUNCTION audit()"
        )


def audited(location: str) -> list[tuple[int, int]]:
    with open_node_db(location) as db:
        return sorted((int(a), int(b)) for a, b in db._rows("SELECT id, balance FROM audit"))


def three_roots(loc: dict[str, str]) -> tuple[str, str]:
    """Partition roots a1 and b1 and the combined root s1, each with ``accounts`` added, and
    the audit trigger at s3; returns a1's and b1's locations."""
    for location in loc.values():
        create_accounts(location)
    audit(loc["s3"])
    a1, b1 = loc["a1"], loc["b1"]
    node_ops.create_root("a1", a1, "A")
    node_ops.create_root("b1", b1, "B")
    node_ops.create_root("s1", loc["s1"], "S")
    for root in (a1, b1, loc["s1"]):
        node_ops.add_table(root, "accounts")
    return a1, b1


def test_combined_set_failover(locations: dict[str, str]) -> None:
    loc = locations
    a1, b1 = three_roots(loc)
    # Rows written before the merge exists: the merge-leaves' initial copies bring them in,
    # both into one table (neither copy empties it).
    write(a1, {1: 10, 2: 20})
    write(b1, {101: 1000})
    node_ops.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    node_ops.create_subscriber(Role.BRANCH, "s3", loc["s3"], "s1", loc["s1"])
    hosts = {"2": loc["s1"], "3": loc["s2"]}
    for part, root in (("a", a1), ("b", b1)):
        tick(root)
        for n, host in hosts.items():
            merge.create_merge_leaf(f"{part}{n}", host, f"{part}1", root)
    # A merge-leaf needs the combined set to replicate the table, with the partition's shape.
    for part in "AB":
        with pytest.raises(Refused, match="does not replicate"):
            node_ops.add_table(merge.merge_location(hosts["3"], part), "accounts")
    for node in ("s2", "s3"):
        node_ops.add_table(loc[node], "accounts")
        tick(loc["s1"])
        pump(loc[node])
    states = {
        f"{part}{n}": node_ops.add_table(merge.merge_location(host, part.upper()), "accounts")
        for part in "ab"
        for n, host in hosts.items()
    }
    # The combined root's merge-leaves copy (without emptying); the failover's only track,
    # and until a partition tick tells them how far the combined set is, they would copy too.
    assert states == dict.fromkeys(["a2", "b2", "a3", "b3"], "copying")

    def cycle() -> None:
        for root in (a1, b1):
            tick(root)
        for part in "AB":
            pump(merge.merge_location(loc["s1"], part))
        tick(loc["s1"])
        for node in ("s2", "s3"):
            pump(loc[node])

    cycle()  # the merge-leaves' initial copies
    with open_node_db(loc["s1"]) as db:
        assert db.tables() == {"accounts": "ok"}
    for part in "AB":
        for host in ("s1", "s2"):
            with open_node_db(merge.merge_location(loc[host], part)) as db:
                assert db.tables() == {"accounts": "ok"}
    # status/members show who merges what.
    ms = {m.name: m for m in observe.members(set_ops.CascadeSet(loc["s1"]))}
    assert ms["s1"].merges == {"A": "a2", "B": "b2"}
    assert ms["s2"].merges == {"A": "a3", "B": "b3"}
    assert ms["s3"].merges == {}
    am = {m.name: m for m in observe.members(set_ops.CascadeSet(a1))}
    assert (am["a1"].combined, am["a2"].combined, am["a3"].combined) == (None, "S", "S")
    write(a1, {3: 30}, delete=(2,))
    write(b1, {102: 2000})
    write(b1, {102: 2001})  # a second version of one key in one batch: both are queued
    cycle()
    union = sorted(rows(a1) + rows(b1))
    assert rows(loc["s1"]) == union
    assert rows(loc["s2"]) == union
    assert rows(loc["s3"]) == union
    # Read from queue, event copy to the combined set, send tick_id to queue: every row
    # version of the partition batches is in S1's queue, with one partition tick per batch.
    with open_node_db(loc["s1"]) as db:
        queued = list(db.events_after(0))
        part_ticks = [e for e in queued if e.type == PARTITION_TICK]
        key = '{"id":102}'
        versions = [json.loads(e.data or "{}").get("balance") for e in queued if e.key == key]
        assert versions[-2:] == [2000, 2001]
        assert {json.loads(p.data or "{}")["set"] for p in part_ticks} == {"A", "B"}
        merged = db.merged()
    # Send local watermark upwards: a partition root holds its queue for its merge-leaves.
    for part, root in (("A", a1), ("B", b1)):
        with open_node_db(root) as db:
            from baton.cascade.watermark import pull_watermarks

            pull_watermarks(db)
            marks = db.watermarks()
            last = db.last_tick()
        assert last is not None
        with open_node_db(merge.merge_location(loc["s1"], part)) as m:
            assert m.state().position == last.tick_id == merged[part]
        # Wait behind the combined set: the failover's merge-leaf is where S2 holds the
        # partition, never ahead of S1's.
        with open_node_db(merge.merge_location(loc["s2"], part)) as m:
            tracked = m.state().position
        assert tracked == merged[part]
        assert marks[f"{part.lower()}3"] == tracked
    # A tracking merge-leaf applies nothing: its host is a branch of the combined set.
    write(a1, {4: 40})
    tick(a1)
    assert pump(merge.merge_location(loc["s2"], "A")).outcome is Outcome.TRACKING

    # S1 is lost with partition A's last batch merged there but not seen by S2 or S3.
    pump(merge.merge_location(loc["s1"], "A"))
    c = set_ops.CascadeSet(loc["s3"])
    new_root, _, notes = takeover.failover(c, "s1")
    assert new_root == "s2", notes
    assert set_ops.CascadeSet(loc["s3"]).state("s3").provider == "s2"
    # The dead root's merge-leaves are dead in their partition sets (they hold no queue).
    for root, dead in ((a1, "a2"), (b1, "b2")):
        assert set_ops.CascadeSet(root).dead(dead)
    write(a1, {5: 50}, delete=(1,))
    write(b1, {103: 3000})
    for root in (a1, b1):
        tick(root)
    for part in "AB":
        result = pump(merge.merge_location(loc["s2"], part))
        assert result.applied, result
    tick(loc["s2"])
    pump(loc["s3"])
    union = sorted(rows(a1) + rows(b1))
    assert rows(loc["s2"]) == union
    assert rows(loc["s3"]) == union
    seen = audited(loc["s3"])
    assert len(seen) == len(set(seen)), "a row version was applied twice at S3"
    assert (4, 40) in seen and (5, 50) in seen and (103, 3000) in seen


def test_bad_merge_input(tmp_path: Path) -> None:
    loc = {n: f"sqlite://{tmp_path}/{n}.db" for n in ("a1", "s1", "l1")}
    for location in loc.values():
        create_accounts(location)
    node_ops.create_root("a1", loc["a1"], "A")
    node_ops.create_root("s1", loc["s1"], "S")
    node_ops.create_subscriber(Role.LEAF, "l1", loc["l1"], "s1", loc["s1"])
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(Refused, match="no queue to combine into"):
        merge.create_merge_leaf("a9", loc["l1"], "a1", loc["a1"])
    with pytest.raises(Refused, match="cannot merge into itself"):
        merge.create_merge_leaf("a9", loc["a1"], "a1", loc["a1"])
    with pytest.raises(CascadeInputError, match="without #SET"):
        merge.create_merge_leaf("a9", loc["s1"] + "#A", "a1", loc["a1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    with open_node_db(loc["a1"]) as db:
        assert sorted(db.nodes()) == ["a1"]
    # A partition table whose shape differs from the combined table's.
    with open_node_db(loc["s1"]) as db, db.transaction() as cur:
        cur.execute("CREATE TABLE wide (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER)")
    with open_node_db(loc["a1"]) as db, db.transaction() as cur:
        cur.execute("CREATE TABLE wide (id INTEGER PRIMARY KEY, a INTEGER)")
    node_ops.add_table(loc["a1"], "wide")
    node_ops.add_table(loc["s1"], "wide")
    merge.create_merge_leaf("a2", loc["s1"], "a1", loc["a1"])
    with pytest.raises(Refused, match="differ from the provider"):
        node_ops.add_table(merge.merge_location(loc["s1"], "A"), "wide")
    with open_node_db(merge.merge_location(loc["s1"], "A")) as db:
        assert db.tables() == {}
    with pytest.raises(Refused, match="is a merge-leaf"):
        observe.check(set_ops.CascadeSet(loc["a1"]), "a2")


def test_combined_set_switchover(spark: SparkSession, tmp_path: Path) -> None:
    """A planned switchover of the combined root: S1's merge-leaves stop at the switch tick and
    S2's take over from exactly there, while the partitions write. Meanwhile S1's merge-leaves'
    workers keep no query (the sink would refuse every batch: a task restarted on each refusal
    counted as failing and was stopped)."""
    loc = {n: f"sqlite://{tmp_path}/{n}.db" for n in ("a1", "b1", "s1", "s2", "s3")}
    for location in loc.values():
        create_accounts(location)
    audit(loc["s3"])
    node_ops.create_root("a1", loc["a1"], "A")
    node_ops.create_root("b1", loc["b1"], "B")
    node_ops.create_root("s1", loc["s1"], "S")
    for root in ("a1", "b1", "s1"):
        node_ops.add_table(loc[root], "accounts")
    for node in ("s2", "s3"):
        node_ops.create_subscriber(Role.BRANCH, node, loc[node], "s1", loc["s1"])
        node_ops.add_table(loc[node], "accounts")
    merges = {
        merge.merge_location(loc[host], part.upper()): (f"{part}{n}", loc[f"{part}1"])
        for part in "ab"
        for n, host in (("2", "s1"), ("3", "s2"))
    }
    for location, (name, root) in merges.items():
        tick(root)
        merge.create_merge_leaf(name, location.split("#")[0], name[0] + "1", root)
        node_ops.add_table(location, "accounts")
    version = iter(range(1, 10_000))

    def cycle() -> None:
        write(loc["a1"], {next(version) % 7: next(version)})
        write(loc["b1"], {100 + next(version) % 7: next(version)})
        for root in ("a1", "b1"):
            tick(loc[root])
        for location in merges:
            pump(location)
        with open_node_db(loc["s1"]) as db:
            root = "s1" if db.state().role is Role.ROOT else "s2"
        tick(loc[root])
        for node in ("s1", "s2", "s3"):
            if node != root:
                pump(loc[node])

    for _ in range(3):
        cycle()

    checked: list[str] = []

    def wait(condition: object, timeout: float) -> None:
        assert callable(condition)
        for part in PARTS:  # the switch is under way: S1 (still the root) merges no more
            location = merge.merge_location(loc["s1"], part)
            with open_node_db(location) as db:
                assert db.only_tracks(db.state())
            worker = Worker(spark, location, epoch=1, mode=LOW_LATENCY)
            try:
                worker.check()
                assert worker.query is None, f"{part.lower()}2's worker runs during the switchover"
            finally:
                worker.close()
            checked.append(part)
        while not condition():
            cycle()

    c = set_ops.CascadeSet(loc["s3"])
    with served(loc["s2"]):  # this test is s2's worker (pump)
        handover.switchover(c, "s2", wait=wait)
    assert checked == list(PARTS)
    assert c.state("s2").role is Role.ROOT and c.state("s1").provider == "s2"
    set_ops.change_provider(set_ops.CascadeSet(loc["s3"]), "s3", "s2")
    for _ in range(3):
        cycle()
    # S1's merge-leaves now track (S1 is a branch); S2's merge.
    for root in ("a1", "b1"):
        tick(loc[root])
    for part in "AB":
        with (
            open_node_db(merge.merge_location(loc["s1"], part)) as m1,
            open_node_db(merge.merge_location(loc["s2"], part)) as m2,
        ):
            assert m1.state().position == m2.state().position
        assert pump(merge.merge_location(loc["s1"], part)).outcome is Outcome.TRACKING
    union = sorted(rows(loc["a1"]) + rows(loc["b1"]))
    for node in ("s1", "s2", "s3"):
        assert rows(loc[node]) == union, node
    seen = audited(loc["s3"])
    assert len(seen) == len(set(seen)), "a row version was applied twice at S3"


def test_failover_while_a_merge_copy_is_not_done(tmp_path: Path) -> None:
    """S1's merge-leaf has merged batches of A while its copy of A's table had not run: the
    partition ticks say so, S2's tracking merge-leaf takes that over, and after S1 is lost it
    copies A's table itself (into the combined table, without emptying it) and goes on."""
    loc = {n: f"sqlite://{tmp_path}/{n}.db" for n in ("a1", "s1", "s2")}
    for location in loc.values():
        create_accounts(location)
    node_ops.create_root("a1", loc["a1"], "A")
    node_ops.create_root("s1", loc["s1"], "S")
    for root in ("a1", "s1"):
        node_ops.add_table(loc[root], "accounts")
    write(loc["a1"], {1: 10, 2: 20})
    node_ops.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    node_ops.add_table(loc["s2"], "accounts")
    tick(loc["a1"])
    a2, a3 = merge.merge_location(loc["s1"], "A"), merge.merge_location(loc["s2"], "A")
    merge.create_merge_leaf("a2", loc["s1"], "a1", loc["a1"])
    merge.create_merge_leaf("a3", loc["s2"], "a1", loc["a1"])
    assert node_ops.add_table(a2, "accounts") == "copying"
    assert node_ops.add_table(a3, "accounts") == "copying"
    write(loc["a1"], {3: 30})
    tick(loc["a1"])
    assert pump(a2, copy=False).applied  # merged a batch, its copy not run yet
    tick(loc["s1"])
    pump(loc["s2"])
    with open_node_db(a3) as db:
        assert db.tables() == {"accounts": "copying"}
        with open_node_db(a2) as m:
            assert db.state().position == m.state().position
    c = set_ops.CascadeSet(loc["s2"])
    assert takeover.failover(c, "s1")[0] == "s2"
    write(loc["a1"], {4: 40}, delete=(1,))
    tick(loc["a1"])
    assert pump(a3).applied
    assert rows(loc["s2"]) == rows(loc["a1"])


def test_failover_right_after_a_merge_copy(tmp_path: Path) -> None:
    """S1's merge-leaf copied A's table, and S1 was lost before merging any batch after it:
    the copy's own partition tick tells S2 the copy was made, so S2's merge-leaf does not copy
    again (which would write every row version a second time) and goes on from there."""
    loc = {n: f"sqlite://{tmp_path}/{n}.db" for n in ("a1", "s1", "s2")}
    for location in loc.values():
        create_accounts(location)
    audit(loc["s2"])
    node_ops.create_root("a1", loc["a1"], "A")
    node_ops.create_root("s1", loc["s1"], "S")
    for root in ("a1", "s1"):
        node_ops.add_table(loc[root], "accounts")
    node_ops.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    node_ops.add_table(loc["s2"], "accounts")
    tick(loc["s1"])
    pump(loc["s2"])
    tick(loc["a1"])
    a2, a3 = merge.merge_location(loc["s1"], "A"), merge.merge_location(loc["s2"], "A")
    merge.create_merge_leaf("a2", loc["s1"], "a1", loc["a1"])
    merge.create_merge_leaf("a3", loc["s2"], "a1", loc["a1"])
    node_ops.add_table(a2, "accounts")
    node_ops.add_table(a3, "accounts")
    write(loc["a1"], {1: 10, 2: 20})
    tick(loc["a1"])
    assert pump(a2, copy=False).applied  # a batch merged while the copy waits
    assert node_ops.copy_table(a2, "accounts") in ("ok", "catching-up")  # then the copy
    tick(loc["s1"])
    pump(loc["s2"])  # S2 holds the copy's rows and its partition tick, then S1 is lost
    with open_node_db(a3) as db:
        assert db.tables()["accounts"] != "copying"
    assert takeover.failover(set_ops.CascadeSet(loc["s2"]), "s1")[0] == "s2"
    write(loc["a1"], {3: 30}, delete=(1,))
    tick(loc["a1"])
    assert pump(a3).applied
    assert rows(loc["s2"]) == rows(loc["a1"])
    seen = audited(loc["s2"])
    assert len(seen) == len(set(seen)), "a row version was written twice at S2"


def test_failover_counts_only_the_dead_roots_ticks_as_ahead(
    locations: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new root's service starts the moment the failover promotes it: its merge-leaves
    merge, it ticks, and S3 (already pointed at it) applies that first tick while the failover
    is still finishing. That tick is the new root's, not one the set lost with S1: S3 must not
    be rewound for it (it would apply the same row versions again). S3 had also applied S1's
    last tick, which S2 lacked: the failover catches S2 up to it first."""
    loc = locations
    a1, b1 = three_roots(loc)
    for node in ("s2", "s3"):
        node_ops.create_subscriber(Role.BRANCH, node, loc[node], "s1", loc["s1"])
        node_ops.add_table(loc[node], "accounts")
    hosts = {"2": loc["s1"], "3": loc["s2"]}
    for part, root in (("a", a1), ("b", b1)):
        tick(root)
        for n, host in hosts.items():
            merge.create_merge_leaf(f"{part}{n}", host, f"{part}1", root)
            node_ops.add_table(merge.merge_location(host, part.upper()), "accounts")

    def cycle(*nodes: str) -> None:
        for root in (a1, b1):
            tick(root)
        for part in "AB":
            pump(merge.merge_location(loc["s1"], part))
        tick(loc["s1"])
        for node in nodes:
            pump(loc[node])

    cycle("s2", "s3")  # the merge-leaves' initial copies
    write(a1, {1: 10})
    write(b1, {101: 1000})
    cycle("s2", "s3")
    # S1's last tick merges a batch of each partition: S3 applied it, S2 did not.
    write(a1, {1: 11, 2: 20})
    write(b1, {101: 1001})
    cycle("s3")
    with open_node_db(loc["s1"]) as db:
        last = db.last_tick()
    assert last is not None
    with open_node_db(loc["s3"]) as db:
        assert db.state().position == last.tick_id
    # The partitions go on writing while S1 is lost.
    write(a1, {3: 30})
    write(b1, {102: 2000})
    for root in (a1, b1):
        tick(root)

    def promote_then_serve(db: NodeDB) -> int:
        """Promote, then do at once what the new root's service and S3's worker do."""
        fork = handover.promote(db)
        for part in "AB":
            assert pump(merge.merge_location(loc["s2"], part)).applied
        tick(loc["s2"])
        assert pump(loc["s3"]).applied
        return fork

    # The failover's own promote step (takeover's import of it).
    monkeypatch.setattr("baton.cascade.takeover.promote", promote_then_serve)
    new_root, fork, notes = takeover.failover(set_ops.CascadeSet(loc["s3"]), "s1")
    assert (new_root, fork) == ("s2", last.tick_id), notes
    assert not [n for n in notes if n.startswith("s3:")], notes
    with open_node_db(loc["s3"]) as db:
        assert db.state().position == fork + 1  # the new root's first tick, kept
    write(a1, {4: 40})
    write(b1, {103: 3000})
    for root in (a1, b1):
        tick(root)
    for part in "AB":
        pump(merge.merge_location(loc["s2"], part))
    tick(loc["s2"])
    pump(loc["s3"])
    union = sorted(rows(a1) + rows(b1))
    assert rows(loc["s2"]) == union
    assert rows(loc["s3"]) == union
    seen = audited(loc["s3"])
    twice = sorted({v for v in seen if seen.count(v) > 1})
    assert not twice, f"row versions applied twice at S3: {twice}; {notes}"
    assert {(1, 11), (2, 20), (3, 30), (102, 2000), (4, 40)} <= set(seen)
