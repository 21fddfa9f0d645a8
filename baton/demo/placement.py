"""The placement part of ``baton demo``: objects spread over a local cluster, a node killed, its
members moved and the groups it led transferred to their most advanced member."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from baton.local.cluster import LocalCluster
from baton.placement.records import create_object, make_object
from baton.store import open_store

OBJECTS = 12
REPLICAS = 2


async def _create(url: str) -> None:
    async with open_store(url) as store:
        for i in range(OBJECTS):
            await create_object(store, make_object("counter", f"orders-{i}", 1, REPLICAS))


def _settled(cluster: LocalCluster, without: str | None = None) -> dict[str, Any] | None:
    view = cluster.get("/v1/placement")
    if view is None or len(view["groups"]) != OBJECTS:
        return None
    if any(g["state"] != "ok" for g in view["groups"]):
        return None
    if without is not None and without in view["per_node"]:
        return None
    return view


def _table(console: Console, view: dict[str, Any], title: str) -> None:
    table = Table("node", "members", "leads", title=title)
    for node, per in view["per_node"].items():
        table.add_row(node, str(sum(per.values())), str(view["leaders"].get(node, 0)))
    console.print(table)


def placement_part(
    console: Console,
    cluster: LocalCluster,
    controller: str,
    step: Callable[[str, float, str, bool], None],
) -> bool:
    """Create objects, kill a member node, show the moves and leader transfers."""
    console.rule("[bold]placement: objects, a node lost, leaders transferred by data")
    t0 = time.monotonic()
    asyncio.run(_create(cluster.store_url))
    view = cluster.wait_for(lambda: _settled(cluster), timeout=60)
    step(
        f"{OBJECTS} counter objects x {REPLICAS} replicas placed",
        time.monotonic() - t0,
        "members per node: "
        + ", ".join(f"{n}={sum(p.values())}" for n, p in view["per_node"].items()),
        True,
    )
    _table(console, view, "before")
    before = {g["group"]: g for g in view["groups"]}
    victim = next(n for n in sorted(view["per_node"]) if n != controller)
    led = sorted(k for k, g in before.items() if g["leader"] == victim)
    held = sum(victim in g["members"] for g in before.values())
    console.print(f"SIGKILL {victim}: it leads {len(led)} group(s) and holds {held} member(s)...")
    killed = time.monotonic()
    cluster.kill(victim)
    view = cluster.wait_for(lambda: _settled(cluster, without=victim), timeout=60)
    took = time.monotonic() - killed
    _table(console, view, "after")
    after = {g["group"]: g for g in view["groups"]}
    moved = sum(len(set(after[k]["members"]) - set(before[k]["members"])) for k in after)
    lost = sum(victim in g["members"] for g in before.values())
    best = True
    for key in led:
        t = after[key]["transfer"] or {}
        indices = t.get("commit_indices", {})
        best &= bool(indices) and indices.get(after[key]["leader"]) == max(indices.values())
        console.print(
            f"  {key}: leader {victim} -> {after[key]['leader']} (term {after[key]['term']}), "
            f"chosen from commit indices {indices}"
        )
    good = moved == lost and best
    step(
        "node lost: members moved, leaders transferred",
        took,
        f"{moved} member(s) moved (the {lost} it held, no more); {len(led)} leader(s) went to "
        "the member with the highest commit index",
        good,
    )
    return good
