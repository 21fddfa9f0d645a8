"""A node's state (live, suspect, dead) only moves forward: suspect from its membership lapse
(as the store keeps it, or first seen by the change feed or a status read), dead ``grace``
later (issue 10: a SIGKILLed node showed dead for ~20 ms before it showed suspect)."""

from __future__ import annotations

import itertools
import json

from baton.keys import MEMBERS, NODES
from baton.node.status import Lapses, NodeState, cluster_status, node_state
from baton.store import Store
from baton.testing import await_for

GRACE = 4.0
ORDER: dict[NodeState, int] = {NodeState.LIVE: 0, NodeState.SUSPECT: 1, NodeState.DEAD: 2}


def test_node_state_with_explicit_times() -> None:
    assert node_state(held=True, lapsed_at=None, now=100.0, grace=GRACE) == "live"
    assert node_state(held=True, lapsed_at=99.0, now=100.0, grace=GRACE) == "live"
    assert node_state(held=False, lapsed_at=100.0, now=100.0, grace=GRACE) == "suspect"
    assert node_state(held=False, lapsed_at=100.0, now=103.999, grace=GRACE) == "suspect"
    assert node_state(held=False, lapsed_at=100.0, now=104.0, grace=GRACE) == "dead"
    # No lapse seen: this observer never knew it live (or has no history, as the CLI).
    assert node_state(held=False, lapsed_at=None, now=100.0, grace=GRACE) == "dead"


def test_the_feed_arriving_after_a_status_read_moves_nothing_back() -> None:
    # The sequence: the lease stops being listed at 2.8 s (store clock past its
    # expiry) before the feed's "expired" change is read at 2.82 s.
    lapses = Lapses()
    lapses.joined("n1")
    states = []
    for now, event in [
        (1.0, "held"),
        (2.8, "read"),
        (2.82, "feed"),
        (2.83, "read"),
        (6.79, "read"),
        (6.8, "read"),
        (9.0, "read"),
    ]:
        if event == "feed":
            lapses.lapsed("n1", now)
            continue
        lapsed_at = lapses.observe("n1", event == "held", now)
        states.append(
            (now, node_state(held=event == "held", lapsed_at=lapsed_at, now=now, grace=GRACE))
        )
    assert states == [
        (1.0, "live"),
        (2.8, "suspect"),
        (2.83, "suspect"),
        (6.79, "suspect"),
        (6.8, "dead"),
        (9.0, "dead"),
    ]


def test_every_order_of_sightings_gives_one_monotone_sequence() -> None:
    # The lapse at several times, its feed change read after several delays, status reads
    # in between: the state never goes back, and turns dead exactly GRACE after the first
    # sighting (feed or read, whichever came first).
    reads = [0.1, 0.2, 0.5, 1.0, 3.9, 4.2, 4.6, 9.0]
    for lapse, delay in itertools.product([0.15, 0.3, 0.6], [0.01, 0.55, 2.05, 5.05]):
        feed_at = lapse + delay
        first = min([feed_at, *(t for t in reads if t >= lapse)])
        lapses = Lapses()
        lapses.joined("n")
        seq: list[NodeState] = []
        for now in sorted([*reads, feed_at]):
            if now == feed_at:
                lapses.lapsed("n", now)
                continue
            held = now < lapse
            state = node_state(
                held=held, lapsed_at=lapses.observe("n", held, now), now=now, grace=GRACE
            )
            want = "live" if held else "suspect" if now - first < GRACE else "dead"
            assert state == want, (lapse, delay, now)
            seq.append(state)
        assert [ORDER[s] for s in seq] == sorted(ORDER[s] for s in seq), seq


def test_back_and_down_again_is_a_new_lapse() -> None:
    lapses = Lapses()
    lapses.joined("n")
    assert lapses.observe("n", False, 10.0) == 10.0
    lapses.joined("n")  # it came back (the feed's "acquired")
    assert lapses.observe("n", True, 11.0) is None
    lapses.lapsed("n", 20.0)  # down again: counted from this lapse, not the first
    assert lapses.observe("n", False, 20.5) == 20.0
    # A node this observer never saw live is dead at once, until it joins.
    assert lapses.observe("other", False, 20.5) is None


async def test_a_lapse_the_feed_has_not_delivered_yet_is_suspect(store: Store) -> None:
    # Nobody reads the feed here: the lease just runs out at the store. The old status said
    # dead (no feed entry seen yet), then suspect once the feed caught up.
    await store.put(NODES + "x", json.dumps({"id": "x", "address": "x:1"}).encode())
    lease = await store.acquire(MEMBERS + "x", "x", 0.3)
    assert lease is not None
    lapses = Lapses()
    st = await cluster_status(store, GRACE, lapses)
    assert [n["state"] for n in st["nodes"]] == ["live"]
    await await_for(lambda: _gone(store), timeout=5)
    st = await cluster_status(store, GRACE, lapses)
    assert [n["state"] for n in st["nodes"]] == ["suspect"]
    # Without any history (the CLI), the store's lapse says the same (it used to say dead).
    assert [n["state"] for n in (await cluster_status(store, GRACE))["nodes"]] == ["suspect"]
    assert [n["state"] for n in (await cluster_status(store, 0.0))["nodes"]] == ["dead"]


async def _gone(store: Store) -> bool:
    return await store.get_lease(MEMBERS + "x") is None
