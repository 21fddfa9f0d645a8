"""Benchmark 8: group leader recovery after a node is SIGKILLed.

A :class:`~baton.local.cluster.LocalCluster` of NODES ``baton node`` processes (ttl 2 s,
reconcile interval 0.3 s) runs OBJECTS built-in ``counter`` objects with REPLICAS members each
(copy interval 0.2 s). A trial waits until every group is ``ok``, waits a random 0-1 s,
SIGKILLs a random node that is not the controller and leads at least one group, and polls
``/v1/placement`` every 50 ms until

- **nominated**: every group the node led has another leader in its record, and
- **leading**: the new leader of each of those groups reports that it leads at the new term
  (the group has a working leader again), and
- **serving**: those groups are ``ok`` again: every member, including the replacement for the
  lost one (placed once the node's membership lapses, after the ttl), follows the new leader.

Then the node is restarted and the cluster rebalances before the next trial.

A killed node is suspect as soon as the controller's poll of it fails (connection refused), well
before its membership lapses; its leadership moves once a majority of each group's other
members report no live stream from it (seed 001's guard; the counter's window is
max(2.5 x interval, 0.5 s)). Replacing its members waits for the membership to lapse (ttl).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from baton.local.cluster import LocalCluster
from baton.placement.records import create_object, make_object
from baton.store import open_store
from bench.common import BenchError, Summary, backend_url, loadavg, temp_dir

TTL = 2.0
RECONCILE = 0.3
NODES = 5
OBJECTS = 30
REPLICAS = 3
POLL = 0.05


@dataclass
class GroupRecoveryResult:
    backend: str
    nodes: int
    groups: int
    replicas: int
    nominated: list[float] = field(default_factory=list)
    leading: list[float] = field(default_factory=list)
    serving: list[float] = field(default_factory=list)
    led: list[int] = field(default_factory=list)
    #: The node killed in each trial.
    victims: list[str] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)

    def summary(self, which: str) -> Summary:
        return Summary.of(getattr(self, which))


async def _create(url: str) -> None:
    async with open_store(url) as store:
        for i in range(OBJECTS):
            obj = make_object("counter", f"bench-{i}", 1, REPLICAS, spec={"interval": 0.2})
            await create_object(store, obj)


def _view(c: LocalCluster) -> dict[str, Any] | None:
    return c.get("/v1/placement")


def _all_ok(c: LocalCluster) -> dict[str, Any] | None:
    view = _view(c)
    if view is None or len(view["groups"]) != OBJECTS:
        return None
    if any(g["state"] != "ok" for g in view["groups"]):
        return None
    if len(view["per_node"]) != NODES:
        return None
    return view


def _leading(c: LocalCluster, groups: list[dict[str, Any]]) -> bool:
    """Every one of ``groups`` has its nominated leader reporting it leads at the new term."""
    for node in {g["leader"] for g in groups}:
        try:
            answer = c.node(node).get("/v1/groups").json()
        except Exception:
            return False
        running = {(r["group"], r["term"]) for r in answer["groups"] if r["role"] == "leader"}
        if any((g["group"], g["term"]) not in running for g in groups if g["leader"] == node):
            return False
    return True


def _trial(c: LocalCluster) -> tuple[str, int, tuple[float, float, float]]:
    """Kill one non-controller node; (victim, groups it led, (nominated, leading, serving))."""
    view = c.wait_for(lambda: _all_ok(c), timeout=120)
    ctl = c.wait_for(c.controller)[0]
    # A restarted node gets members back but no leadership, so a node may lead no group: such a
    # kill would time nothing.
    leaders = {g["leader"] for g in view["groups"]}
    candidates = [n for n in sorted(c.nodes) if n != ctl and n in leaders]
    if not candidates:
        raise BenchError(f"no node other than the controller {ctl} leads a group")
    victim = random.choice(candidates)
    led = {g["group"] for g in view["groups"] if g["leader"] == victim}
    time.sleep(random.uniform(0, 1))
    killed = time.monotonic()
    c.kill(victim)
    nominated: float | None = None
    leading: float | None = None
    while True:
        now_view = _view(c)
        now = time.monotonic() - killed
        if now_view is not None:
            mine = [g for g in now_view["groups"] if g["group"] in led]
            if nominated is None and all(g["leader"] != victim for g in mine):
                nominated = now
            if nominated is not None and leading is None and _leading(c, mine):
                leading = time.monotonic() - killed
            done = all(g["state"] == "ok" for g in mine)
            if leading is not None and nominated is not None and done:
                return victim, len(led), (nominated, leading, now)
        if now > 60:
            raise TimeoutError(f"groups of {victim} not recovered in 60 s")
        time.sleep(POLL)


def group_recovery(backend: str, trials: int, say: Callable[[str], None]) -> GroupRecoveryResult:
    """Run ``trials`` kills on ``backend``; see the module docstring."""
    res = GroupRecoveryResult(backend, NODES, OBJECTS, REPLICAS)
    before_load = loadavg()
    with (
        temp_dir("groups") as tmp,
        backend_url(backend, tmp, "groups") as url,
        LocalCluster(NODES, url, tmp / "cluster", ttl=TTL, reconcile_interval=RECONCILE) as c,
    ):
        c.wait_for(lambda: list(c.states().values()) == ["live"] * NODES, timeout=60)
        asyncio.run(_create(c.store_url))
        for trial in range(trials):
            victim, led, times = _trial(c)
            res.nominated.append(times[0])
            res.leading.append(times[1])
            res.serving.append(times[2])
            res.led.append(led)
            res.victims.append(victim)
            say(
                f"{backend} trial {trial + 1}: {victim} led {led}; nominated {times[0]:.3f} s, "
                f"leading {times[1]:.3f} s, all members in sync {times[2]:.3f} s"
            )
            c.restart(victim)
    res.load = (before_load, loadavg())
    return res


if __name__ == "__main__":
    import sys

    out = group_recovery(sys.argv[1] if len(sys.argv) > 1 else "sqlite", 5, print)
    for which in ("nominated", "leading", "serving"):
        s = out.summary(which)
        print(f"{which}: p50 {s.p50:.3f} s, p99 {s.p99:.3f} s, max {s.maximum:.3f} s")
