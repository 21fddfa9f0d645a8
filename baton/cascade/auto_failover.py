"""Automatic set failover, the decision alone (issue 30, step 1): given what was observed of a
set, do nothing, wait (and why), or fail the root over to a branch. A pure function, as
:mod:`baton.placement.decide` is: no I/O, no clock. The actor that observes the set and runs
the failover ``baton cascade failover`` runs is :mod:`baton.service.auto_failover`, elected
among the node agents; the per-set switch is :mod:`baton.cascade.auto_switch`.

A root is **lost** when its node's membership is gone *and* its cascade-worker group has no
leader: a node that still holds its membership, or a service still leading, is not lost (a
restart by placement, or a person, is the remedy). A lost root is deposed only when the
members **agree** (seed 001's false-positive guard): a majority of the other members must
report that they cannot reach it either. A controller cut off from the root's node alone sees
it lost, but the members still reach it, and nothing happens. A member that lost its own
membership counts as confirming (it stopped, and reaches nothing); one that did not answer
counts for neither side.

The new root is what a manual failover promotes (:func:`baton.cascade.decide.new_root`): among
the branches that hold their membership, the one hosting merge-leaves in a combined set, else
the one with the highest tick.

**Synchronous mode** (:mod:`baton.cascade.sync_mode`): :attr:`SetView.acked` is the highest
tick a writer was acknowledged at, as recorded on the branches that were behind it. When no
live branch is at or past it the decision is WAIT: a failover would lose acknowledged
transactions. With K branches confirming every commit this cannot happen while at most K - 1
of them are lost with the root: one of them is live, and it is at or past every acknowledged
tick.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from baton.cascade import decide
from baton.cascade.model import Role


class Action(enum.StrEnum):
    NOTHING = "nothing"
    """The root is there (or the set has none on record): no failover."""
    WAIT = "wait"
    """Something is wrong but a failover is not (yet) the answer: the reason says what."""
    FAILOVER = "failover"
    """Fail the root over to :attr:`Decision.new_root`."""


@dataclass(frozen=True, slots=True)
class MemberView:
    """One member of the set as the controller observed it."""

    #: The member as an operation reads it (role and provider, tick, tagged dead, hosting
    #: merge-leaves); ``state`` None: the controller could not read its database.
    seen: decide.Seen
    #: Its node still holds its membership in the coordination store.
    member_live: bool
    #: Its cascade-worker group has a leader (its service's lease is held).
    served: bool
    #: Whether it reaches the root's database now, as it reported (None: it did not answer).
    reaches_root: bool | None = None


@dataclass(frozen=True, slots=True)
class SetView:
    """What was observed of one set."""

    set_name: str
    #: The node the set takes for its root (the members' node lists; None: none on record).
    root: str | None
    members: Mapping[str, MemberView]
    #: Synchronous mode: the highest tick a writer was acknowledged at (0: none recorded).
    acked: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    #: One line: what was seen and why this decision.
    reason: str
    dead_root: str | None = None
    new_root: str | None = None


def confirmed(view: SetView, root: str) -> tuple[bool, str]:
    """Whether the other members agree that ``root`` is lost (a majority of them cannot reach
    it), and the count, for the reason."""
    others = [m for name, m in view.members.items() if name != root and not m.seen.dead]
    if not others:
        return True, "no other live member to ask"
    lost = sum(1 for m in others if not m.member_live or m.reaches_root is False)
    reaching = sum(1 for m in others if m.member_live and m.reaches_root is True)
    said = f"{lost} of {len(others)} members cannot reach it, {reaching} still do"
    return lost * 2 > len(others), said


def decide_failover(view: SetView) -> Decision:
    """What to do about ``view``'s root (see the module docstring)."""
    root = view.root
    if root is None or root not in view.members:
        return Decision(Action.NOTHING, f"set {view.set_name}: no root on record")
    r = view.members[root]
    if r.member_live or r.served:
        if r.member_live and r.served:
            return Decision(Action.NOTHING, f"set {view.set_name}: root {root} is served")
        held = "its node holds its membership" if r.member_live else "its worker group leads"
        return Decision(
            Action.WAIT,
            f"set {view.set_name}: root {root} is not lost ({held}): no failover; its service "
            "must be restarted where it is",
        )
    agreed, said = confirmed(view, root)
    if not agreed:
        return Decision(
            Action.WAIT,
            f"set {view.set_name}: root {root} lost its membership and its worker group has no "
            f"leader, but the members do not agree ({said}): waiting",
        )
    # Only branches whose nodes hold their membership can take over; the root is passed
    # through, as a manual failover reads it, and excluded by decide.
    live = {n: m.seen for n, m in view.members.items() if n == root or m.member_live}
    chosen = decide.new_root(live, root)
    if chosen is None:
        return Decision(
            Action.WAIT,
            f"set {view.set_name}: root {root} is lost ({said}), but no live branch carries "
            "the queue: nothing can become the root",
            dead_root=root,
        )
    short = decide.loses_acked(live, root, view.acked)
    if short is not None:
        return Decision(
            Action.WAIT,
            f"set {view.set_name}: root {root} is lost ({said}), but writers were acknowledged "
            f"in sync mode at tick {view.acked} and the highest live branch is at {short}: "
            "promoting it would lose acknowledged transactions; bring back a branch that has "
            "them (or fail over by hand, accepting the loss)",
            dead_root=root,
        )
    picked = live[chosen]
    why = "hosts merge-leaves" if picked.merging else f"the highest tick, {picked.last_tick}"
    if picked.state is not None and picked.state.role is Role.ROOT:
        why = "promoted by a failover not finished: run it again"
    return Decision(
        Action.FAILOVER,
        f"set {view.set_name}: root {root} is lost ({said}); promote {chosen} ({why})",
        dead_root=root,
        new_root=chosen,
    )


__all__ = ["Action", "Decision", "MemberView", "SetView", "confirmed", "decide_failover"]
