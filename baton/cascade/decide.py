"""The pure part of the cascade's operations: what a provider change, a candidate list, a
failover and an order of work decide, from what was read of the members. No I/O here:
:mod:`baton.cascade.set_ops` reads the members (:class:`Seen`), calls these, then makes the
fenced changes (the shape of :mod:`baton.placement.decide` and :mod:`baton.failover.decide`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from baton.cascade.model import NodeState, Role


@dataclass(frozen=True, slots=True)
class Seen:
    """One member as an operation read it."""

    name: str
    dead: bool
    #: Its state (None: it could not be read: unreachable, or not a node any more).
    state: NodeState | None
    #: Its last tick (None: no tick, or not read).
    last_tick: int | None = None
    #: Whether it holds the tick the node being decided about is at (None: not asked).
    holds_tick: bool | None = None
    #: Whether it hosts merge-leaves (a combined set's failover node).
    merging: bool = False


class Problem(StrEnum):
    """Why a node cannot be another's provider."""

    ITSELF = "itself"
    """Bad input: a node cannot be its own provider."""
    DEAD = "dead"
    UNREACHABLE = "unreachable"
    LEAF = "leaf"
    CYCLE = "cycle"
    LACKS_TICK = "lacks tick"


def chain(name: str, states: Mapping[str, NodeState]) -> list[str]:
    """``name``'s provider, its provider, ... up to the root or the first node not in
    ``states`` (cycle-safe: a node met twice ends it)."""
    out: list[str] = []
    current = name
    while (st := states.get(current)) is not None:
        provider = st.provider
        if provider is None or provider in out or provider == name:
            break
        out.append(provider)
        current = provider
    return out


def provider_problem(node: str, provider: Seen, states: Mapping[str, NodeState]) -> Problem | None:
    """Why ``provider`` cannot provide ``node`` now, or None. ``states``: the members' states
    (for the cycle check); ``provider.holds_tick``: whether it has the tick ``node`` is at."""
    if provider.name == node:
        return Problem.ITSELF
    if provider.dead:
        return Problem.DEAD
    if provider.state is None:
        return Problem.UNREACHABLE
    if not provider.state.role.carries_queue:
        return Problem.LEAF
    if node in chain(provider.name, states):
        return Problem.CYCLE
    if provider.holds_tick is False:
        return Problem.LACKS_TICK
    return None


def candidates(node: str, seen: Mapping[str, Seen]) -> list[str]:
    """Every member that can be ``node``'s provider now, by name."""
    states = {n: s.state for n, s in seen.items() if s.state is not None}
    return [
        name
        for name in sorted(seen)
        if name != node and provider_problem(node, seen[name], states) is None
    ]


def carriers(seen: Mapping[str, Seen], dead_root: str) -> list[Seen]:
    """The live, reachable members (but ``dead_root``) that carry the queue and have a tick:
    what a failover can promote or catch up from."""
    return [
        s
        for s in seen.values()
        if s.name != dead_root
        and not s.dead
        and s.state is not None
        and s.state.role.carries_queue
        and s.last_tick is not None
    ]


def new_root(seen: Mapping[str, Seen], dead_root: str) -> str | None:
    """The node a failover promotes: among the :func:`carriers`, one that hosts merge-leaves
    first (a combined set's new root must take the partitions over), then the highest tick,
    then the first name; None when there is none."""
    found = carriers(seen, dead_root)
    if not found:
        return None
    return min(found, key=lambda s: (not s.merging, -(s.last_tick or 0), s.name)).name


def furthest(seen: Mapping[str, Seen], dead_root: str) -> str | None:
    """The carrier that got furthest from the dead root (highest tick, then the last name),
    which the new root catches up from first."""
    found = carriers(seen, dead_root)
    if not found:
        return None
    return max(found, key=lambda s: (s.last_tick or 0, s.merging, s.name)).name


def loses_acked(seen: Mapping[str, Seen], dead_root: str, acked: int) -> int | None:
    """Synchronous mode: the highest tick among the :func:`carriers` (what a failover keeps:
    it promotes one and catches it up to the furthest) when it is below ``acked``, the highest
    tick a writer was acknowledged at: promoting would lose acknowledged transactions. None
    when nothing acknowledged would be lost (``acked`` 0: none recorded)."""
    if acked <= 0:
        return None
    highest = max((s.last_tick or 0 for s in carriers(seen, dead_root)), default=0)
    return highest if highest < acked else None


def subscription_order(states: Mapping[str, NodeState]) -> list[str]:
    """Roots first, then every node after its provider (breadth first); nodes whose provider is
    not among ``states`` (tagged dead, or a cycle) come last."""
    order = [n for n, st in states.items() if st.role is Role.ROOT]
    i = 0
    while i < len(order):
        order += [n for n, st in states.items() if st.provider == order[i] and n not in order]
        i += 1
    return order + [n for n in states if n not in order]


__all__ = [
    "Problem",
    "Seen",
    "candidates",
    "carriers",
    "chain",
    "furthest",
    "loses_acked",
    "new_root",
    "provider_problem",
    "subscription_order",
]
