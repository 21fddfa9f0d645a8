"""Automatic failover's decision in synchronous mode (:mod:`baton.cascade.auto_failover`,
:func:`baton.cascade.decide.loses_acked`) over random sets: the acknowledged tick only ever
turns a failover into a wait, never changes whom it promotes, and with K confirming branches
the loss of the root plus K - 1 branches never loses an acknowledged transaction."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from baton.cascade import decide
from baton.cascade.auto_failover import Action, MemberView, SetView, decide_failover
from baton.cascade.decide import Seen
from baton.cascade.model import NodeState, Role
from tests.cascade.test_auto_failover_decide import views


@given(views(), st.integers(0, 25))
def test_the_acknowledged_tick_only_turns_a_failover_into_a_wait(view: SetView, acked: int) -> None:
    plain = decide_failover(view)
    d = decide_failover(dataclasses.replace(view, acked=acked))
    live = {n: m.seen for n, m in view.members.items() if n == "n0" or m.member_live}
    highest = max((s.last_tick or 0 for s in decide.carriers(live, "n0")), default=0)
    if d.action is Action.FAILOVER:
        # Promoted only when a live branch holds every acknowledged tick, and the same one.
        assert highest >= acked and d == plain
    elif plain.action is Action.FAILOVER:
        assert acked > highest and "acknowledged" in d.reason and d.new_root is None
    else:
        assert d == plain


def branch(name: str, tick: int, live: bool) -> MemberView:
    state = NodeState(name, "S", Role.BRANCH, "r", tick, 1, False, 0)
    return MemberView(Seen(name, False, state, tick), live, live, reaches_root=False)


@st.composite
def sync_sets(draw: st.DrawFn) -> tuple[SetView, int]:
    """A lost root, n branches of which K confirmed tick T (at or past it) and the others
    lag; then the root and at most K - 1 branches (any) lost."""
    n = draw(st.integers(1, 6))
    k = draw(st.integers(1, n))
    acked = draw(st.integers(1, 30))
    confirmers = set(draw(st.permutations(range(n)))[:k])
    ticks = [
        draw(st.integers(acked, acked + 5)) if i in confirmers else draw(st.integers(0, acked - 1))
        for i in range(n)
    ]
    lost = set(draw(st.permutations(range(n)))[: draw(st.integers(0, k - 1))])
    root = MemberView(
        Seen("r", False, NodeState("r", "S", Role.ROOT, None, acked, 1, False, 0), None),
        member_live=False,
        served=False,
    )
    members = {"r": root} | {
        f"b{i}": branch(f"b{i}", ticks[i], live=i not in lost) for i in range(n)
    }
    # What the writer recorded on the branches that were behind: the failover reads it from
    # the live ones (a lost one says nothing).
    seen_acked = acked if any(i not in confirmers and i not in lost for i in range(n)) else 0
    return SetView("S", "r", members, seen_acked), acked


@given(sync_sets())
def test_losing_the_root_and_k_minus_one_branches_loses_no_acknowledged_write(
    case: tuple[SetView, int],
) -> None:
    view, acked = case
    d = decide_failover(view)
    assert d.action is Action.FAILOVER, d.reason
    assert d.new_root is not None
    chosen = view.members[d.new_root].seen
    assert chosen.last_tick is not None and chosen.last_tick >= acked


def test_the_cases_by_name() -> None:
    def view(acked: int, *members: MemberView) -> SetView:
        root = MemberView(
            Seen("r", False, NodeState("r", "S", Role.ROOT, None, 9, 1, False, 0), 9),
            member_live=False,
            served=False,
        )
        return SetView("S", "r", {"r": root} | {m.seen.name: m for m in members}, acked)

    # b1 confirmed tick 8 and is lost; b2, behind, recorded it: wait, say why.
    d = decide_failover(view(8, branch("b1", 8, live=False), branch("b2", 6, live=True)))
    assert d.action is Action.WAIT and d.dead_root == "r"
    assert "acknowledged in sync mode at tick 8" in d.reason and "at 6" in d.reason
    # b1 is live: promoted.
    d = decide_failover(view(8, branch("b1", 8, live=True), branch("b2", 6, live=True)))
    assert (d.action, d.new_root) == (Action.FAILOVER, "b1")
    # Nothing acknowledged (asynchronous): the highest live branch, as before.
    d = decide_failover(view(0, branch("b1", 8, live=False), branch("b2", 6, live=True)))
    assert (d.action, d.new_root) == (Action.FAILOVER, "b2")
