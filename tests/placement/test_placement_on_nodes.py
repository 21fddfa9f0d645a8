"""Placement with real node processes: balance, node loss with data-aware leader transfer,
restart and drain with minimal moves, a paused controller changing nothing, and seed 001's
false-positive guard under a real (nftables) partition."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from baton.keys import GROUPS, NODES, OBJECTS
from baton.local.cluster import LocalCluster
from baton.placement.records import (
    ObjectSpec,
    create_object,
    delete_object,
    dump,
    make_object,
    parse_group,
    set_drain,
)
from baton.store import ChangeKind, open_store
from baton.testing.network import Firewall
from tests.conftest import Backend

pytestmark = pytest.mark.cluster

TYPES = ("counter", "gauge", "meter")
#: Two more types for the test, both the built-in counter under other names.
WORKLOADS = "gauge=baton.placement.workload:Counter,meter=baton.placement.workload:Counter"
TTL = 2.0
RECONCILE = 0.3


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _create(url: str, objects: list[tuple[str, str, int]]) -> None:
    async with open_store(url) as store:
        for type_, name, replicas in objects:
            obj = make_object(type_, name, 1, replicas, spec={"interval": 0.5})
            await create_object(store, obj)


async def _types(url: str, node: str) -> list[str]:
    """The workload types ``node``'s published record says it runs."""
    async with open_store(url) as store:
        rec = await store.get(NODES + node)
    if rec is None:
        return []
    types = json.loads(rec.value).get("types", [])
    return [str(t) for t in types]


async def _drain(url: str, node: str, on: bool) -> None:
    async with open_store(url) as store:
        await set_drain(store, node, on)


def placement(c: LocalCluster) -> dict[str, Any]:
    view = c.get("/v1/placement")
    assert view is not None
    return view


def members(view: dict[str, Any]) -> dict[str, set[str]]:
    return {g["group"]: set(g["members"]) for g in view["groups"]}


def moves(before: dict[str, set[str]], after: dict[str, set[str]]) -> int:
    return sum(len(after[k] - before.get(k, set())) for k in after)


def settled(c: LocalCluster, groups: int, per_type: dict[str, int] | None = None) -> Any:
    """The placement view once every group is ok (and, if given, each node has exactly
    ``per_type[node]`` members of every type)."""
    view = c.get("/v1/placement")
    if view is None or len(view["groups"]) != groups:
        return None
    if any(g["state"] != "ok" for g in view["groups"]):
        return None
    if per_type is not None:
        for node, want in per_type.items():
            got = view["per_node"].get(node, {})
            if any(got.get(t, 0) != want for t in TYPES):
                return None
        if set(view["per_node"]) - set(per_type):
            return None
    return view


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    env = {"BATON_WORKLOADS": WORKLOADS}
    with LocalCluster(5, None, tmp_path, ttl=TTL, reconcile_interval=RECONCILE, env=env) as c:
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 5, timeout=30)
        yield c


def test_balance_node_loss_restart_and_drain(cluster: LocalCluster) -> None:
    c = cluster
    ctl, _ = c.wait_for(c.controller)
    run(_create(c.store_url, [(t, f"{t}-{i}", 2) for t in TYPES for i in range(20)]))
    # 60 objects x 2 replicas: 40 members per type over 5 nodes = 8 of each type per node.
    every = {n: 8 for n in c.nodes}
    view = c.wait_for(lambda: settled(c, 60, every), timeout=60)
    before = members(view)
    leaders = {g["group"]: g["leader"] for g in view["groups"]}
    assert len({v for v in leaders.values()}) == 5  # leadership is spread too
    metrics = c.node(ctl).get("/metrics").text
    assert all(f'baton_placement_members{{node="{n}",type="{t}"}} 8.0' in metrics
               for n in c.nodes for t in TYPES)  # fmt: skip

    # Kill a node that is not the controller: its members move (minimal moves) and the groups
    # it led get the member with the highest commit index as leader.
    victim = next(n for n in sorted(c.nodes) if n != ctl)
    lost = {k for k, m in before.items() if victim in m}
    led = {k for k, v in leaders.items() if v == victim}
    assert len(lost) == 24 and led
    killed = time.monotonic()
    c.kill(victim)
    rest = {n: 10 for n in c.nodes if n != victim}  # 40 per type over 4 nodes
    view = c.wait_for(lambda: settled(c, 60, rest), timeout=60)
    # Leadership came back within ttl + the stream-liveness window + reconcile passes (slack
    # for a loaded 2-core machine); the benchmark measures it precisely.
    assert time.monotonic() - killed < TTL + 1.25 + 3 * RECONCILE + 5
    after = members(view)
    assert moves(before, after) == len(lost)  # exactly the members of the lost node
    for g in view["groups"]:
        if g["group"] in led:
            t = g["transfer"]
            assert t is not None and t["previous"] == victim and g["leader"] == t["chosen"]
            assert t["commit_indices"], g
            assert t["commit_indices"][g["leader"]] == max(t["commit_indices"].values())

    metrics = c.node(ctl).get("/metrics").text
    assert _metric(metrics, "baton_leader_transfers_total") >= len(led)
    assert _metric(metrics, "baton_placement_moves_total") >= 120 + len(lost)

    # Restart it: rebalanced with exactly what balance needs (8 per type back onto it).
    c.restart(victim)
    view = c.wait_for(lambda: settled(c, 60, every), timeout=60)
    assert moves(after, members(view)) == 24
    again = members(view)

    # Drain it: emptied, the others take its members evenly; undo: rebalanced back.
    run(_drain(c.store_url, victim, True))
    view = c.wait_for(lambda: settled(c, 60, rest), timeout=60)
    assert victim not in view["per_node"] and victim in view["draining"]
    assert moves(again, members(view)) == 24
    run(_drain(c.store_url, victim, False))
    c.wait_for(lambda: settled(c, 60, every), timeout=60)


async def _group_writes_since(url: str, since: str) -> list[int]:
    """controller_epoch of every group write after ``since``."""
    out: list[int] = []
    async with open_store(url) as store:
        head = await store.head()

        async def collect() -> None:
            async for ch in store.watch(GROUPS, since=since):
                if ch.kind is ChangeKind.PUT and ch.value is not None:
                    out.append(parse_group(ch.value).controller_epoch)
                if ch.position == head:
                    return

        if head != since:
            await asyncio.wait_for(collect(), 10)
    return out


async def _head(url: str) -> str:
    async with open_store(url) as store:
        return await store.head()


def test_paused_controller_changes_nothing(backend: Backend, tmp_path: Path) -> None:
    env = {"BATON_WORKLOADS": WORKLOADS}
    with LocalCluster(4, backend.url, tmp_path, TTL, reconcile_interval=RECONCILE, env=env) as c:
        _paused_controller(c)


def _paused_controller(c: LocalCluster) -> None:
    run(_create(c.store_url, [("counter", f"c{i}", 3) for i in range(6)]))
    c.wait_for(lambda: settled(c, 6), timeout=60)
    old, epoch = c.wait_for(c.controller)
    c.pause(old)
    new, epoch2 = c.wait_for(lambda: (ctl := c.controller()) and ctl[1] > epoch and ctl, timeout=20)
    # The new controller moves the paused node's members away (its membership lapsed).
    c.wait_for(lambda: old not in placement(c)["per_node"] and settled(c, 6), timeout=60)
    # The old controller's command, with its stale epoch, is refused and changes nothing (sent
    # while the cluster is settled, so nothing else changes the node's groups meanwhile).
    node = c.node(new)
    before = node.get("/v1/groups").json()
    res = httpx.post(
        f"{node.url}/v1/commands",
        json={
            "sender": old,
            "role": "controller",
            "epoch": epoch,
            "command": "sync",
            "groups": [g["group"] for g in before["groups"]],
        },
        headers={"authorization": f"Bearer {c.token}"},
        timeout=5,
    )
    assert res.status_code == 409
    assert [
        (g["group"], g["term"], g["role"]) for g in node.get("/v1/groups").json()["groups"]
    ] == [(g["group"], g["term"], g["role"]) for g in before["groups"]]
    # Resumed, the old controller learns it lost the role before it can write anything.
    mark = run(_head(c.store_url))
    c.resume(old)
    # It rejoins as a member and gets members back from the new controller's rebalance.
    c.wait_for(lambda: old in placement(c)["per_node"] and settled(c, 6), timeout=60)
    assert c.controller() == (new, epoch2)
    # Every group record written since the resume was written by the new controller.
    epochs = run(_group_writes_since(c.store_url, mark))
    assert epochs and all(e == epoch2 for e in epochs), epochs


def _blocked_group(c: LocalCluster, ctl: str) -> dict[str, Any] | None:
    """A settled group whose leader is not the controller."""
    view = settled(c, 6)
    if view is None:
        return None
    return next((g for g in view["groups"] if g["leader"] != ctl), None)


def test_false_positive_guard_under_partition(tmp_path: Path) -> None:
    with (
        Firewall() as fw,
        LocalCluster(
            3, None, tmp_path, ttl=TTL, reconcile_interval=RECONCILE, distinct_hosts=True
        ) as c,
    ):
        ctl, _ = c.wait_for(c.controller)
        # Every node live before the objects exist: placed while only the controller had
        # joined, every group would keep the controller as its leader, and no group would be
        # left to cut off from it (a CI run on a slow machine timed out that way).
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
        run(_create(c.store_url, [("counter", f"g{i}", 3) for i in range(6)]))
        group = c.wait_for(lambda: _blocked_group(c, ctl), timeout=60)
        leader = c.node(group["leader"])
        # The controller cannot reach the leader; the members still can (and still stream).
        fw.block(c.node(ctl).host, leader.host, leader.port)
        cut = {ctl}

        def in_failure() -> dict[str, Any] | None:
            # On a loaded machine the controller role may move (ttl 2 s): the partition follows
            # it, so that the controller, whoever it is, cannot reach the leader (seen in a
            # fresh-clone run: the group never entered failure).
            now = c.controller()
            if now is not None and now[0] not in cut and now[0] != leader.id:
                fw.block(c.node(now[0]).host, leader.host, leader.port)
                cut.add(now[0])
            g = next(x for x in placement(c)["groups"] if x["group"] == group["group"])
            return g if g["state"] == "failure" else None

        g = c.wait_for(in_failure, timeout=30)
        assert "still stream" in g["detail"]
        ctl = (c.controller() or (ctl, 0))[0]
        led = sum(1 for x in placement(c)["groups"] if x["leader"] == group["leader"])
        gauge = "baton_groups_in_failure_reconciliation"
        c.wait_for(lambda: _metric(c.node(ctl).get("/metrics").text, gauge) == led, timeout=30)
        # Several more passes: still no deposition.
        passes_before = _reconcile_count(c, ctl)
        c.wait_for(lambda: _reconcile_count(c, ctl) >= passes_before + 5, timeout=30)
        g = next(x for x in placement(c)["groups"] if x["group"] == group["group"])
        assert (g["leader"], g["term"]) == (group["leader"], group["term"])
        # Healed: back to ok with the same leader.
        fw.heal()
        c.wait_for(lambda: settled(c, 6), timeout=30)
        g = next(x for x in placement(c)["groups"] if x["group"] == group["group"])
        assert (g["leader"], g["term"]) == (group["leader"], group["term"])

        # A real failure of the same kind: nobody reaches the leader's API any more (its
        # membership lease is still live). The members report no stream: it is deposed.
        for other in c.nodes.values():
            if other.id != leader.id:
                fw.block(other.host, leader.host, leader.port)
        g = c.wait_for(
            lambda: (
                (x := next(y for y in placement(c)["groups"] if y["group"] == group["group"]))
                and x["leader"] != group["leader"]
                and x
            ),
            timeout=30,
        )
        assert g["term"] > group["term"]
        assert "no stream" in g["transfer"]["reason"]

        # The deposed leader still reaches the store: it stops leading at once, although no
        # command can reach it.
        def demoted() -> bool:
            rows = leader.get("/v1/groups").json()["groups"]
            return all(r["role"] != "leader" for r in rows if r["group"] == group["group"])

        c.wait_for(demoted, timeout=10)


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {name}")


def _reconcile_count(c: LocalCluster, node: str) -> float:
    for line in c.node(node).get("/metrics").text.splitlines():
        if line.startswith("baton_reconcile_seconds_count"):
            return float(line.split()[-1])
    return 0.0


def test_types_only_where_they_run(tmp_path: Path) -> None:
    # Only n0 runs the "gauge" type: every gauge member lands there; the counter spreads.
    with LocalCluster(3, None, tmp_path, ttl=TTL, reconcile_interval=RECONCILE) as c:
        c.node("n0").env["BATON_WORKLOADS"] = "gauge=baton.placement.workload:Counter"
        c.restart("n0")
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
        # Leaderships are chosen when a group is placed and never rebalanced afterwards: were
        # the objects created before n0's restarted record lists gauge, the counter's group
        # alone would be placed first and led by n0 (fewest leaderships, then node id), and
        # n0 would later lead the gauge's group as well.
        c.wait_for(lambda: "gauge" in run(_types(c.store_url, "n0")), timeout=30)
        run(_create(c.store_url, [("gauge", "gg", 1), ("counter", "cc", 3)]))
        view = c.wait_for(lambda: settled(c, 2), timeout=60)
        per = {g["group"]: g["members"] for g in view["groups"]}
        assert per["gg/0"] == ["n0"]
        assert sorted(per["cc/0"]) == ["n0", "n1", "n2"]

        def spread() -> Any:
            # The groups are ok before the controller's next pass moves a leadership to spread
            # them (CI saw n0 lead both for a moment): wait for that pass.
            v = settled(c, 2)
            return v if v and Counter(v["leaders"].values()) == Counter({1: 2}) else None

        view = c.wait_for(spread, timeout=60)
        assert Counter(view["leaders"].values()) == Counter({1: 2})


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three nodes shared by the short tests below (each uses objects of its own)."""
    path = tmp_path_factory.mktemp("trio")
    with LocalCluster(3, None, path, ttl=TTL, reconcile_interval=RECONCILE) as c:
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
        yield c


def groups_of(c: LocalCluster, name: str) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in placement(c)["groups"] if g["group"].startswith(name + "/")}


def ok_groups(c: LocalCluster, name: str, n: int) -> dict[str, dict[str, Any]] | None:
    groups = groups_of(c, name)
    return groups if len(groups) == n and all(g["state"] == "ok" for g in groups.values()) else None


async def _create_one(url: str, obj: ObjectSpec, *, unchecked: bool = False) -> None:
    async with open_store(url) as store:
        if unchecked:  # as a baton without the spec check (or a hand edit) would have stored it
            await store.put(OBJECTS + obj.name, dump(obj))
        else:
            await create_object(store, obj)


async def _delete(url: str, name: str) -> None:
    async with open_store(url) as store:
        await delete_object(store, name)


def test_recreated_object_never_reuses_a_term(trio: LocalCluster) -> None:
    # Issue 10: drain moved a leader (term E -> E+1); the object deleted and created again got
    # term E back, so a paused leader of the old incarnation would have won fenced writes.
    c = trio
    run(_create_one(c.store_url, make_object("counter", "x", 3, 2)))
    first = c.wait_for(lambda: ok_groups(c, "x", 3), timeout=30)
    leader = first["x/0"]["leader"]
    run(_drain(c.store_url, leader, True))
    try:
        moved = c.wait_for(
            lambda: (g := ok_groups(c, "x", 3)) and g["x/0"]["leader"] != leader and g, timeout=30
        )
        assert moved["x/0"]["term"] > first["x/0"]["term"]
        run(_delete(c.store_url, "x"))
        c.wait_for(lambda: not groups_of(c, "x"), timeout=30)
    finally:
        run(_drain(c.store_url, leader, False))
    run(_create_one(c.store_url, make_object("counter", "x", 3, 2)))
    again = c.wait_for(lambda: ok_groups(c, "x", 3), timeout=30)
    for key, g in again.items():
        assert g["term"] > moved[key]["term"], (key, g["term"], moved[key]["term"])
    run(_delete(c.store_url, "x"))


def test_a_member_that_cannot_run_is_isolated(trio: LocalCluster) -> None:
    # Issue 10: an object whose spec its type cannot use made every sync naming it fail with a
    # 500, and kept every object placed after it on the same nodes waiting.
    c = trio
    bad = ObjectSpec(name="bad", type="counter", replicas=3, spec={"interval": "fast"})
    run(_create_one(c.store_url, bad, unchecked=True))
    run(_create_one(c.store_url, make_object("counter", "good", 1, 3)))
    c.wait_for(lambda: ok_groups(c, "good", 1), timeout=30)
    failed = c.wait_for(
        lambda: (g := groups_of(c, "bad").get("bad/0")) and g["state"] == "error" and g,
        timeout=30,
    )
    assert "counter spec.interval: Input should be a valid number" in failed["detail"]
    assert {f["group"] for f in placement(c)["errors"]} == {"bad/0"}
    ctl, epoch = c.wait_for(c.controller)
    node = c.node(ctl)
    # Set at the end of the pass that wrote the state: wait for it.
    c.wait_for(lambda: _metric(node.get("/metrics").text, "baton_groups_in_error") == 1, timeout=30)
    res = httpx.post(
        f"{node.url}/v1/commands",
        json={
            "sender": ctl,
            "role": "controller",
            "epoch": epoch,
            "command": "sync",
            "groups": ["bad/0", "good/0"],
        },
        headers={"authorization": f"Bearer {c.token}"},
        timeout=5,
    )
    assert res.status_code == 422, res.text
    assert list(res.json()["failed"]) == ["bad/0"]
    run(_delete(c.store_url, "bad"))
    c.wait_for(lambda: not groups_of(c, "bad"), timeout=30)
    c.wait_for(lambda: _metric(node.get("/metrics").text, "baton_groups_in_error") == 0, timeout=30)
    for n in c.nodes:
        log = (c.data_dir / f"{n}.log").read_text()
        assert "Exception in ASGI application" not in log and "request failed" not in log
    run(_delete(c.store_url, "good"))


async def _record(url: str, key: str, value: bytes | None = None) -> bytes:
    """The raw group record of ``key`` (after writing ``value`` over it, if given)."""
    async with open_store(url) as store:
        if value is not None:
            await store.put(GROUPS + key, value)
        rec = await store.get(GROUPS + key)
        assert rec is not None
        return rec.value


def test_a_group_record_that_went_back_gets_a_new_term(trio: LocalCluster) -> None:
    # The fault campaign (seed 1, round 3): a store failover lost the latest writes, so a group
    # record went back to an older term; members never take a lower term than they ran, so the
    # group waited for ever with its leader idle. The controller now gives it a term above what
    # its members report.
    c = trio
    run(_create_one(c.store_url, make_object("counter", "y", 1, 2)))
    first = c.wait_for(lambda: ok_groups(c, "y", 1), timeout=30)["y/0"]
    old = run(_record(c.store_url, "y/0"))
    leader = first["leader"]
    run(_drain(c.store_url, leader, True))
    try:
        moved = c.wait_for(
            lambda: (g := ok_groups(c, "y", 1)) and g["y/0"]["leader"] != leader and g["y/0"],
            timeout=30,
        )
    finally:
        run(_drain(c.store_url, leader, False))
    assert moved["term"] > first["term"]
    # The store loses what was written since: the record is the first one again.
    run(_record(c.store_url, "y/0", old))
    again = c.wait_for(
        lambda: (g := ok_groups(c, "y", 1)) and g["y/0"]["term"] > moved["term"] and g["y/0"],
        timeout=30,
    )
    assert again["leader"] is not None
    ctl, _ = c.wait_for(c.controller)
    log = (c.data_dir / f"{ctl}.log").read_text()
    assert "group record behind its members" in log
    run(_delete(c.store_url, "y"))
