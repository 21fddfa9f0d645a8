"""Cascade node services placed by the controller (``cascade-worker`` objects) on real node
agents: the agent running the branch's Spark worker is SIGKILLed mid-stream, the worker moves
to the standby agent, resumes from the position stored in the branch's database, and every event
arrives exactly once."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from baton.cascade.db import open_node_db
from baton.placement.records import create_object, make_object
from baton.store import open_store
from baton.testing.cascade import root_and_branch
from baton.testing.cluster import LocalCluster
from baton.testing.waiting import wait_for
from baton.testing.workload import run_workload

pytestmark = pytest.mark.cluster


async def _objects(url: str, loc: dict[str, str]) -> None:
    async with open_store(url) as store:
        for name, location in loc.items():
            obj = make_object("cascade-worker", name, 1, 2, spec={"location": location})
            await create_object(store, obj)


def _group(c: LocalCluster, name: str) -> dict[str, Any] | None:
    view = c.get("/v1/placement")
    if view is None:
        return None
    return next((g for g in view["groups"] if g["group"] == f"{name}/0"), None)


def test_worker_moves_when_its_agent_dies(tmp_path: Path) -> None:
    loc = root_and_branch(tmp_path)

    def position() -> int:
        with open_node_db(loc["s2"]) as db:
            return db.state().position

    with LocalCluster(3, None, tmp_path / "cluster", ttl=2, reconcile_interval=0.3) as c:
        c.wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=30)
        asyncio.run(_objects(c.store_url, loc))
        group = c.wait_for(lambda: (g := _group(c, "s2")) and g["state"] == "ok" and g, 60)
        wait_for(lambda: position() > 1, timeout=120, what="the branch worker to apply")
        stop = threading.Event()

        def writer() -> None:
            seed = 0
            while not stop.is_set():
                run_workload(tmp_path / "s1.db", 10, seed=seed)
                seed += 1
                time.sleep(0.1)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        time.sleep(2)
        # Its agent dies (if it is also the controller, a new controller first takes over).
        leader = group["leader"]
        c.kill(leader)
        moved = c.wait_for(
            lambda: (g := _group(c, "s2")) and g["leader"] not in (None, leader) and g, 60
        )
        assert moved["term"] > group["term"]
        before = position()
        wait_for(lambda: position() > before, timeout=120, what="the moved worker to apply")
        stop.set()
        thread.join(30)
        with open_node_db(loc["s1"]) as root:
            wait_for(lambda: root.pending()[0] == 0, timeout=30)
            last = root.last_tick()
        assert last is not None
        wait_for(lambda: position() >= last.tick_id, timeout=120, what="s2 to catch up")
        with open_node_db(loc["s1"]) as root, open_node_db(loc["s2"]) as branch:
            assert branch.read_rows("accounts") == root.read_rows("accounts")
            assert branch.state().epoch == moved["term"]  # the new worker's epoch applied
            ids = [e.ev_id for e in branch.batch_events(1, last.tick_id)]
            assert ids == [e.ev_id for e in root.batch_events(1, last.tick_id)]
            assert len(ids) == len(set(ids)) > 100  # every event copied once, none lost
