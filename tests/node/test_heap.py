"""The node's heap keeper (:mod:`baton.node.heap`), on the injected clock: what it freezes is
left out of collections (so full ones stay short), and its thaw collects the cycles that became
garbage meanwhile; a stop leaves nothing frozen."""

from __future__ import annotations

import gc
import weakref

from baton.node.heap import HeapKeeper
from baton.testing.clock import ManualClock


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


async def test_frozen_cycles_wait_for_the_thaw_and_a_stop_thaws() -> None:
    clock = ManualClock()
    keeper = HeapKeeper(clock, freeze_every=10, thaw_every=60)
    keeper.start()
    try:
        cycle = Node()
        gone = weakref.ref(cycle)
        await clock.advance(10)
        assert gc.get_freeze_count() > 0
        del cycle
        gc.collect()
        assert gone() is not None  # frozen: a collection does not look at it
        await clock.advance(50)  # the thaw: everything is collected once, then frozen again
        assert gone() is None
        assert gc.get_freeze_count() > 0
    finally:
        await keeper.stop()
    assert gc.get_freeze_count() == 0


async def test_what_is_made_after_a_freeze_is_collected_as_usual() -> None:
    clock = ManualClock()
    keeper = HeapKeeper(clock, freeze_every=10, thaw_every=600)
    keeper.start()
    try:
        await clock.advance(10)
        cycle = Node()
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None
    finally:
        await keeper.stop()


async def test_a_full_collection_freezes_its_survivors_at_once() -> None:
    """No clock step: the survivors of a full collection are frozen when it ends, so the next
    one (in a subscribe storm, a few seconds later) does not walk them again."""
    clock = ManualClock()
    keeper = HeapKeeper(clock, freeze_every=10, thaw_every=600)
    keeper.start()
    try:
        gc.unfreeze()
        survivor = [Node() for _ in range(100)]
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert gc.get_freeze_count() >= len(survivor)
    finally:
        await keeper.stop()
    assert gc.get_freeze_count() == 0
    gc.collect(0)  # a young collection after the stop freezes nothing
    gc.collect()
    assert gc.get_freeze_count() == 0
