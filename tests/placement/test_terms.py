"""Group terms never go backwards, on every store: the store's epoch counters, and the
controller's pass (decide, take terms, fenced write) through a drain, a deletion and a
re-creation of the object (issue 10: the re-created group got a term below its old one)."""

from __future__ import annotations

import asyncio

import pytest

from baton.errors import ConfigError
from baton.keys import group_terms
from baton.local.waiting import store_reachable
from baton.placement.controller import settle
from baton.placement.decide import NodeView, Observed
from baton.placement.records import (
    create_object,
    delete_object,
    make_object,
    read_drains,
    read_groups,
    read_objects,
    set_drain,
)
from baton.store import Lease, Store
from baton.testing import await_for
from tests.conftest import Backend

NODES = ("n0", "n1", "n2")


async def test_epoch_counters(store: Store) -> None:
    first = await store.next_epochs({"a": 0, "b": 0})
    assert set(first) == {"a", "b"}
    # The clock term: epochs are store-clock microseconds (or later).
    assert first["a"] >= int((await store.now() - 5) * 1_000_000)
    again = await store.next_epochs({"a": 0})
    assert again["a"] > first["a"]
    # A floor far ahead is honoured, and the counter continues above it.
    ahead = again["a"] + 10**9
    assert await store.next_epochs({"a": ahead}) == {"a": ahead}
    assert (await store.next_epochs({"a": 0}))["a"] == ahead + 1
    # Counters are their own namespace: a lease of the same name has its own epochs, and
    # taking counter epochs does not disturb a held lease.
    lease = await store.acquire("a", "h", 5)
    assert lease is not None and lease.epoch < ahead
    await store.next_epochs({"a": 0})
    assert (await store.renew("h", [lease]))["a"] is not None
    assert await store.next_epochs({}) == {}
    with pytest.raises(ConfigError, match="floor"):
        await store.next_epochs({"a": -1})
    with pytest.raises(ConfigError, match="epoch counter name"):
        await store.next_epochs({"": 0})


async def test_epoch_counters_of_concurrent_callers_are_distinct(backend: Backend) -> None:
    async with backend.open() as a, backend.open() as b:
        got = await asyncio.gather(
            *(s.next_epochs({"g": 0, f"own-{i}": 0}) for i, s in enumerate([a, b] * 10))
        )
    epochs = [x["g"] for x in got]
    assert len(set(epochs)) == len(epochs)


async def test_epoch_counter_increases_across_a_server_restart(backend: Backend) -> None:
    # Redis without persistence and a deleted SQLite file lose the counter: the clock term
    # still keeps the next epoch above the last (as for lease epochs).
    async with backend.open() as s:
        first = (await s.next_epochs({"g": 0}))["g"]
    backend.restart()
    async with backend.open() as s:
        await await_for(lambda: store_reachable(s), timeout=20, what="store back")
        assert (await s.next_epochs({"g": 0}))["g"] > first


async def _pass(store: Store, lease: Lease) -> dict[str, tuple[str | None, int]]:
    """One controller pass over the real store (nodes all live and reachable), and every
    group's (leader, term) after it."""
    groups = await read_groups(store)
    drains = await read_drains(store)
    nodes = {
        n: NodeView(n, f"{n}:1", 100, {}, frozenset({"counter"}), True, True, n in drains)
        for n in NODES
    }
    obs = Observed(
        objects=await read_objects(store),
        groups={k: g for k, (g, _) in groups.items()},
        nodes=nodes,
        reports={},
        controller_epoch=lease.epoch,
        now=await store.now(),
    )
    await settle(store, lease, obs, {k: v for k, (_, v) in groups.items()})
    return {k: (g.leader, g.term) for k, (g, _) in (await read_groups(store)).items()}


async def test_recreated_group_never_reuses_a_term(store: Store) -> None:
    lease = await store.acquire("controller", "ctl", 60)
    assert lease is not None
    await create_object(store, make_object("counter", "x", 3, 2))
    placed = await _pass(store, lease)
    assert set(placed) == {"x/0", "x/1", "x/2"} and all(t > 0 for _, t in placed.values())
    # Drain the node leading x/0: its leader moves and its term goes up.
    leader, term = placed["x/0"]
    assert leader is not None
    await set_drain(store, leader, True)
    moved = await _pass(store, lease)
    assert moved["x/0"][0] != leader and moved["x/0"][1] > term
    highest = {k: t for k, (_, t) in moved.items()}
    # Delete, undo the drain, create again: every group's term is above all it ever had.
    await delete_object(store, "x")
    assert await _pass(store, lease) == {}
    await set_drain(store, leader, False)
    await create_object(store, make_object("counter", "x", 3, 2))
    again = await _pass(store, lease)
    assert set(again) == set(highest)
    for key, (_, t) in again.items():
        assert t > highest[key], (key, t, highest[key])
    # The counter is where they came from, and stays ahead of every record.
    taken = await store.next_epochs({group_terms("x/0"): 0})
    assert taken[group_terms("x/0")] > again["x/0"][1]
