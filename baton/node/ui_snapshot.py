"""What the dashboard shows, read in one pass: the cluster's nodes and controller, placement,
the cascade sets (:mod:`baton.node.ui_sets`), channels, this node's store-failover roles, and
two things only a watcher can keep: each member's lag over the last minutes and a timeline of
leadership changes.

Both are kept in memory, from the first snapshot this agent built: a lag point is added when a
member's lag changes (or every :data:`LAG_REFRESH` seconds, so a flat line still moves on), and
a leadership change is recorded when two snapshots in a row name different leaders (the
controller, each control group, each set's root, each channel). At the first snapshot every
current leader is entered with the time its epoch says it was granted (epochs are store-clock
microseconds, :mod:`baton.epochs`), so the timeline is never empty.

A part that cannot be read now (the store failing, a node database gone) is left empty with one
line in ``errors``; the rest is still shown.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from baton.cascade.model import Role
from baton.epochs import epoch_text, granted_at
from baton.errors import BatonError
from baton.logs import describe
from baton.node.ui_sets import read_sets
from baton.placement.view import placement_view
from baton.service.auto_view import read_cluster
from baton.store.master_file import read_master

if TYPE_CHECKING:
    from baton.node.agent import NodeAgent

T = TypeVar("T")

#: How far back the lag plot goes, in seconds.
LAG_WINDOW = 300.0
#: A member's lag is recorded at least this often (seconds), even when it does not change.
LAG_REFRESH = 15.0
#: Timeline entries and store-failover rounds kept.
TIMELINE_SIZE = 200
ROUNDS_SIZE = 50


def _epoch(epoch: int | None) -> dict[str, Any] | None:
    """An epoch as the page shows it: the number, its readable form, when it was granted."""
    if epoch is None:
        return None
    at = granted_at(epoch)
    return {"value": epoch, "text": epoch_text(epoch), "granted": at.timestamp() if at else None}


class Snapshots:
    """Builds snapshots of what ``agent`` sees, and keeps the lag history and the timeline
    between them. ``clock``: wall-clock seconds (the page shows times of day)."""

    def __init__(self, agent: NodeAgent, clock: Callable[[], float] = time.time) -> None:
        self.agent = agent
        self.clock = clock
        #: ``set/member`` -> [(time, lag seconds, lag ticks)], oldest first.
        self.lag: dict[str, deque[tuple[float, float | None, int | None]]] = {}
        self.timeline: deque[dict[str, Any]] = deque(maxlen=TIMELINE_SIZE)
        self.rounds: deque[dict[str, Any]] = deque(maxlen=ROUNDS_SIZE)
        #: The leaders of the last snapshot (None: no snapshot yet).
        self._leaders: dict[tuple[str, str], tuple[str | None, int | None]] | None = None

    async def build(self) -> dict[str, Any]:
        """One snapshot (a JSON-able dict). ``at`` is the time it was read; the rest changes
        only when something the page shows changed."""
        agent = self.agent
        errors: dict[str, str] = {}
        nobody: dict[str, Any] = {"nodes": [], "controller": None}
        status = await self._part("nodes", errors, agent.status(), nobody)
        placement = await self._part("placement", errors, placement_view(agent.store), {})
        sets = await self._part("cascade", errors, self._sets(), [])
        channels = await self._part("channels", errors, agent.channels.cluster_view(), [])
        now = self.clock()
        controller = status.get("controller")
        snapshot = {
            "node": agent.node_id,
            "at": round(now, 3),
            "controller": None
            if controller is None
            else {"id": controller["id"], "epoch": _epoch(controller["epoch"])},
            "nodes": [self._node(n) for n in sorted(status["nodes"], key=lambda n: n["id"])],
            "objects": placement.get("objects", []),
            "groups": [self._group(g) for g in placement.get("groups", [])],
            "sets": sets,
            "channels": [{**c, "epoch": _epoch(c["epoch"])} for c in channels],
            "store_failover": self._store_failover(now),
            "errors": errors,
        }
        self._record_lag(sets, now)
        self._record_leaders(snapshot, now)
        snapshot["lag"] = {k: [list(p) for p in v] for k, v in sorted(self.lag.items())}
        snapshot["timeline"] = list(reversed(self.timeline))  # newest first
        return snapshot

    async def _part(self, name: str, errors: dict[str, str], read: Awaitable[T], empty: T) -> T:
        try:
            async with asyncio.timeout(max(2.0, self.agent.timings.request_timeout * 4)):
                return await read
        except (BatonError, OSError, TimeoutError) as exc:
            errors[name] = f"cannot read {name} now: {describe(exc)}"
            return empty

    async def _sets(self) -> list[dict[str, Any]]:
        cluster = await read_cluster(self.agent.store, fresh=float("inf"))
        return await asyncio.to_thread(read_sets, cluster.placed, cluster.reporters)

    @staticmethod
    def _node(n: dict[str, Any]) -> dict[str, Any]:
        keep = ("id", "address", "state", "capacity", "labels", "types", "version", "started_at")
        return {**{k: n.get(k) for k in keep}, "epoch": _epoch(n.get("epoch"))}

    @staticmethod
    def _group(g: dict[str, Any]) -> dict[str, Any]:
        keep = ("group", "type", "members", "leader", "state", "detail", "transfer")
        return {**{k: g.get(k) for k in keep}, "term": _epoch(g.get("term"))}

    def _store_failover(self, now: float) -> dict[str, Any]:
        """This node's store-failover roles: the configuration server's picture and its
        rounds (when it runs one), the client's master file (when it is a client)."""
        roles = self.agent.failover
        if roles is None:
            return {"configured": False, "server": None, "client": None, "rounds": []}
        server = roles.server.status() if roles.server is not None else None
        if server is not None and server.get("last_round"):
            last = server["last_round"]
            if not self.rounds or self.rounds[-1].get("token") != last.get("token"):
                self.rounds.append(dict(last))
        client = None
        if roles.config.client is not None:
            c = roles.config.client
            try:
                master = read_master(c.master_file)
                shown = None if master is None else str(master)
            except (BatonError, OSError) as exc:
                shown = f"unreadable: {describe(exc)}"
            client = {"id": c.client_id, "master_file": str(c.master_file), "master": shown}
        return {
            "configured": True,
            "server": server,
            "client": client,
            "rounds": list(reversed(self.rounds)),
        }

    def _record_lag(self, sets: list[dict[str, Any]], now: float) -> None:
        for s in sets:
            for m in s.get("members", []):
                if m["role"] == Role.ROOT:
                    continue
                key = f"{s['set']}/{m['name']}"
                points = self.lag.setdefault(key, deque())
                point = (round(now, 1), m["lag_seconds"], m["lag_ticks"])
                if not points or points[-1][1:] != point[1:] or now - points[-1][0] >= LAG_REFRESH:
                    points.append(point)
        for key in list(self.lag):
            points = self.lag[key]
            while points and now - points[0][0] > LAG_WINDOW:
                points.popleft()
            if not points:
                del self.lag[key]

    def _record_leaders(self, snapshot: dict[str, Any], now: float) -> None:
        leaders: dict[tuple[str, str], tuple[str | None, int | None]] = {}
        ctl = snapshot["controller"]
        leaders[("controller", "controller")] = (
            (ctl["id"], ctl["epoch"]["value"]) if ctl else (None, None)
        )
        for g in snapshot["groups"]:
            leaders[("group", g["group"])] = (g["leader"], g["term"] and g["term"]["value"])
        for s in snapshot["sets"]:
            if s.get("error") is None:
                leaders[("root", s["set"])] = (s["root"], None)
        for c in snapshot["channels"]:
            leaders[("channel", c["channel"])] = (
                c["leader"],
                c["epoch"]["value"] if c["epoch"] else None,
            )
        before = self._leaders
        self._leaders = leaders
        if before is None:
            for (kind, name), (leader, epoch) in sorted(leaders.items()):
                if leader is None:
                    continue
                at = granted_at(epoch) if epoch is not None else None
                since = at.timestamp() if at else None
                self._add(kind, name, leader, None, epoch, at=since, held=True)
            self.timeline = deque(
                sorted(self.timeline, key=lambda e: e["at"] or 0), maxlen=TIMELINE_SIZE
            )
            return
        for key, (leader, epoch) in sorted(leaders.items()):
            old = before.get(key)
            if old is None or old[0] != leader:
                if old is None and leader is None:
                    continue
                previous = old[0] if old else None
                self._add(key[0], key[1], leader, previous, epoch, at=now, held=False)

    def _add(
        self,
        kind: str,
        name: str,
        leader: str | None,
        previous: str | None,
        epoch: int | None,
        *,
        at: float | None,
        held: bool,
    ) -> None:
        """A timeline entry. ``held``: a leader found in place at the first snapshot (``at``
        from its epoch, None when the epoch holds no time), rather than a change seen."""
        self.timeline.append(
            {
                "at": None if at is None else round(at, 3),
                "kind": kind,
                "name": name,
                "leader": leader,
                "previous": previous,
                "epoch": _epoch(epoch),
                "held": held,
            }
        )


__all__ = ["LAG_WINDOW", "Snapshots"]
