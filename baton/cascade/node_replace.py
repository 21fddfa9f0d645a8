"""Replacing a branch by another node (seed 004's ``node-switchover`` and ``node-failover``).

NEW takes OLD's place in the tree: NEW receives from OLD's provider (when it did not already),
every subscriber of OLD moves to NEW (with :func:`baton.cascade.set_ops.change_provider`'s
rules: no cycle, and NEW must have the tick each one is at), and then:

- **node-switchover** (planned, OLD alive): OLD is paused first, so that neither it nor its
  subscribers move on while they are handed over; once NEW has every tick they are at, they
  move, OLD becomes a subscriber of NEW, and it is resumed.
- **node-failover** (OLD gone): OLD's provider is found by its registration (the node that
  holds OLD's watermark); its subscribers move to NEW once NEW has caught up with them (they may
  have applied ticks that NEW had not); OLD is tagged dead.

Both wait (up to a timeout) for NEW's worker to bring NEW far enough; :class:`NotFinished` if it
did not: run the command again, it goes on from where it stopped (each step checks whether it
is done). Bad input, and a NEW that can never provide them (its queue starts after a tick they
need), are refused before anything changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from baton.cascade import handover, set_ops
from baton.cascade.db import open_node_db
from baton.cascade.model import NodeState, Role
from baton.errors import CascadeError, CascadeInputError, NotFinished, Refused


@dataclass(frozen=True, slots=True)
class Replaced:
    new: str
    old: str
    #: NEW's provider now (OLD's provider before).
    provider: str | None
    #: The subscribers moved from OLD to NEW by this run.
    moved: list[str]
    #: switchover: OLD is now a subscriber of NEW; failover: OLD is tagged dead.
    failover: bool
    #: Nothing was left to do.
    already: bool


def _receivers(c: set_ops.CascadeSet, node: str, exclude: str) -> dict[str, NodeState]:
    """Live, reachable nodes (but ``exclude``) whose provider is ``node``."""
    out: dict[str, NodeState] = {}
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name in (node, exclude):
            continue
        try:
            with open_node_db(loc) as db:
                st = db.state()
        except (CascadeError, OSError):
            continue
        if st.provider == node:
            out[name] = st
    return out


def _registered_at(c: set_ops.CascadeSet, node: str) -> str | None:
    """The live node holding ``node``'s watermark registration: its provider (for a node that
    cannot be reached)."""
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == node:
            continue
        try:
            with open_node_db(loc) as db:
                if node in db.watermarks():
                    return name
        except (CascadeError, OSError):
            continue
    return None


def _check_new(c: set_ops.CascadeSet, new: str, old: str) -> NodeState:
    if new == old:
        raise CascadeInputError(f"{new} cannot replace itself: give another node")
    c.location(new)
    c.location(old)
    if c.dead(new):
        raise Refused(f"{new} is tagged dead: pick another node (see candidates)")
    st = c.state(new)
    if st.role is Role.ROOT:
        raise Refused(f"{new} is the root: it cannot take a branch's place")
    if not st.role.carries_queue:
        raise Refused(f"{new} is a leaf: it has no queue to provide {old}'s subscribers")
    return st


def _check_ticks(c: set_ops.CascadeSet, new: str, needs: dict[str, int]) -> None:
    """Refuse when NEW can never provide a node of ``needs`` (name -> its tick): NEW's queue
    no longer (or never did) hold that tick although NEW is past it."""
    with c.db(new) as db:
        last = db.last_tick()
        top = last.tick_id if last else 0
        for name, tick in sorted(needs.items()):
            if tick <= top and tick and db.get_tick(tick) is None:
                raise Refused(
                    f"{new} cannot provide {name}: {name} is at tick {tick}, which {new}'s queue "
                    "does not hold (see candidates)"
                )


def replace(
    c: set_ops.CascadeSet,
    new: str,
    old: str,
    *,
    failover: bool,
    wait: Callable[[Callable[[], bool], float], None] = handover.poll,
    timeout: float = 60.0,
) -> Replaced:
    """Replace branch ``old`` by ``new`` (see the module docstring): switchover when
    ``failover`` is False (``old`` is alive and becomes a subscriber of ``new``), failover when
    it is True (``old`` is gone and is tagged dead). Resumable."""
    nst = _check_new(c, new, old)
    ost: NodeState | None
    try:
        ost = c.state(old)
    except CascadeError:
        if not failover:
            raise
        ost = None  # gone, as a failed node usually is
    if ost is not None and ost.role is Role.ROOT:
        raise Refused(f"{old} is the root: use {'failover' if failover else 'switchover'}")
    if ost is not None and not ost.role.carries_queue:
        raise Refused(f"{old} is a leaf: no node receives from it, nothing to hand over")
    if failover and c.dead(old) and ost is None and not _receivers(c, old, new):
        provider = nst.provider  # done before: OLD is released
        if _registered_at(c, old) is None:
            return Replaced(new, old, provider, [], True, True)
    # OLD's provider: what NEW must receive from to take its place.
    if ost is not None:
        provider = ost.provider if ost.provider != new else nst.provider
    else:
        provider = _registered_at(c, old) or nst.provider
    if provider is None or provider == old:
        raise Refused(f"cannot tell {old}'s provider: move {new} with change-provider first")
    subs = _receivers(c, old, new)
    needs = {name: st.position for name, st in subs.items()}
    if not failover and ost is not None and ost.provider != new:
        needs[old] = ost.position
    _check_ticks(c, new, needs)
    with c.db(new) as db:
        last = db.last_tick()
    if last is None or last.tick_id < max(needs.values(), default=0) or nst.provider != provider:
        # NEW has ticks to apply first: its worker must be there to apply them, or OLD and its
        # subscribers would stay paused for nothing.
        begun = not failover and ost is not None and ost.paused
        handover.require_applying(
            c, new, handover.served_by(c, new), "run the same command again",
            f"{old} stays paused until it finishes" if begun else "nothing was changed",
        )  # fmt: skip
    changed = False
    if not failover and ost is not None and ost.provider != new and not ost.paused:
        set_ops.set_paused(c, old, True)  # it and its subscribers stop where they are
        changed = True
    if nst.provider != provider:
        with set_ops.refusing():
            set_ops.change_provider(c, new, provider)
        changed = True
    if not failover and ost is not None and ost.provider != new:
        needs[old] = c.state(old).position  # paused now: it stays there
    target = max(needs.values(), default=0)

    def caught_up() -> bool:
        with c.db(new) as db:
            last = db.last_tick()
        return last is not None and last.tick_id >= target

    try:
        wait(caught_up, timeout)
    except NotFinished:
        raise NotFinished(
            f"{new} did not reach tick {target} within {timeout:g}s (is its worker running?): "
            f"run the same command again to finish replacing {old}"
        ) from None
    moved = []
    with set_ops.refusing():
        for name in sorted(subs):
            set_ops.change_provider(c, name, new)
            moved.append(name)
        if failover:
            if not c.dead(old):
                set_ops.tag(c, old, True)
                changed = True
        else:
            if c.state(old).provider != new:
                set_ops.change_provider(c, old, new)
                changed = True
            if c.state(old).paused:
                set_ops.set_paused(c, old, False)
                changed = True
    return Replaced(new, old, provider, moved, failover, not (changed or moved))


__all__ = ["Replaced", "replace"]
