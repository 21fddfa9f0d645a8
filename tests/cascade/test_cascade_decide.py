"""The cascade's pure decisions (:mod:`baton.cascade.decide`) over random sets: a provider
change never makes a cycle or takes a dead, unreachable, leaf or trimmed provider; a failover
promotes the right carrier; an order of work puts every node after its provider."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from baton.cascade.decide import (
    Problem,
    Seen,
    candidates,
    carriers,
    chain,
    new_root,
    provider_problem,
    subscription_order,
)
from baton.cascade.model import NodeState, Role

NAMES = [f"n{i}" for i in range(6)]


@st.composite
def sets(draw: st.DrawFn) -> dict[str, Seen]:
    """Members with any roles and providers (cycles and dangling providers included), some
    dead, some unreachable, with ticks and merge-leaves."""
    n = draw(st.integers(2, len(NAMES)))
    names = NAMES[:n]
    out = {}
    for name in names:
        role = draw(st.sampled_from([Role.ROOT, Role.BRANCH, Role.LEAF]))
        provider = None if role is Role.ROOT else draw(st.sampled_from([*names, "gone"]))
        state = NodeState(name, "S", role, provider, draw(st.integers(0, 9)), 1, False, 0)
        reachable = draw(st.booleans()) or draw(st.booleans())
        out[name] = Seen(
            name,
            dead=draw(st.booleans()) and draw(st.booleans()),
            state=state if reachable else None,
            last_tick=draw(st.none() | st.integers(1, 20)),
            holds_tick=draw(st.booleans()),
            merging=draw(st.booleans()) and role.carries_queue,
        )
    return out


def states_of(seen: dict[str, Seen]) -> dict[str, NodeState]:
    return {n: s.state for n, s in seen.items() if s.state is not None}


@given(sets(), st.sampled_from(NAMES))
def test_a_candidate_is_a_live_queue_carrier_above_no_one_it_provides(
    seen: dict[str, Seen], node: str
) -> None:
    states = states_of(seen)
    found = candidates(node, seen)
    for name, s in seen.items():
        if name in found:
            assert name != node and not s.dead and s.state is not None
            assert s.state.role.carries_queue and s.holds_tick is not False
            assert node not in chain(name, states)  # no cycle: node is not above it
        elif name != node:
            assert provider_problem(node, s, states) is not None
    if node in seen:
        assert provider_problem(node, seen[node], states) is Problem.ITSELF


@given(sets())
def test_a_chain_ends_even_in_a_cycle(seen: dict[str, Seen]) -> None:
    states = states_of(seen)
    for name in states:
        found = chain(name, states)
        assert len(found) == len(set(found)) and name not in found
        for a, b in zip([name, *found], found, strict=False):
            assert states[a].provider == b


@given(sets(), st.sampled_from(NAMES))
def test_a_failover_promotes_the_merging_carrier_then_the_furthest(
    seen: dict[str, Seen], dead_root: str
) -> None:
    found = carriers(seen, dead_root)
    assert all(s.state is not None and s.state.role.carries_queue for s in found)
    assert all(not s.dead and s.name != dead_root and s.last_tick for s in found)
    chosen = new_root(seen, dead_root)
    if not found:
        assert chosen is None
        return
    assert chosen is not None
    best = seen[chosen]
    assert best in found
    merging = [s for s in found if s.merging]
    pool = merging or found
    assert best in pool
    assert best.last_tick == max(s.last_tick or 0 for s in pool)


@given(sets())
def test_every_node_comes_after_its_provider(seen: dict[str, Seen]) -> None:
    states = states_of(seen)
    order = subscription_order(states)
    assert sorted(order) == sorted(states)
    for name, st_ in states.items():
        p = st_.provider
        if p in states and order.index(name) < order.index(p):
            # Only a node in a cycle, or below one, can come before its provider.
            assert name in chain(p, states) or not _reaches_root(p, states)


def _reaches_root(name: str, states: dict[str, NodeState]) -> bool:
    top = chain(name, states)
    last = top[-1] if top else name
    return last in states and states[last].role is Role.ROOT
