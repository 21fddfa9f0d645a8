"""How a set's members say whether they reach its root: automatic failover's false-positive
guard (seed 001: a group leader is deposed only when its members also have no live stream
from it).

The simplest honest mechanism: every node agent, for each cascade node whose service it leads,
walks that node's providers up to the root (reading their node databases as its worker would)
and asks whether the root is *served*: its database answers and its service's heartbeat
(:mod:`baton.cascade.beat`) is running. A root whose database still answers but whose process
is dead or frozen (an SQLite file on a host whose agent was killed) is not reached: nothing
ticks there, so no stream comes from it. The answer goes into the record
``reach/<set>/<node>`` (:func:`baton.keys.reach_record`) with the store's time, written while
the agent holds its membership; the actor takes a report older than a few probe intervals for
no answer (the member counts for neither side).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from baton.cascade import beat
from baton.cascade.beat import ServiceState
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.clock import SYSTEM, Clock
from baton.errors import CascadeError, StoreError
from baton.keys import reach_record
from baton.logs import describe
from baton.store import Lease, Store

log = logging.getLogger("baton.cascade")

#: Seconds between two probes of the same node.
PROBE_INTERVAL = 0.5
#: A root whose service has not beaten for this long is not reached. Shorter than what
#: ``cascade status`` calls silent (:data:`baton.cascade.beat.SILENT_AFTER`, 10 s, so that a
#: loaded machine's late beat is not shown as a dead service): here a late beat alone decides
#: nothing. A report only confirms a loss the actor saw first from fenced facts (the root's
#: membership gone *and* its worker group without a leader), and with those gone its service
#: has stopped anyway. Three missed beats (1.5 s): a failover waits for the slower of the
#: lease's ttl and this, not for ten seconds.
QUIET_AFTER = 3 * beat.INTERVAL


@dataclass(frozen=True, slots=True)
class Reach:
    """What one member's host found."""

    set_name: str
    node: str
    #: The root it found at the top of its providers (None: the chain broke before one).
    root: str | None
    reaches: bool
    #: Why not, in a few words ("" when it reaches the root).
    why: str = ""
    #: The reporting node's database (the actor can reach the set through it).
    location: str = ""


def probe(location: str, now: float | None = None) -> Reach | None:
    """Whether the node at ``location`` reaches its set's served root, up its providers; None
    for a root (it does not report on itself) or a node that cannot be read (its own database
    is down: no answer). ``now``: the wall time beats are judged by."""
    try:
        with open_node_db(location, readonly=True) as db:
            st = db.state()
            nodes = db.nodes()
    except (CascadeError, OSError):
        return None
    if st.role is Role.ROOT:
        return None
    at = time.time() if now is None else now

    def said(root: str | None, reaches: bool, why: str = "") -> Reach:
        return Reach(st.set_name, st.name, root, reaches, why, location)

    current, walked = st.provider, {st.name}
    while current is not None and current not in walked:
        walked.add(current)
        found = nodes.get(current)
        if found is None:
            return said(None, False, f"{current} is not in its node list")
        try:
            with open_node_db(found[0], readonly=True) as pdb:
                pst = pdb.state()
                served = beat.read(pdb)
        except (CascadeError, OSError):
            return said(current, False, f"{current} does not answer")
        if pst.role is Role.ROOT:
            if served is not None and served.state(at, QUIET_AFTER) is ServiceState.RUNNING:
                return said(current, True)
            return said(current, False, f"{current} is not served")
        current = pst.provider
    return said(None, False, "no root up its providers")


async def report(store: Store, found: Reach, lease: Lease | None) -> bool:
    """Write ``found`` with the store's time, conditioned on ``lease`` (the host's membership);
    whether it was written."""
    body = {"root": found.root, "reaches": found.reaches, "why": found.why,
            "location": found.location, "at": await store.now()}  # fmt: skip
    res = await store.put(
        reach_record(found.set_name, found.node), json.dumps(body).encode(), lease=lease
    )
    return res.ok


class Prober:
    """Probes, every :data:`PROBE_INTERVAL`, the nodes ``locations()`` names (the cascade
    nodes whose service this agent leads) and reports each under ``lease()`` (the agent's
    membership; None: not held, so nothing is reported)."""

    def __init__(
        self,
        store: Store,
        locations: Callable[[], list[str]],
        lease: Callable[[], Lease | None],
        *,
        clock: Clock = SYSTEM,
        interval: float = PROBE_INTERVAL,
    ) -> None:
        self.store = store
        self.locations = locations
        self.lease = lease
        self.clock = clock
        self.interval = interval

    async def once(self) -> list[Reach]:
        """Probe and report every node once; what was reported."""
        held = self.lease()
        if held is None:
            return []
        out = []
        for location in self.locations():
            found = await asyncio.to_thread(probe, location, self.clock.time())
            if found is not None and await report(self.store, found, held):
                out.append(found)
        return out

    async def run(self) -> None:
        while True:
            try:
                await self.once()
            except Exception as exc:
                # Probe again next time whatever this one met (a bug's trace is kept).
                log.warning(
                    "reach probe failed",
                    extra={"error": describe(exc)},
                    exc_info=not isinstance(exc, StoreError | CascadeError | OSError),
                )
            await self.clock.sleep(self.interval)


__all__ = ["PROBE_INTERVAL", "QUIET_AFTER", "Prober", "Reach", "probe", "report"]
