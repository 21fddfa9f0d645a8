"""Automatic failover's decision (:mod:`baton.cascade.auto_failover`) over random sets: a root
that holds its membership or leads its worker group is never deposed, nor one the members still
reach (seed 001's false-positive guard); a failover promotes what a manual one would, among the
branches that hold their membership."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from baton.cascade import decide
from baton.cascade.auto_failover import (
    Action,
    MemberView,
    SetView,
    confirmed,
    decide_failover,
)
from baton.cascade.decide import Seen
from baton.cascade.model import NodeState, Role

NAMES = [f"n{i}" for i in range(6)]


@st.composite
def views(draw: st.DrawFn) -> SetView:
    """A set whose root is n0: branches and leaves below it, some dead, unreachable, without
    membership or leader, reaching the root or not, with ticks and merge-leaves."""
    n = draw(st.integers(1, len(NAMES)))
    names = NAMES[:n]
    members = {}
    for i, name in enumerate(names):
        role = Role.ROOT if i == 0 else draw(st.sampled_from([Role.BRANCH, Role.BRANCH, Role.LEAF]))
        provider = None if i == 0 else draw(st.sampled_from(names[:i]))
        state = NodeState(name, "S", role, provider, draw(st.integers(0, 9)), 1, False, 0)
        seen = Seen(
            name,
            dead=i > 0 and draw(st.booleans()) and draw(st.booleans()),
            state=state if draw(st.booleans()) or draw(st.booleans()) else None,
            last_tick=draw(st.sampled_from([None, *range(1, 21)])),
            merging=draw(st.booleans()) and draw(st.booleans()) and role.carries_queue,
        )
        # Biased so that a lost root the members agree on, a failover, is common.
        rarely = st.sampled_from([False, False, True]) if i == 0 else st.booleans()
        members[name] = MemberView(
            seen,
            member_live=draw(rarely),
            served=draw(rarely),
            reaches_root=draw(st.sampled_from([None, False, False, True])),
        )
    return SetView("S", "n0", members)


@given(views())
def test_the_decision_over_random_sets(view: SetView) -> None:
    """One example checks every property (one run of examples: the suite's time is short)."""
    root = view.members["n0"]
    d = decide_failover(view)
    # A root with its membership or a leader is never deposed.
    if root.member_live or root.served:
        assert d.action is not Action.FAILOVER and d.new_root is None
        assert d.action is Action.NOTHING or "not lost" in d.reason
    if d.action is not Action.FAILOVER:
        return
    # No failover unless a majority of the other members cannot reach the root.
    others = [m for n, m in view.members.items() if n != "n0" and not m.seen.dead]
    lost = [m for m in others if not m.member_live or m.reaches_root is False]
    assert not others or len(lost) * 2 > len(others)
    assert confirmed(view, "n0")[0]
    # What a manual failover would promote, among the branches that hold their membership.
    assert d.dead_root == "n0" and d.new_root is not None and d.new_root != "n0"
    chosen = view.members[d.new_root]
    assert chosen.member_live and not chosen.seen.dead and chosen.seen.state is not None
    assert chosen.seen.state.role.carries_queue and chosen.seen.last_tick is not None
    live = {n: m.seen for n, m in view.members.items() if m.member_live or n == "n0"}
    assert d.new_root == decide.new_root(live, "n0")
    # The highest tick among the live carriers, unless one hosts merge-leaves.
    rivals = decide.carriers(live, "n0")
    if not chosen.seen.merging:
        assert not any(s.merging for s in rivals)
        assert all((s.last_tick or 0) <= (chosen.seen.last_tick or 0) for s in rivals)


def member(
    name: str, role: Role, tick: int, live: bool = True, reaches: bool | None = None
) -> MemberView:
    provider = None if role is Role.ROOT else "r"
    state = NodeState(name, "S", role, provider, tick, 1, False, 0)
    return MemberView(Seen(name, False, state, tick), live, live, reaches)


def test_the_cases_by_name() -> None:
    def view(*members: MemberView) -> SetView:
        return SetView("S", "r", {m.seen.name: m for m in members})

    lost = member("r", Role.ROOT, 9, live=False)
    # A controller cut off from the root's node alone: the members still reach it.
    d = decide_failover(view(lost, member("b1", Role.BRANCH, 7, reaches=True),
                             member("b2", Role.BRANCH, 8, reaches=True)))  # fmt: skip
    assert d.action is Action.WAIT and "do not agree" in d.reason
    # They agree: the live branch with the highest tick.
    d = decide_failover(view(lost, member("b1", Role.BRANCH, 7, reaches=False),
                             member("b2", Role.BRANCH, 8, reaches=False),
                             member("l1", Role.LEAF, 9, reaches=False)))  # fmt: skip
    assert (d.action, d.dead_root, d.new_root) == (Action.FAILOVER, "r", "b2")
    # Only leaves are left: nothing can become the root.
    d = decide_failover(view(lost, member("l1", Role.LEAF, 9, reaches=False)))
    assert d.action is Action.WAIT and "no live branch" in d.reason
    # A root whose node is there but whose service is not: restart it, no failover.
    idle = MemberView(lost.seen, member_live=True, served=False)
    assert decide_failover(view(idle, member("b1", Role.BRANCH, 7))).action is Action.WAIT
    assert decide_failover(SetView("S", None, {})).action is Action.NOTHING
