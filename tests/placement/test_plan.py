"""Tests of the pure placement function (:mod:`baton.placement.plan`).

About ``moves == lower_bound``: the bound charges one move per wanted member that is not kept
plus one per kept member above its node's balanced share. It is reached whenever the members to
add can all land on nodes below their share. The distinct-node rule can forbid that: a group
missing a member may already sit on every node below its share, so its new member lands on a
full node and some other member has to move off that node (see
``test_distinct_nodes_can_make_the_bound_unreachable``). An exact search (linear programming,
run outside these tests) shows it still happens after departures from a placement made by
``place``, rarely: 2 in 3000 random departure/arrival scenarios on 5-20 nodes with replicas at
most half the node count, both with 5 nodes left, 1 move over the bound and optimal. How often
depends on the start: ``place`` spreads each node's groups over many partner nodes
(``test_groups_spread_over_partner_nodes``), because a start where groups of a type share the
same node sets makes it the rule.

So the properties assert:

* ``moves >= lower_bound`` always (without binding constraints);
* ``moves == lower_bound`` where it provably holds: no group misses a member (only balance
  moves: each goes from the fullest to the emptiest node, and a group able to make it always
  exists because the fullest node has at least two more groups of the type than the emptiest),
  or no group keeps a member (fresh: each group takes the emptiest distinct nodes, which keeps
  every type within one);
* ``moves ==`` the exact optimum (a dynamic program over per-node counts) on small instances,
  which covers the departure cases above.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from baton.placement.plan import GroupDemand, NodeSlot, Placement, lower_bound, place

AMPLE = 1_000_000
TYPES = ("orders", "users", "events")


# -- helpers ----------------------------------------------------------------------------------


def slots(n: int, prefix: str = "n", capacity: int = AMPLE) -> list[NodeSlot]:
    return [NodeSlot(f"{prefix}{i:02d}", capacity) for i in range(n)]


def fresh(n: int, replicas: int = 3, types: Sequence[str] = TYPES) -> list[GroupDemand]:
    return [GroupDemand(f"obj{i:04d}/0", types[i % len(types)], replicas) for i in range(n)]


def follow(groups: Sequence[GroupDemand], result: Placement) -> list[GroupDemand]:
    """The groups as the next pass sees them: members from ``result``, leader kept if still a
    member, else the first member."""
    out = []
    for g in groups:
        members = result.members[g.key]
        leader = g.leader if g.leader in members else (members[0] if members else None)
        out.append(replace(g, members=members, leader=leader))
    return out


def type_counts(
    groups: Sequence[GroupDemand], result: Placement, nodes: Sequence[NodeSlot]
) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    for g in groups:
        c = counts.setdefault(g.type, Counter({n.id: 0 for n in nodes}))
        c.update(result.members[g.key])
    return counts


def spreads(
    groups: Sequence[GroupDemand], result: Placement, nodes: Sequence[NodeSlot]
) -> dict[str, int]:
    return {
        t: max(c.values()) - min(c.values()) for t, c in type_counts(groups, result, nodes).items()
    }


def matches(node: NodeSlot, selector: Mapping[str, str]) -> bool:
    return all(node.labels.get(k) == v for k, v in selector.items())


def check_valid(
    groups: Sequence[GroupDemand], nodes: Sequence[NodeSlot], result: Placement
) -> None:
    """Invariants that hold with or without constraints."""
    by_id = {n.id: n for n in nodes}
    assert set(result.members) == {g.key for g in groups}
    load: Counter[str] = Counter()
    for g in groups:
        members = result.members[g.key]
        assert len(set(members)) == len(members), "two members on one node"
        for m in members:
            assert m in by_id, "member on a node not given"
            assert matches(by_id[m], g.selector), "selector ignored"
        load.update(members)
        missing = result.unplaced.get(g.key, 0)
        assert len(members) + missing == g.replicas
        if missing:
            # Nothing left unplaced that some node could still take.
            for n in nodes:
                assert (
                    n.id in members
                    or not matches(n, g.selector)
                    or load_of(result, n) >= (n.capacity)
                )
    assert all(v > 0 for v in result.unplaced.values())
    for n in nodes:
        assert load[n.id] <= n.capacity, "capacity exceeded"
    kept = kept_members(groups, nodes)
    if evictions(groups, nodes) == 0:
        # Kept members first, in their order, then additions. (With evictions the kept set
        # is smaller than the rule's, and an evicted member placed again is an addition.)
        for g in groups:
            members = result.members[g.key]
            stayed = [m for m in kept[g.key] if m in members]
            assert list(members[: len(stayed)]) == stayed


def load_of(result: Placement, node: NodeSlot) -> int:
    return sum(node.id in m for m in result.members.values())


def kept_members(groups: Sequence[GroupDemand], nodes: Sequence[NodeSlot]) -> dict[str, list[str]]:
    """The members the contract keeps before capacity: live, matching the selector, named once.
    A group with more than its replicas keeps its leader, then the members on the nodes with the
    fewest kept members of its type (then in total, then member order), counting the members
    certainly kept and the groups cut before it (key order)."""
    by_id = {n.id: n for n in nodes}
    live: dict[str, list[str]] = {}
    for g in groups:
        ms: list[str] = []
        for m in g.members:
            if m in by_id and matches(by_id[m], g.selector) and m not in ms:
                ms.append(m)
        live[g.key] = ms
    per_type: Counter[tuple[str, str]] = Counter()
    total: Counter[str] = Counter()
    over = sorted((g for g in groups if len(live[g.key]) > g.replicas), key=lambda g: g.key)
    for g in groups:
        certain = live[g.key] if g not in over else [m for m in live[g.key] if m == g.leader]
        for m in certain:
            per_type[(g.type, m)] += 1
            total[m] += 1
    for g in over:
        ms = live[g.key]
        others = [m for m in ms if m != g.leader]
        room = g.replicas - (len(ms) - len(others))
        others.sort(key=lambda m: (per_type[(g.type, m)], total[m], ms.index(m)))
        for m in others[:room]:
            per_type[(g.type, m)] += 1
            total[m] += 1
        live[g.key] = [m for m in ms if m == g.leader or m in others[:room]]
    return live


def evictions(groups: Sequence[GroupDemand], nodes: Sequence[NodeSlot]) -> int:
    """Kept members beyond their node's capacity (the contract moves them off)."""
    load = Counter(m for ms in kept_members(groups, nodes).values() for m in ms)
    return sum(max(0, load[n.id] - n.capacity) for n in nodes)


def additions(groups: Sequence[GroupDemand], nodes: Sequence[NodeSlot], result: Placement) -> int:
    kept = kept_members(groups, nodes)
    return sum(len(set(result.members[g.key]) - set(kept[g.key])) for g in groups)


def optimum(groups: Sequence[GroupDemand], nodes: Sequence[NodeSlot]) -> int:
    """Fewest moves of any balanced placement (no constraints), by dynamic programming over the
    per-node counts of each type; counts above the largest balanced share are pruned."""
    ids = [n.id for n in nodes]
    width = len(ids)
    total = 0
    for t in sorted({g.type for g in groups}):
        members = [g for g in groups if g.type == t]
        kept_all = kept_members(groups, nodes)
        cap = -(-sum(g.replicas for g in members) // width)  # ceil: the largest share
        states: dict[tuple[int, ...], int] = {(0,) * width: 0}
        for g in members:
            kept = set(kept_all[g.key])
            options = [
                (c, sum(ids[i] not in kept for i in c))
                for c in combinations(range(width), g.replicas)
            ]
            nxt: dict[tuple[int, ...], int] = {}
            for state, cost in states.items():
                for chosen, extra in options:
                    counts = list(state)
                    for i in chosen:
                        counts[i] += 1
                    if max(counts) > cap:
                        continue
                    key = tuple(counts)
                    if nxt.get(key, AMPLE) > cost + extra:
                        nxt[key] = cost + extra
            states = nxt
        total += min(cost for state, cost in states.items() if max(state) - min(state) <= 1)
    return total


# -- unit tests -------------------------------------------------------------------------------


def test_fresh_placement_is_balanced() -> None:
    groups, nodes = fresh(300), slots(10)
    result = place(groups, nodes)
    check_valid(groups, nodes, result)
    assert result.unplaced == {}
    assert spreads(groups, result, nodes) == {t: 0 for t in TYPES}  # 300 per type / 10 nodes
    assert result.moves == 900 == lower_bound(groups, nodes)
    totals = Counter(m for ms in result.members.values() for m in ms)
    assert set(totals.values()) == {90}


def test_node_departure_moves_only_its_members() -> None:
    nodes = slots(10)
    first = place(fresh(300), nodes)
    groups = follow(fresh(300), first)
    gone = nodes[3].id
    on_gone = [g.key for g in groups if gone in g.members]
    remaining = [n for n in nodes if n.id != gone]
    result = place(groups, remaining)
    check_valid(groups, remaining, result)
    assert result.moves == len(on_gone) == lower_bound(groups, remaining)
    assert max(spreads(groups, result, remaining).values()) <= 1
    for g in groups:
        if g.key in on_gone:
            survivors = tuple(m for m in g.members if m != gone)
            assert result.members[g.key][:2] == survivors
        else:
            assert result.members[g.key] == g.members


def test_node_join_moves_exactly_what_balance_needs() -> None:
    nodes = slots(10)
    groups = follow(fresh(300), place(fresh(300), nodes))
    joined = [*nodes, NodeSlot("n99", AMPLE)]
    result = place(groups, joined)
    check_valid(groups, joined, result)
    counts = type_counts(groups, result, joined)
    # 300 members of each type on 11 nodes: 3 nodes with 28, 8 with 27; the new node takes 27
    # of each type and every one of those is a move, nothing else moves.
    assert all(c["n99"] == 27 for c in counts.values())
    assert max(spreads(groups, result, joined).values()) <= 1
    assert result.moves == 81 == lower_bound(groups, joined)
    assert additions(groups, joined, result) == result.moves


def test_drain_empties_the_node() -> None:
    nodes = slots(5)
    groups = follow(fresh(40, replicas=2), place(fresh(40, replicas=2), nodes))
    drained = nodes[0].id
    held = sum(drained in g.members for g in groups)
    assert held > 0
    rest = nodes[1:]
    result = place(groups, rest)
    check_valid(groups, rest, result)
    assert all(drained not in m for m in result.members.values())
    assert result.moves == held
    assert max(spreads(groups, result, rest).values()) <= 1


def test_capacity_is_never_exceeded_and_shortfall_is_reported() -> None:
    nodes = slots(4, capacity=5)  # 20 slots for 8 groups of 3 = 24 wanted
    groups = fresh(8)
    result = place(groups, nodes)
    check_valid(groups, nodes, result)
    assert sum(result.unplaced.values()) == 4
    assert all(load_of(result, n) == 5 for n in nodes)
    # The groups filled first (by key) got all their members.
    assert set(result.unplaced) == {"obj0006/0", "obj0007/0"}


def test_over_capacity_node_sheds_non_leaders_first() -> None:
    nodes = [NodeSlot("a", 2), NodeSlot("b", 10), NodeSlot("c", 10)]
    groups = [
        GroupDemand("g1", "orders", 1, ("a",), leader="a"),
        GroupDemand("g2", "orders", 2, ("b", "a"), leader="b"),
        GroupDemand("g3", "orders", 2, ("a", "c"), leader="a"),
    ]
    result = place(groups, nodes)
    check_valid(groups, nodes, result)
    # a held three members with capacity 2: g2's (not its leader) moved off.
    assert result.members["g1"] == ("a",)
    assert result.members["g3"] == ("a", "c")
    assert result.members["g2"] == ("b", "c")
    assert result.moves == 1


def test_selector_is_respected() -> None:
    nodes = [
        NodeSlot("a1", AMPLE, {"zone": "a"}),
        NodeSlot("a2", AMPLE, {"zone": "a"}),
        NodeSlot("b1", AMPLE, {"zone": "b"}),
    ]
    groups = [
        GroupDemand("za", "orders", 2, selector={"zone": "a"}),
        GroupDemand("zb", "orders", 2, ("a1",), selector={"zone": "b"}),
        GroupDemand("any", "orders", 3),
    ]
    result = place(groups, nodes)
    check_valid(groups, nodes, result)
    assert set(result.members["za"]) == {"a1", "a2"}
    # zb's member on a1 does not match its selector: dropped; only b1 matches.
    assert result.members["zb"] == ("b1",)
    assert result.unplaced == {"zb": 1}
    assert set(result.members["any"]) == {"a1", "a2", "b1"}


def test_leader_stays_when_replicas_shrink() -> None:
    nodes = slots(4)
    members = ("n00", "n01", "n02", "n03")
    one = place([GroupDemand("g", "orders", 1, members, leader="n02")], nodes)
    assert one.members["g"] == ("n02",)
    assert one.moves == 0
    two = place([GroupDemand("g", "orders", 2, members, leader="n03")], nodes)
    assert two.members["g"] == ("n00", "n03")  # leader plus the earliest, in member order
    assert two.moves == 0


def test_kept_members_keep_their_order_and_additions_follow() -> None:
    nodes = slots(6)
    group = GroupDemand("g", "orders", 4, ("n04", "gone", "n01"), leader="n04")
    result = place([group], nodes)
    assert result.members["g"][:2] == ("n04", "n01")
    assert len(result.members["g"]) == 4
    assert result.moves == 2


def test_replicas_above_node_count_are_unplaced() -> None:
    nodes = slots(2)
    result = place([GroupDemand("g", "orders", 3)], nodes)
    assert len(result.members["g"]) == 2
    assert result.unplaced == {"g": 1}


def test_no_nodes_and_no_groups() -> None:
    assert place([], []) == Placement({}, {}, 0)
    result = place(fresh(2), [])
    assert result.members == {"obj0000/0": (), "obj0001/0": ()}
    assert result.unplaced == {"obj0000/0": 3, "obj0001/0": 3}
    assert lower_bound(fresh(2), []) == 0


def test_invalid_input_is_rejected() -> None:
    with pytest.raises(ValueError):
        place(fresh(1), [NodeSlot("a", 1), NodeSlot("a", 1)])
    with pytest.raises(ValueError):
        place([GroupDemand("g", "t", 1), GroupDemand("g", "t", 1)], slots(1))
    with pytest.raises(ValueError):
        place([GroupDemand("g", "t", 0)], slots(1))
    with pytest.raises(ValueError):
        place([], [NodeSlot("a", -1)])


def test_distinct_nodes_can_make_the_bound_unreachable() -> None:
    # a holds 1, b and c 2 each: balance wants 2 everywhere, so only a is short. x lacks a
    # member but already sits on a: its new member must go to b or c, which then has 3, and one
    # more member has to move from there to a. The bound says 1, the best possible is 2.
    nodes = [NodeSlot("a", AMPLE), NodeSlot("b", AMPLE), NodeSlot("c", AMPLE)]
    groups = [
        GroupDemand("x", "orders", 2, ("a",)),
        GroupDemand("y1", "orders", 1, ("b",)),
        GroupDemand("y2", "orders", 1, ("b",)),
        GroupDemand("z1", "orders", 1, ("c",)),
        GroupDemand("z2", "orders", 1, ("c",)),
    ]
    result = place(groups, nodes)
    check_valid(groups, nodes, result)
    assert lower_bound(groups, nodes) == 1
    assert result.moves == optimum(groups, nodes) == 2
    assert max(spreads(groups, result, nodes).values()) == 0


def test_groups_spread_over_partner_nodes() -> None:
    # With ties broken by id alone, 60 fresh groups of 3 on 6 nodes sit on n00-n02 or n03-n05
    # only; losing n00 then leaves its groups on exactly the nodes that must take its members,
    # and every departure costs 12 moves over the bound (42 for 30). The tie-break on shared
    # groups mixes the node sets, so every single departure costs exactly the bound.
    nodes = slots(6)
    groups = follow(fresh(60), place(fresh(60), nodes))
    partners = {frozenset(g.members) for g in groups if g.type == "orders"}
    assert len(partners) > 2
    for gone in nodes:
        rest = [n for n in nodes if n != gone]
        result = place(groups, rest)
        held = sum(gone.id in g.members for g in groups)
        assert result.moves == held == lower_bound(groups, rest)


def test_refine_improves_on_fill_and_rebalance() -> None:
    # Kept: g0, g1 on n1; g2, g3 on n0; 6 members missing, shares 4/3/3 fit the kept counts.
    # Filling in key order puts g0, g1 on n2, then g2, g3 on n1 and n2 (they are on n0): n1
    # and n2 hold 4, n0 2, and the rebalance moves a kept member, 7 moves. The negative-cycle
    # search trades that for a placement needing only the 6 additions.
    nodes = [NodeSlot("n0", AMPLE), NodeSlot("n1", AMPLE), NodeSlot("n2", AMPLE)]
    groups = [
        GroupDemand("g0", "t", 2, ("n1",)),
        GroupDemand("g1", "t", 2, ("n1",)),
        GroupDemand("g2", "t", 3, ("n3", "n0")),
        GroupDemand("g3", "t", 3, ("n0",)),
    ]
    result = place(groups, nodes)
    check_valid(groups, nodes, result)
    assert result.moves == 6 == lower_bound(groups, nodes) == optimum(groups, nodes)
    assert max(spreads(groups, result, nodes).values()) <= 1


def test_shrinking_drops_the_members_balance_would_move() -> None:
    # 300 groups of 3 on 10 nodes go down to 2 replicas. Dropping each group's last member
    # left the nodes uneven (46 moves to even them); dropping the members on the fullest
    # nodes leaves little to move. (Leaders all stay through the cut, so a node can end up
    # holding only leaders; balance then moves some of them, which is allowed.)
    nodes = slots(10)
    groups = [replace(g, replicas=2) for g in follow(fresh(300), place(fresh(300), nodes))]
    result = place(groups, nodes)
    check_valid(groups, nodes, result)
    assert result.moves == lower_bound(groups, nodes) <= 15
    assert max(spreads(groups, result, nodes).values()) <= 1


def test_lower_bound_counts_departed_and_balance_moves() -> None:
    nodes = slots(3)
    groups = [
        GroupDemand("g1", "orders", 2, ("n00", "gone")),  # 1 missing
        GroupDemand("g2", "orders", 1, ("n00",)),
        GroupDemand("g3", "orders", 1, ("n00",)),
        GroupDemand("g4", "orders", 1, ("n00",)),
    ]
    # 5 wanted on 3 nodes: shares 2, 2, 1; n00 keeps 4, so 2 must leave it.
    assert lower_bound(groups, nodes) == 3
    assert place(groups, nodes).moves == 3


def test_large_instance_is_fast_enough_to_run_in_a_test() -> None:
    # The benchmark measures this properly (bench/placement.py); here only a loose sanity
    # check that nothing is quadratic: 10k groups on 50 nodes.
    nodes = slots(50)
    groups = fresh(10_000)
    result = place(groups, nodes)
    assert result.moves == 30_000 == lower_bound(groups, nodes)
    after = follow(groups, result)
    result = place(after, nodes[1:])
    assert result.moves == lower_bound(after, nodes[1:])
    assert max(spreads(after, result, nodes[1:]).values()) <= 1


# -- property tests ---------------------------------------------------------------------------

NODE_IDS = [f"n{i}" for i in range(8)]
NEW_IDS = ["m0", "m1", "m2"]
GONE_IDS = ["gone0", "gone1"]


@dataclass(frozen=True)
class Scenario:
    groups: list[GroupDemand]
    nodes: list[NodeSlot]
    start: str  # "fresh", "previous" (a placement by place) or "arbitrary" members


@st.composite
def scenarios(draw: st.DrawFn, constrained: bool = False) -> Scenario:
    """Groups and nodes before a change, their members from one of three starts, then nodes
    departing and arriving. Unconstrained: ample capacity, no selectors, replicas capped at the
    node count after the change."""

    def node(node_id: str) -> NodeSlot:
        if not constrained:
            return NodeSlot(node_id, AMPLE)
        zone = draw(st.sampled_from(["a", "b"]))
        return NodeSlot(node_id, draw(st.integers(0, 6)), {"zone": zone})

    before = [
        node(i)
        for i in draw(st.lists(st.sampled_from(NODE_IDS), min_size=1, max_size=7, unique=True))
    ]
    selectors: list[Mapping[str, str]] = [{}]
    if constrained:
        selectors += [{"zone": "a"}, {"zone": "b"}]
    specs = draw(
        st.lists(
            st.tuples(st.sampled_from(TYPES), st.integers(1, 3), st.sampled_from(selectors)),
            max_size=10,
        )
    )
    groups = [GroupDemand(f"g{i}", t, r, selector=sel) for i, (t, r, sel) in enumerate(specs)]
    start = draw(st.sampled_from(["fresh", "previous", "arbitrary"]))
    if start == "previous":
        groups = follow(groups, place(groups, before))
    elif start == "arbitrary":
        known = [n.id for n in before] + GONE_IDS
        out = []
        for g in groups:
            members = tuple(draw(st.lists(st.sampled_from(known), max_size=4, unique=True)))
            leader = draw(st.sampled_from(members)) if members else None
            out.append(replace(g, members=members, leader=leader))
        groups = out
    departing = draw(st.sets(st.sampled_from([n.id for n in before])))
    arriving = draw(st.lists(st.sampled_from(NEW_IDS), max_size=3, unique=True))
    nodes = [n for n in before if n.id not in departing] + [node(i) for i in arriving]
    if not constrained:
        if not nodes:
            nodes = [node(NEW_IDS[0])]
        groups = [replace(g, replicas=min(g.replicas, len(nodes))) for g in groups]
    return Scenario(groups, nodes, start)


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_unconstrained_placement_is_balanced_and_minimal(s: Scenario) -> None:
    result = place(s.groups, s.nodes)
    check_valid(s.groups, s.nodes, result)
    assert result.unplaced == {}
    assert all(v <= 1 for v in spreads(s.groups, result, s.nodes).values())
    assert result.moves == additions(s.groups, s.nodes, result)
    bound = lower_bound(s.groups, s.nodes)
    assert result.moves >= bound
    kept_all = kept_members(s.groups, s.nodes)
    kept = [len(kept_all[g.key]) for g in s.groups]
    no_missing = all(k == g.replicas for k, g in zip(kept, s.groups, strict=True))
    if no_missing or not any(kept):
        event("bound provably reached")
        assert result.moves == bound
    per_type = Counter(g.type for g in s.groups)
    if len(s.nodes) <= 5 and all(v <= 7 for v in per_type.values()):
        event("checked against the exact optimum")
        assert result.moves == optimum(s.groups, s.nodes)
    event(f"start {s.start}, moves {'=' if result.moves == bound else '>'} bound")


@SETTINGS
@given(scenarios(constrained=True))
def test_constrained_placement_respects_capacity_selectors_and_distinct_nodes(
    s: Scenario,
) -> None:
    result = place(s.groups, s.nodes)
    check_valid(s.groups, s.nodes, result)
    # Members evicted from a node over capacity are not kept, so an eviction put back on its
    # node is a move that ``additions`` (which ignores capacity) does not see.
    added = additions(s.groups, s.nodes, result)
    assert added <= result.moves <= added + evictions(s.groups, s.nodes)


@SETTINGS
@given(st.booleans().flatmap(lambda c: scenarios(constrained=c)), st.randoms(use_true_random=False))
def test_same_input_in_any_order_gives_the_same_placement(s: Scenario, rnd: random.Random) -> None:
    result = place(s.groups, s.nodes)
    groups, nodes = list(s.groups), list(s.nodes)
    rnd.shuffle(groups)
    rnd.shuffle(nodes)
    assert place(groups, nodes) == result
    assert lower_bound(groups, nodes) == lower_bound(s.groups, s.nodes)


@SETTINGS
@given(st.booleans().flatmap(lambda c: scenarios(constrained=c)))
def test_placing_a_placement_again_moves_nothing(s: Scenario) -> None:
    result = place(s.groups, s.nodes)
    again = place(follow(s.groups, result), s.nodes)
    assert again.moves == 0
    assert again.members == result.members
    assert again.unplaced == result.unplaced


@settings(max_examples=60, deadline=None)
@given(
    st.integers(8, 20),
    st.integers(20, 150),
    st.integers(0, 2),
    st.integers(0, 2),
    st.randoms(use_true_random=False),
)
def test_departures_and_arrivals_at_scale(
    n_nodes: int, n_groups: int, departing: int, arriving: int, rnd: random.Random
) -> None:
    # Replicas well below the node count, a balanced start, then nodes leave and join.
    nodes = slots(n_nodes)
    groups = [
        GroupDemand(f"obj{i:03d}/0", rnd.choice(TYPES), rnd.randint(1, 3)) for i in range(n_groups)
    ]
    groups = follow(groups, place(groups, nodes))
    gone = set(rnd.sample([n.id for n in nodes], departing))
    after = [n for n in nodes if n.id not in gone] + slots(arriving, prefix="new")
    result = place(groups, after)
    check_valid(groups, after, result)
    assert result.unplaced == {}
    assert all(v <= 1 for v in spreads(groups, result, after).values())
    bound = lower_bound(groups, after)
    assert result.moves >= bound
    assert result.moves >= sum(m in gone for g in groups for m in g.members)
    if not gone:
        # Nothing is missing: only balance moves, which reach the bound (module docstring).
        assert result.moves == bound
