"""Benchmark: the pure placement function of the placement controller (in-process, no servers).

Two questions:

* **Time.** ``place`` for 10k objects (one partition each, replicas 3, 3 types) on 50 nodes,
  from nothing (fresh) and after one node departs (from the fresh placement), plus the same with
  ``lower_bound`` computed too: the median of :data:`REPEATS` runs after one untimed warm-up.
* **Moves.** 300 groups (replicas 3, 3 types) placed on 10 nodes; one node departs, then
  returns. ``moves / lower_bound`` for each (1.0 is the fewest moves balance allows). The
  departure is repeated for each of the 10 nodes, reported as the total ratio and the worst one.

Run alone: ``python -m bench.placement``.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from baton.placement.plan import GroupDemand, NodeSlot, Placement, lower_bound, place

REPEATS = 5
TYPES = ("orders", "users", "events")
#: Capacity no placement here reaches: the benchmark is about balance, not about capacity.
AMPLE = 1_000_000
LARGE = (10_000, 50)  # objects, nodes
SMALL = (300, 10)


def _groups(n: int) -> list[GroupDemand]:
    return [GroupDemand(f"obj{i:05d}/0", TYPES[i % len(TYPES)], 3) for i in range(n)]


def _nodes(n: int) -> list[NodeSlot]:
    return [NodeSlot(f"node{i:02d}", AMPLE) for i in range(n)]


def _follow(groups: Sequence[GroupDemand], result: Placement) -> list[GroupDemand]:
    """The groups as the next pass sees them (leader: first member)."""
    out = []
    for g in groups:
        members = result.members[g.key]
        out.append(replace(g, members=members, leader=members[0] if members else None))
    return out


def _spread(groups: Sequence[GroupDemand], result: Placement, nodes: Sequence[NodeSlot]) -> int:
    """The largest per-type difference between the fullest and the emptiest node."""
    worst = 0
    for t in TYPES:
        counts = Counter({n.id: 0 for n in nodes})
        for g in groups:
            if g.type == t:
                counts.update(result.members[g.key])
        worst = max(worst, max(counts.values()) - min(counts.values()))
    return worst


def _median_time(run: Callable[[], object]) -> float:
    run()  # warm-up: first-call costs are not what a controller pays every pass
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _timing(say: Callable[[str], None]) -> dict[str, object]:
    n_groups, n_nodes = LARGE
    groups, nodes = _groups(n_groups), _nodes(n_nodes)
    fresh = place(groups, nodes)
    after = _follow(groups, fresh)
    rest = nodes[1:]
    departed = place(after, rest)
    out: dict[str, object] = {
        "objects": n_groups,
        "nodes": n_nodes,
        "fresh_s": _median_time(lambda: place(groups, nodes)),
        "fresh_with_bound_s": _median_time(
            lambda: (place(groups, nodes), lower_bound(groups, nodes))
        ),
        "departure_s": _median_time(lambda: place(after, rest)),
        "departure_with_bound_s": _median_time(
            lambda: (place(after, rest), lower_bound(after, rest))
        ),
        "fresh_moves": fresh.moves,
        "departure_moves": departed.moves,
        "departure_bound": lower_bound(after, rest),
        "large_spread": max(_spread(groups, fresh, nodes), _spread(after, departed, rest)),
    }
    say(
        f"  placement {n_groups} objects on {n_nodes} nodes: fresh "
        f"{out['fresh_s']:.3f} s, one node departed {out['departure_s']:.3f} s"
    )
    return out


def _moves(say: Callable[[str], None]) -> dict[str, object]:
    n_groups, n_nodes = SMALL
    groups, nodes = _groups(n_groups), _nodes(n_nodes)
    start = _follow(groups, place(groups, nodes))
    loss_moves = loss_bound = 0
    worst = 1.0
    first: dict[str, object] = {}
    for i, gone in enumerate(nodes):
        rest = nodes[:i] + nodes[i + 1 :]
        lost = place(start, rest)
        bound = lower_bound(start, rest)
        loss_moves += lost.moves
        loss_bound += bound
        worst = max(worst, lost.moves / bound if bound else 1.0)
        if i == 0:
            # The same node comes back: the placement rebalances onto it.
            back_groups = _follow(start, lost)
            back = place(back_groups, nodes)
            back_bound = lower_bound(back_groups, nodes)
            first = {
                "loss_node": gone.id,
                "loss_moves": lost.moves,
                "loss_bound": bound,
                "loss_ratio": lost.moves / bound if bound else 1.0,
                "return_moves": back.moves,
                "return_bound": back_bound,
                "return_ratio": back.moves / back_bound if back_bound else 1.0,
                "small_spread": max(_spread(start, lost, rest), _spread(back_groups, back, nodes)),
            }
    out: dict[str, object] = {
        "small_objects": n_groups,
        "small_nodes": n_nodes,
        **first,
        "loss_every_node_moves": loss_moves,
        "loss_every_node_bound": loss_bound,
        "loss_every_node_ratio": loss_moves / loss_bound if loss_bound else 1.0,
        "loss_worst_ratio": worst,
    }
    say(
        f"  placement moves, 1 of {n_nodes} nodes lost: {first['loss_moves']} "
        f"(bound {first['loss_bound']}), returned: {first['return_moves']} "
        f"(bound {first['return_bound']})"
    )
    return out


def placement_bench(say: Callable[[str], None]) -> dict[str, object]:
    """Time ``place`` at 10k objects on 50 nodes and compare its moves with ``lower_bound``
    when one of 10 nodes is lost and comes back; returns the numbers (seconds, counts,
    ratios)."""
    return {**_timing(say), **_moves(say)}


def _print(results: dict[str, object]) -> None:
    r = results
    print(f"place, {r['objects']} objects (replicas 3, 3 types) on {r['nodes']} nodes")
    print(f"  median of {REPEATS} runs:")
    print(f"    fresh                  {r['fresh_s']:.3f} s ({r['fresh_moves']} moves)")
    print(f"    fresh + lower_bound    {r['fresh_with_bound_s']:.3f} s")
    print(
        f"    one node departed      {r['departure_s']:.3f} s "
        f"({r['departure_moves']} moves, bound {r['departure_bound']})"
    )
    print(f"    departed + lower_bound {r['departure_with_bound_s']:.3f} s")
    print(f"  largest per-type spread: {r['large_spread']}")
    print()
    print(f"moves, {r['small_objects']} groups (replicas 3, 3 types) on {r['small_nodes']} nodes")
    print(
        f"  {r['loss_node']} lost:     {r['loss_moves']} moves, bound {r['loss_bound']}, "
        f"ratio {r['loss_ratio']:.3f}"
    )
    print(
        f"  {r['loss_node']} returns:  {r['return_moves']} moves, bound {r['return_bound']}, "
        f"ratio {r['return_ratio']:.3f}"
    )
    print(
        f"  each node lost in turn: {r['loss_every_node_moves']} moves, bound "
        f"{r['loss_every_node_bound']}, ratio {r['loss_every_node_ratio']:.3f} "
        f"(worst {r['loss_worst_ratio']:.3f})"
    )
    print(f"  largest per-type spread: {r['small_spread']}")


if __name__ == "__main__":
    _print(placement_bench(lambda message: print(message, flush=True)))
