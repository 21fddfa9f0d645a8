"""Benchmark 7: the pure placement function of the placement controller (in-process, no servers).

Two questions:

* **Time.** ``place`` for 10k objects (one partition each, replicas 3, 3 types) on 50 nodes,
  from nothing (fresh) and after one node departs (from the fresh placement), plus the same with
  ``lower_bound`` computed too: the median of :data:`REPEATS` runs after one untimed warm-up.
* **Moves.** 300 groups (replicas 3, 3 types) placed on 10 nodes; one node departs, then
  returns. ``moves / lower_bound`` for each (1.0 is the fewest moves balance allows). This is
  repeated for each of the 10 nodes, reported as the totals and the worst ratio.

Run alone: ``python -m bench.placement``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from baton.placement.plan import GroupDemand, NodeSlot, Placement, lower_bound, place
from bench.common import loadavg

REPEATS = 5
TYPES = ("orders", "users", "events")
REPLICAS = 3
#: Capacity no placement here reaches: the benchmark is about balance, not about capacity.
AMPLE = 1_000_000
LARGE = (10_000, 50)  # objects, nodes
SMALL = (300, 10)
#: Target for one ``place`` call on LARGE (seconds).
TIME_TARGET = 1.0


def move_ratio(moves: int, bound: int) -> float:
    """``moves / bound``; 1.0 when both are 0, infinite when moves are made against a 0 bound."""
    if bound:
        return moves / bound
    return 1.0 if moves == 0 else math.inf


@dataclass(frozen=True, slots=True)
class NodeLoss:
    """One node of the small cluster departs, then the same node returns."""

    node: str
    loss_moves: int
    loss_bound: int
    return_moves: int
    return_bound: int
    #: The largest per-type spread (fullest minus emptiest node) after the loss or the return.
    spread: int

    @property
    def loss_ratio(self) -> float:
        return move_ratio(self.loss_moves, self.loss_bound)

    @property
    def return_ratio(self) -> float:
        return move_ratio(self.return_moves, self.return_bound)


@dataclass
class PlacementResult:
    """Timings of ``place`` on the large case and moves versus ``lower_bound`` on the small
    one. Times are seconds, one entry per timed run."""

    objects: int
    nodes: int
    replicas: int
    types: int
    fresh: list[float] = field(default_factory=list)
    fresh_with_bound: list[float] = field(default_factory=list)
    departure: list[float] = field(default_factory=list)
    departure_with_bound: list[float] = field(default_factory=list)
    fresh_moves: int = 0
    fresh_bound: int = 0
    departure_moves: int = 0
    departure_bound: int = 0
    #: The largest per-type spread of the large case (fresh, and after the departure).
    large_spread: int = 0
    small_objects: int = 0
    small_nodes: int = 0
    losses: list[NodeLoss] = field(default_factory=list)
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def fresh_s(self) -> float:
        return statistics.median(self.fresh) if self.fresh else math.nan

    @property
    def departure_s(self) -> float:
        return statistics.median(self.departure) if self.departure else math.nan

    @property
    def fresh_with_bound_s(self) -> float:
        return statistics.median(self.fresh_with_bound) if self.fresh_with_bound else math.nan

    @property
    def departure_with_bound_s(self) -> float:
        t = self.departure_with_bound
        return statistics.median(t) if t else math.nan

    @property
    def time_ok(self) -> bool:
        """Both ``place`` medians (fresh, one node departed) under :data:`TIME_TARGET`."""
        return max(self.fresh_s, self.departure_s) < TIME_TARGET

    @property
    def loss_moves(self) -> int:
        return sum(x.loss_moves for x in self.losses)

    @property
    def loss_bound(self) -> int:
        return sum(x.loss_bound for x in self.losses)

    @property
    def return_moves(self) -> int:
        return sum(x.return_moves for x in self.losses)

    @property
    def return_bound(self) -> int:
        return sum(x.return_bound for x in self.losses)

    @property
    def worst_loss_ratio(self) -> float:
        return max((x.loss_ratio for x in self.losses), default=math.nan)

    @property
    def worst_return_ratio(self) -> float:
        return max((x.return_ratio for x in self.losses), default=math.nan)

    @property
    def small_spread(self) -> int:
        return max((x.spread for x in self.losses), default=0)

    @property
    def moves_ok(self) -> bool:
        """No loss and no return made more moves than the lower bound (ratio at most 1.0)."""
        return bool(self.losses) and all(
            x.loss_moves <= x.loss_bound and x.return_moves <= x.return_bound for x in self.losses
        )


def _groups(n: int) -> list[GroupDemand]:
    return [GroupDemand(f"obj{i:05d}/0", TYPES[i % len(TYPES)], REPLICAS) for i in range(n)]


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


def _times(run: Callable[[], object]) -> list[float]:
    """REPEATS timed runs of ``run`` after one untimed warm-up (first-call costs are not what a
    controller pays every pass)."""
    run()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return times


def _timing(res: PlacementResult, say: Callable[[str], None]) -> None:
    groups, nodes = _groups(res.objects), _nodes(res.nodes)
    fresh = place(groups, nodes)
    after = _follow(groups, fresh)
    rest = nodes[1:]
    departed = place(after, rest)
    res.fresh = _times(lambda: place(groups, nodes))
    res.fresh_with_bound = _times(lambda: (place(groups, nodes), lower_bound(groups, nodes)))
    res.departure = _times(lambda: place(after, rest))
    res.departure_with_bound = _times(lambda: (place(after, rest), lower_bound(after, rest)))
    res.fresh_moves = fresh.moves
    res.fresh_bound = lower_bound(groups, nodes)
    res.departure_moves = departed.moves
    res.departure_bound = lower_bound(after, rest)
    res.large_spread = max(_spread(groups, fresh, nodes), _spread(after, departed, rest))
    say(
        f"placement of {res.objects} objects on {res.nodes} nodes: fresh {res.fresh_s:.3f} s, "
        f"one node departed {res.departure_s:.3f} s (medians of {REPEATS})"
    )


def _moves(res: PlacementResult, say: Callable[[str], None]) -> None:
    groups, nodes = _groups(res.small_objects), _nodes(res.small_nodes)
    start = _follow(groups, place(groups, nodes))
    for i, gone in enumerate(nodes):
        rest = nodes[:i] + nodes[i + 1 :]
        lost = place(start, rest)
        # The same node comes back: the placement rebalances onto it.
        back_groups = _follow(start, lost)
        back = place(back_groups, nodes)
        loss = NodeLoss(
            node=gone.id,
            loss_moves=lost.moves,
            loss_bound=lower_bound(start, rest),
            return_moves=back.moves,
            return_bound=lower_bound(back_groups, nodes),
            spread=max(_spread(start, lost, rest), _spread(back_groups, back, nodes)),
        )
        res.losses.append(loss)
    say(
        f"placement moves on {res.small_nodes} nodes, each node lost in turn: "
        f"{res.loss_moves} (bound {res.loss_bound}); each returned: {res.return_moves} "
        f"(bound {res.return_bound})"
    )


def placement_bench(say: Callable[[str], None]) -> PlacementResult:
    """Time ``place`` at 10k objects on 50 nodes and compare its moves with ``lower_bound``
    when each of 10 nodes is lost and comes back."""
    res = PlacementResult(*LARGE, REPLICAS, len(TYPES))
    res.small_objects, res.small_nodes = SMALL
    load0 = loadavg()
    _timing(res, say)
    _moves(res, say)
    res.load = (load0, loadavg())
    return res


def _print(r: PlacementResult) -> None:
    print(f"place, {r.objects} objects (replicas {r.replicas}, {r.types} types) on {r.nodes} nodes")
    print(f"  median of {REPEATS} runs:")
    print(f"    fresh                  {r.fresh_s:.3f} s ({r.fresh_moves} moves)")
    print(f"    fresh + lower_bound    {r.fresh_with_bound_s:.3f} s")
    print(
        f"    one node departed      {r.departure_s:.3f} s "
        f"({r.departure_moves} moves, bound {r.departure_bound})"
    )
    print(f"    departed + lower_bound {r.departure_with_bound_s:.3f} s")
    print(f"  largest per-type spread: {r.large_spread}")
    print()
    print(f"moves, {r.small_objects} groups (replicas {r.replicas}) on {r.small_nodes} nodes")
    for x in r.losses:
        print(
            f"  {x.node} lost: {x.loss_moves} moves, bound {x.loss_bound}; returns: "
            f"{x.return_moves} moves, bound {x.return_bound}"
        )
    print(
        f"  total: lost {r.loss_moves} / {r.loss_bound} (worst {r.worst_loss_ratio:.3f}), "
        f"returned {r.return_moves} / {r.return_bound} (worst {r.worst_return_ratio:.3f})"
    )
    print(f"  largest per-type spread: {r.small_spread}")


if __name__ == "__main__":
    _print(placement_bench(lambda message: print(message, flush=True)))
