"""A node runs at most one leader of a group, whatever order its commands, resyncs and
demotions arrive in, and whatever of them is cancelled half-way.

Defect 15 of the fault campaign (docs/reliability.md): two workers of one cascade node, at one
epoch, ran in one agent for minutes, each applying batches the other then refused as out of
order, so the node's subscribers fell behind for good. The epoch fence cannot tell them apart;
the runner must never start the second one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from baton.cascade import commands, node_ops
from baton.cascade.model import Role
from baton.errors import CascadeError
from baton.keys import GROUPS, OBJECTS
from baton.local.waiting import await_for, wait_for
from baton.placement.model import GroupRecord, ObjectSpec
from baton.placement.records import dump
from baton.placement.runner import Runner
from baton.placement.workload import Workload, WorkloadContext
from baton.service.workload import CascadeWorker
from baton.store import Store, open_store
from baton.testing.workload import create_accounts


class LeaderOnly(Workload):
    """A type whose follower role does nothing (these tests are about leader roles)."""

    async def start_follower(self, leader: str, term: int) -> None:
        pass

    async def stop_follower(self) -> None:
        pass

    def commit_index(self) -> int:
        return 0


class Probe(LeaderOnly):
    """Counts the leader roles running across every instance of the type."""

    type_name = "probe"
    leading: ClassVar[set[int]] = set()
    created: ClassVar[int] = 0
    #: Set when a start begins (a test cancels its caller then, mid-start).
    starting: ClassVar[asyncio.Event | None] = None

    def __init__(self, ctx: WorkloadContext) -> None:
        super().__init__(ctx)
        Probe.created += 1

    async def start_leader(self, term: int) -> None:
        if Probe.starting is not None:
            Probe.starting.set()
        await asyncio.sleep(0.01)  # a start takes a while: others get to run meanwhile
        Probe.leading.add(id(self))

    async def stop_leader(self) -> None:
        await asyncio.sleep(0.01)
        Probe.leading.discard(id(self))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    # The races are the runner's own: one backend shows them.
    async with open_store(f"sqlite://{tmp_path / 'store.db'}") as s:
        yield s


async def _no_fetch(node: str, group: str, request: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError("a leader fetches nothing")


async def _place(store: Store, members: tuple[str, ...], leader: str | None, term: int) -> None:
    await store.put(OBJECTS + "p", dump(ObjectSpec(name="p", type="probe")))
    group = GroupRecord(
        object="p", type="probe", partition=0, members=members, leader=leader, term=term,
        state="placing",
    )  # fmt: skip
    await store.put(GROUPS + group.key, dump(group))


async def test_concurrent_syncs_start_one_leader(store: Store, tmp_path: Path) -> None:
    """A controller command, a resync after a membership lapse and a retried command may all
    converge one group at once; before the fix each created its own member, and the one left
    out of the runner's table led on, unstopped, beside the other."""
    Probe.leading.clear()
    Probe.created = 0
    runner = Runner(
        "a", store, data_dir=tmp_path, types={"probe": Probe}, fetch=_no_fetch,
        may_lead=lambda: True,
    )  # fmt: skip
    try:
        await _place(store, ("a", "b"), "a", 7)
        await asyncio.gather(*(runner.sync(["p/0"]) for _ in range(4)))
        assert Probe.created == 1
        assert len(Probe.leading) == 1
        # Removed from the group while others converge it: nothing leads here afterwards.
        await _place(store, ("b",), "b", 8)
        await asyncio.gather(runner.sync(["p/0"]), runner.resync_all(), runner.sync(["p/0"]))
        assert Probe.leading == set()
        await _place(store, ("a", "b"), "a", 9)
        await asyncio.gather(runner.resync_all(), runner.sync(["p/0"]), runner.sync(["p/0"]))
        assert len(Probe.leading) == 1
    finally:
        await runner.close()
    assert Probe.leading == set()  # no leader outlives the runner: none was lost track of


async def test_a_cancelled_sync_still_converges(store: Store, tmp_path: Path) -> None:
    """A command whose HTTP request is given up (the controller's timeout) is cancelled; the
    convergence it began goes on to the end, so the member's role says what runs."""
    Probe.leading.clear()
    Probe.starting = asyncio.Event()
    runner = Runner(
        "a", store, data_dir=tmp_path, types={"probe": Probe}, fetch=_no_fetch,
        may_lead=lambda: True,
    )  # fmt: skip
    try:
        await _place(store, ("a",), "a", 3)
        task = asyncio.ensure_future(runner.sync(["p/0"]))
        # Cancelled inside start_leader: this wakes before the start's own 10 ms timer, however
        # loaded the machine (ready callbacks run before due timers).
        await asyncio.wait_for(Probe.starting.wait(), timeout=10)
        assert not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # The convergence goes on after its caller is gone: wait for it to record a role.
        await await_for(lambda: runner.report()[0]["role"] != "none", timeout=10)
        (row,) = runner.report()
        assert (row["role"], len(Probe.leading)) == ("leader", 1)
    finally:
        Probe.starting = None
        await runner.close()
    assert Probe.leading == set()


def _leaf(tmp_path: Path) -> str:
    root, leaf = tmp_path / "s1.db", tmp_path / "s2.db"
    create_accounts(root)
    create_accounts(leaf)
    node_ops.create_root("s1", f"sqlite://{root}", "S")
    commands.create_subscriber(Role.LEAF, "s2", f"sqlite://{leaf}", "s1", f"sqlite://{root}")
    return f"sqlite://{leaf}"


async def test_a_cancelled_stop_never_revives_the_old_service(tmp_path: Path) -> None:
    """The service thread of a leadership whose stop was cancelled must still end: before the
    fix the next start cleared the halt flag the old thread shared, and it ran on beside the
    new one at the same epoch (defect 15)."""
    location = _leaf(tmp_path)
    gate = threading.Event()
    first = threading.Event()

    def spark() -> Any:
        # The first service is busy building its Spark session (slow, on a loaded host) when
        # its leadership ends; no session is ever made here (the step fails, and is retried).
        if not first.is_set():
            first.set()
            gate.wait(30)
        raise CascadeError("no Spark in this test")

    obj = ObjectSpec(name="s2", type="cascade-worker", spec={"location": location})
    ctx = WorkloadContext(obj, 0, "s2/0", "a", tmp_path, _no_fetch, spark)
    worker = CascadeWorker(ctx)
    try:
        await worker.start_leader(1)
        old = worker._thread
        assert old is not None
        await asyncio.to_thread(wait_for, first.is_set, timeout=30, what="the first step")
        stopping = asyncio.ensure_future(worker.stop_leader())
        await asyncio.sleep(0)  # it is now joining the busy thread
        stopping.cancel()
        await asyncio.gather(stopping, return_exceptions=True)
        # The next leadership starts while the old thread is still busy; once that thread is
        # free it must see its own stop (the new start waits for it to end).
        starting = asyncio.ensure_future(worker.start_leader(2))
        await asyncio.sleep(0.05)
        gate.set()
        await starting
        await asyncio.to_thread(
            wait_for, lambda: not old.is_alive(), timeout=20, what="the old service to end"
        )
        new = worker._thread
        assert new is not None and new.is_alive()
    finally:
        gate.set()
        await worker.close()


class Slow(LeaderOnly):
    """Leads until stopped; stopping group ``slow/0`` waits for :attr:`gate`."""

    type_name = "slow"
    leading: ClassVar[set[str]] = set()
    gate: ClassVar[asyncio.Event]

    async def start_leader(self, term: int) -> None:
        Slow.leading.add(self.ctx.group)

    async def stop_leader(self) -> None:
        if self.ctx.group == "slow/0":
            await Slow.gate.wait()
        Slow.leading.discard(self.ctx.group)


async def _place_slow(store: Store, name: str, leader: str, term: int) -> None:
    await store.put(OBJECTS + name, dump(ObjectSpec(name=name, type="slow")))
    group = GroupRecord(
        object=name, type="slow", partition=0, members=("a", "b"), leader=leader, term=term,
        state="placing",
    )  # fmt: skip
    await store.put(GROUPS + group.key, dump(group))


async def test_one_slow_demotion_holds_back_no_other(store: Store, tmp_path: Path) -> None:
    """Deposed in the store, each group's leader role stops at once, even while another
    group's stop is slow: before the fix the watch awaited each demotion in turn, and a node
    the controller could not reach led on at a stale term for as long as the slow stop took."""
    Slow.leading.clear()
    Slow.gate = asyncio.Event()
    runner = Runner(
        "a", store, data_dir=tmp_path, types={"slow": Slow}, fetch=_no_fetch,
        may_lead=lambda: True,
    )  # fmt: skip
    watch = asyncio.ensure_future(runner.watch_demotions())
    try:
        for name in ("slow", "fast"):
            await _place_slow(store, name, "a", 1)
        await runner.sync(["slow/0", "fast/0"])
        assert Slow.leading == {"slow/0", "fast/0"}
        await _place_slow(store, "slow", "b", 2)  # its stop now waits for the gate
        await _place_slow(store, "fast", "b", 2)
        await await_for(lambda: "fast/0" not in Slow.leading, timeout=10)
        assert "slow/0" in Slow.leading  # still stopping
        Slow.gate.set()
        await await_for(lambda: not Slow.leading, timeout=10)
        assert {row["group"]: row["role"] for row in runner.report()} == {
            "fast/0": "none",
            "slow/0": "none",
        }
    finally:
        Slow.gate.set()
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await runner.close()
