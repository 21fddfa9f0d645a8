"""Automatic failover's actor (:mod:`baton.service.auto_failover`), its view of the cluster
(:mod:`baton.service.auto_view`) and the members' reach probe (:mod:`baton.service.reach`),
in process, on a real SQLite store kept on a manual clock and real SQLite node databases, no
Spark (a worker's apply is done by hand, as the workers would).

Set S: s1 root (served by agent a) -> s2 branch (agent b) -> s3 leaf (agent c), each a
``cascade-worker`` object whose group the test writes as the controller would."""

from __future__ import annotations

import json
import logging
import subprocess
from collections.abc import AsyncIterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from baton.cascade import auto_switch, commands, node_ops
from baton.cascade.beat import Beat, Phase
from baton.cascade.beat import write as write_beat
from baton.cascade.db import open_node_db
from baton.cascade.member_setting import Copy
from baton.cascade.model import Role
from baton.errors import CascadeError, StaleEpoch
from baton.keys import group_record, member
from baton.lease.election import Term
from baton.lease.timings import Timings
from baton.placement.model import GroupRecord, dump
from baton.placement.records import create_object, make_object
from baton.service.auto_failover import AutoFailover
from baton.service.auto_view import read_cluster
from baton.service.reach import QUIET_AFTER, Prober, Reach, probe, report
from baton.store.sqlite import SQLiteStore
from baton.testing import ManualClock
from baton.testing.workload import create_accounts
from tests.cascade.test_root_writer import catch_up, tick
from tests.test_cli import BATON

SLOW = Timings(
    ttl=30.0,
    renew_interval=6.0,
    renew_deadline=20.0,
    request_timeout=5.0,
    election_timeout_min=0.5,
    election_timeout_max=1.5,
)
AGENTS = {"s1": "a", "s2": "b", "s3": "c"}


@dataclass
class World:
    clock: ManualClock
    store: SQLiteStore
    loc: dict[str, str]
    actor: AutoFailover
    registry: CollectorRegistry
    term: Term

    async def live(self, *agents: str) -> None:
        for agent in agents:
            assert await self.store.acquire(member(agent), agent, SLOW.ttl) is not None

    async def reach(self, node: str, reaches: bool) -> None:
        await report(self.store, Reach("S", node, "s1", reaches), None)

    def role(self, node: str) -> Role:
        with open_node_db(self.loc[node], readonly=True) as db:
            return db.state().role

    def count(self, outcome: str) -> float:
        got = self.registry.get_sample_value(
            "baton_cascade_auto_failovers_total", {"set": "S", "outcome": outcome}
        )
        return got or 0.0


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    loc = {n: f"sqlite://{tmp_path / n}.db" for n in AGENTS}
    for n in loc:
        create_accounts(tmp_path / f"{n}.db")
    commands.create_root("s1", loc["s1"], "S")
    commands.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    commands.create_subscriber(Role.LEAF, "s3", loc["s3"], "s2", loc["s1"])
    commands.add_table(loc["s1"], "accounts", None, True)
    node_ops.copy_table(loc["s2"], "accounts")
    node_ops.copy_table(loc["s3"], "accounts")
    with open_node_db(loc["s1"]) as db, db.transaction() as cur:
        cur.execute("INSERT INTO accounts (id, balance) VALUES (1, 10)")
    tick(loc["s1"])
    catch_up(loc["s2"])
    catch_up(loc["s3"])
    clock = ManualClock()
    store = SQLiteStore(str(tmp_path / "store.db"), clock=clock.time)
    clock.wait_on(lambda: store.in_flight > 0)
    await store.connect()
    for node, agent in AGENTS.items():
        spec = {"location": loc[node]}
        await create_object(store, make_object("cascade-worker", f"w-{node}", 1, 1, spec=spec))
        group = GroupRecord(object=f"w-{node}", type="cascade-worker", partition=0,
                            members=(agent,), leader=agent, term=1, state="ok")  # fmt: skip
        await store.put(group_record(group.key), dump(group))
    registry = CollectorRegistry()
    actor = AutoFailover(store, "x", SLOW, registry=registry, clock=clock)
    await actor.election.start()
    try:
        await clock.run_until(lambda: actor.election.is_leader, limit=10)
        term = actor.election.term
        assert term is not None
        yield World(clock, store, loc, actor, registry, term)
    finally:
        await actor.election.stop()
        await store.close()


async def test_off_nothing_on_waits_for_the_members_then_fails_over(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    w = world
    await w.live("b", "c")  # agent a (the root's) holds no membership: s1 is lost
    assert await w.actor.pass_once(w.term) == []  # off by default: the set is not looked at
    commands.auto_failover(w.loc["s3"], "S", True)
    # The members still reach the root (a controller cut off from it alone): nothing happens.
    await w.reach("s2", True)
    await w.reach("s3", True)
    (out,) = await w.actor.pass_once(w.term)
    assert out.decision.action == "wait" and "do not agree" in out.decision.reason
    assert w.role("s1") is Role.ROOT and w.count("done") == 0
    # They agree it is lost: s2 (the only branch) is promoted, once.
    await w.reach("s2", False)
    await w.reach("s3", False)
    caplog.set_level(logging.INFO, "baton.cascade")
    (out,) = await w.actor.pass_once(w.term)
    assert (out.decision.action, out.promoted, out.refused) == ("failover", "s2", "")
    assert w.role("s2") is Role.ROOT and w.count("done") == 1
    with open_node_db(w.loc["s3"], readonly=True) as db:
        assert db.state().provider == "s2" and db.nodes()["s1"][1] is True
    (line,) = [r for r in caplog.records if r.getMessage() == "auto-failover decision"][-1:]
    fields = vars(line)
    assert fields["action"] == "failover" and fields["promoted"] == "s2"
    assert fields["epoch"] == w.term.epoch and {"observed_s", "lost_for_s", "failover_s"} <= set(
        fields
    )
    # The next pass finds s2 the served root: nothing more.
    (out,) = await w.actor.pass_once(w.term)
    assert out.decision.action == "nothing" and w.count("done") == 1


async def test_a_stale_epoch_is_refused_and_changes_nothing(world: World) -> None:
    w = world
    await w.live("b", "c")
    commands.auto_failover(w.loc["s2"], "S", True)
    await w.reach("s2", False)
    await w.reach("s3", False)
    # A newer actor fenced the members already: this one's failover is refused.
    c = commands.open_set(w.loc["s2"])
    auto_switch.fence(c, w.term.epoch + 1)
    with pytest.raises(StaleEpoch):
        auto_switch.fence(c, w.term.epoch)
    (out,) = await w.actor.pass_once(w.term)
    assert out.decision.action == "failover" and out.promoted is None
    assert "epoch" in out.refused and w.count("refused") == 1
    assert w.role("s1") is Role.ROOT and w.role("s2") is Role.BRANCH


async def test_a_deposed_actor_changes_nothing(world: World) -> None:
    w = world
    await w.live("b", "c")
    commands.auto_failover(w.loc["s2"], "S", True)
    await w.reach("s2", False)
    await w.reach("s3", False)
    await w.actor.election.stop()  # resigned: its term is over
    (out,) = await w.actor.pass_once(w.term)
    assert out.decision.action == "failover" and out.promoted is None and out.refused
    assert w.role("s1") is Role.ROOT and w.count("refused") == 1
    assert await w.store.get("auto-failover/S") is None


async def test_the_root_placed_with_a_live_standby_is_not_lost(world: World) -> None:
    w = world
    # s1's group has a standby on b, which holds its membership: placement moves the
    # leadership there; a failover is not the answer.
    group = GroupRecord(object="w-s1", type="cascade-worker", partition=0,
                        members=("a", "b"), leader="a", term=1, state="ok")  # fmt: skip
    await w.store.put(group_record(group.key), dump(group))
    await w.live("b", "c")
    commands.auto_failover(w.loc["s2"], "S", True)
    await w.reach("s2", False)
    await w.reach("s3", False)
    (out,) = await w.actor.pass_once(w.term)
    assert out.decision.action == "wait" and "not lost" in out.decision.reason
    assert w.role("s1") is Role.ROOT


async def test_the_probe_and_its_reports(world: World) -> None:
    w = world
    now = w.clock.time()
    assert probe(w.loc["s1"], now) is None  # the root reports on nothing
    found = probe(w.loc["s3"], now)  # up s2 to s1, which nothing serves
    assert found is not None and (found.node, found.root, found.reaches) == ("s3", "s1", False)
    with open_node_db(w.loc["s1"]) as db:
        write_beat(db, Beat("h:1", 1, now, Phase.TICKING))
    found = probe(w.loc["s3"], now)
    assert found is not None and found.reaches and found.root == "s1"
    gone = Reach("S", "s3", "s1", False, "s1 is not served", w.loc["s3"])
    assert probe(w.loc["s3"], now + 60) == gone
    # Three missed beats are enough for the guard (status waits ten before it says silent).
    assert probe(w.loc["s3"], now + QUIET_AFTER - 0.1) == found
    assert probe(w.loc["s3"], now + QUIET_AFTER + 0.1) == gone
    # Reported under the host's membership, with the store's time; fresh for a while only.
    held = await w.store.acquire(member("c"), "c", SLOW.ttl)
    prober = Prober(w.store, lambda: [w.loc["s1"], w.loc["s3"]], lambda: held, clock=w.clock)
    assert [r.node for r in await prober.once()] == ["s3"]
    assert (await read_cluster(w.store)).reaches == {"S/s3": True}
    await w.clock.run_for(10, step=0.5)
    assert (await read_cluster(w.store)).reaches == {}
    # No membership, no report.
    assert await Prober(w.store, lambda: [w.loc["s3"]], lambda: None).once() == []


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BATON, "cascade", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_switch_through_the_cli(tmp_path: Path) -> None:
    loc = {n: f"sqlite://{tmp_path / n}.db" for n in ("s1", "s3", "s2")}
    for n in loc:
        create_accounts(tmp_path / f"{n}.db")
    commands.create_root("s1", loc["s1"], "S")
    commands.create_subscriber(Role.LEAF, "s3", loc["s3"], "s1", loc["s1"])

    def switches() -> list[Copy[bool] | None]:
        out = []
        for location in loc.values():  # s2 is not a node yet: skipped
            with suppress(CascadeError), open_node_db(location, readonly=True) as db:
                out.append(auto_switch.SWITCH.read(db))
        return out

    # Bad input: one line, exit 2, nothing written anywhere.
    for args, says in (
        (["S", "on"], "set S has no branch to promote"),
        (["T", "on"], "no set 'T' at that member: it is in set S"),
    ):
        res = cli("auto-failover", *args, "--via", loc["s3"])
        assert res.returncode == 2 and res.stdout == "", res
        (line,) = res.stderr.splitlines()
        assert line.startswith(f"baton: error: {says}"), line
        assert switches() == [None, None]
    commands.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    res = cli("auto-failover", "S", "on", "--via", loc["s3"], "--json")
    assert res.returncode == 0 and json.loads(res.stdout) == {"set": "S", "on": True,
                                                             "missed": []}  # fmt: skip
    status = json.loads(cli("status", "--via", loc["s2"], "--json").stdout)
    assert status["auto_failover"] is True
    assert cli("auto-failover", "S", "off", "--via", loc["s1"]).stdout.splitlines() == [
        "set S: automatic failover off"
    ]
    assert not commands.status(loc["s2"]).auto_failover
