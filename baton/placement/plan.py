"""Where control-group members go: a pure function from demands and nodes to a placement.

:func:`place` works in four phases on integer indices (nodes sorted by id, groups by key, so the
input order never matters):

1. **keep**: every current member on a node that is given and matches the group's selector stays,
   up to ``replicas`` (the leader first, then the members on the least loaded nodes); members
   beyond a node's capacity are evicted (non-leaders first). A move is a member added beyond
   the kept ones, so a member dropped here and placed on the same node again counts as one.
2. **fill**: missing members go, group by group in key order, to the eligible node with the lowest
   (count of the group's type, total members, groups of the type it already shares with the
   group's members, id), found in buckets per (type, selector). The third key spreads
   the groups of a node over many partner nodes: with ties broken by id alone, groups of a type
   fill the same node sets over and over (on 6 nodes with 3 replicas, every group is on n0-n2 or
   n3-n5), and when a node departs, the survivors of its groups then sit on exactly the nodes that
   must take its members, which the distinct-node rule forbids (40% more moves than the bound in
   that example, where the spread placement needs none).
3. **rebalance**: per type, while a node holds at least two more members of the type than another
   and a member can move between them, move one from the fullest to the emptiest.
4. **refine**: only when a type made more moves than :func:`lower_bound` allows for it, cancel
   negative cycles in a small graph over the nodes (min-cost circulation), which makes the
   placement of that type one with the fewest moves among those with the same balance.

Phases 2-4 repeat until nothing changes (only constraints can make them interact), so applying
:func:`place` to its own output makes no move.

:func:`lower_bound` is the number of moves balance strictly needs. It is what :func:`place` makes
whenever the members to add can reach the nodes short of their share; it is not reachable when the
distinct-node rule forbids that (a group missing a member already sits on every node below its
share, so one more member has to go through a full node), and then :func:`place` makes the fewest
moves possible, which is more (see ``tests/placement/test_plan.py``).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["GroupDemand", "NodeSlot", "Placement", "lower_bound", "place"]


@dataclass(frozen=True, slots=True)
class NodeSlot:
    """A node that may receive members: live and not draining."""

    id: str
    capacity: int  # max members (of all types) on this node; >= 0
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupDemand:
    """One control group (a partition of an object) and where its members are now."""

    key: str  # e.g. "orders/0"; unique
    type: str  # object type, balance is per type
    replicas: int  # wanted members, >= 1
    # Current members, in order; may name nodes not in the node list (departed or draining).
    members: tuple[str, ...] = ()
    leader: str | None = None  # current leader (one of members) or None
    selector: Mapping[str, str] = field(default_factory=dict)  # node must have all these labels


@dataclass(frozen=True, slots=True)
class Placement:
    """The result of :func:`place`."""

    # key -> new members (kept members keep their order, additions appended)
    members: dict[str, tuple[str, ...]]
    # key -> members that could not be placed (no eligible node or capacity); only keys with > 0
    unplaced: dict[str, int]
    # members added to groups (each addition = one move)
    moves: int


# -- the problem in indices -----------------------------------------------------------------


@dataclass(slots=True)
class _Problem:
    """The input in canonical order, with the members each group keeps."""

    node_ids: list[str]  # sorted; a node's index is its rank, so index order is id order
    caps: list[int]
    groups: list[GroupDemand]  # sorted by key
    n_types: int
    g_type: list[int]
    g_pool: list[int]  # pool = (type, selector): groups of a pool have the same eligible nodes
    g_leader: list[int]  # node index of the leader, -1 if none
    pool_type: list[int]
    pool_ok: list[list[bool]]  # pool -> node -> node matches the selector
    pool_nodes: list[list[int]]
    kept: list[list[int]]  # per group, kept member node indices, in member order


def _prepare(groups: Sequence[GroupDemand], nodes: Sequence[NodeSlot]) -> _Problem:
    slots = sorted(nodes, key=lambda s: s.id)
    node_ids = [s.id for s in slots]
    if len(set(node_ids)) != len(node_ids):
        raise ValueError("duplicate node id")
    for s in slots:
        if s.capacity < 0:
            raise ValueError(f"node {s.id}: negative capacity")
    ordered = sorted(groups, key=lambda g: g.key)
    keys = [g.key for g in ordered]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate group key")
    index = {nid: i for i, nid in enumerate(node_ids)}
    type_names = sorted({g.type for g in ordered})
    type_index = {name: i for i, name in enumerate(type_names)}
    n_nodes = len(slots)

    pools: dict[tuple[int, frozenset[tuple[str, str]]], int] = {}
    pool_type: list[int] = []
    pool_ok: list[list[bool]] = []
    pool_nodes: list[list[int]] = []
    g_type: list[int] = []
    g_pool: list[int] = []
    g_leader: list[int] = []
    kept: list[list[int]] = []
    for g in ordered:
        if g.replicas < 1:
            raise ValueError(f"group {g.key}: replicas must be >= 1")
        t = type_index[g.type]
        sel = frozenset(g.selector.items())
        p = pools.get((t, sel))
        if p is None:
            p = pools[(t, sel)] = len(pool_type)
            ok = [all(s.labels.get(k) == v for k, v in sel) for s in slots]
            pool_type.append(t)
            pool_ok.append(ok)
            pool_nodes.append([n for n in range(n_nodes) if ok[n]])
        ok = pool_ok[p]
        live: list[int] = []
        for m in g.members:
            n = index.get(m, -1)
            # A node named twice counts once: members are on distinct nodes.
            if n >= 0 and ok[n] and n not in live:
                live.append(n)
        lead = -1
        if g.leader is not None and g.leader in g.members:
            lead = index.get(g.leader, -1)
        g_type.append(t)
        g_pool.append(p)
        g_leader.append(lead)
        kept.append(live)

    prob = _Problem(
        node_ids=node_ids,
        caps=[s.capacity for s in slots],
        groups=ordered,
        n_types=len(type_names),
        g_type=g_type,
        g_pool=g_pool,
        g_leader=g_leader,
        pool_type=pool_type,
        pool_ok=pool_ok,
        pool_nodes=pool_nodes,
        kept=kept,
    )
    _shrink(prob)
    _evict_over_capacity(prob)
    return prob


def _shrink(prob: _Problem) -> None:
    """Cut groups with more live members than replicas down to their replicas, in place.

    The leader stays (no leadership change). The other places go to the members on the nodes
    holding the fewest kept members of the group's type (then fewest in total, then member
    order), counting every member certainly kept and the groups cut before (key order): the
    members dropped are the ones balance would move anyway. Dropping the earliest members
    instead made shrinking 300 groups from 3 to 2 replicas on 10 nodes cost 46 moves.
    """
    groups, g_type, g_leader, kept = prob.groups, prob.g_type, prob.g_leader, prob.kept
    n_nodes = len(prob.node_ids)
    cnt = [[0] * n_nodes for _ in range(prob.n_types)]
    total = [0] * n_nodes
    over: list[int] = []
    for g, live in enumerate(kept):
        if len(live) > groups[g].replicas:
            over.append(g)
            certain = [g_leader[g]] if g_leader[g] in live else []
        else:
            certain = live
        for n in certain:
            cnt[g_type[g]][n] += 1
            total[n] += 1
    for g in over:
        live, lead, c = kept[g], g_leader[g], cnt[g_type[g]]
        others = [n for n in live if n != lead]
        room = groups[g].replicas - (len(live) - len(others))
        chosen = set(sorted(others, key=lambda n: (c[n], total[n], live.index(n)))[:room])
        for n in chosen:
            c[n] += 1
            total[n] += 1
        kept[g] = [n for n in live if n == lead or n in chosen]


def _evict_over_capacity(prob: _Problem) -> None:
    """Drop kept members from nodes holding more than their capacity.

    Non-leaders go first (no leadership change), then members of the type most over-represented
    on the node relative to its share of that type, so eviction also moves toward balance.
    """
    n_nodes = len(prob.node_ids)
    total = [0] * n_nodes
    on_node: list[list[int]] = [[] for _ in range(n_nodes)]
    cnt = [[0] * n_nodes for _ in range(prob.n_types)]
    type_total = [0] * prob.n_types
    for g, members in enumerate(prob.kept):
        t = prob.g_type[g]
        for n in members:
            total[n] += 1
            on_node[n].append(g)
            cnt[t][n] += 1
            type_total[t] += 1
    for n in range(n_nodes):
        while total[n] > prob.caps[n]:
            # Over-representation as count * nodes - type total avoids fractions.
            victim = min(
                on_node[n],
                key=lambda g: (
                    prob.g_leader[g] == n,
                    -(cnt[prob.g_type[g]][n] * n_nodes - type_total[prob.g_type[g]]),
                    g,
                ),
            )
            t = prob.g_type[victim]
            on_node[n].remove(victim)
            prob.kept[victim].remove(n)
            total[n] -= 1
            cnt[t][n] -= 1
            type_total[t] -= 1


def _wanted(prob: _Problem, g: int) -> int:
    """Members group ``g`` can have at most: a member per eligible node."""
    return min(prob.groups[g].replicas, len(prob.pool_nodes[prob.g_pool[g]]))


def _bound_per_type(prob: _Problem) -> list[int]:
    """:func:`lower_bound` split by type (index)."""
    n_nodes = len(prob.node_ids)
    missing = [0] * prob.n_types
    wanted = [0] * prob.n_types
    counts = [[0] * n_nodes for _ in range(prob.n_types)]
    for g, members in enumerate(prob.kept):
        t = prob.g_type[g]
        w = _wanted(prob, g)
        wanted[t] += w
        missing[t] += w - len(members)
        for n in members:
            counts[t][n] += 1
    bound = list(missing)
    if n_nodes == 0:
        return bound
    for t in range(prob.n_types):
        q, r = divmod(wanted[t], n_nodes)
        # The r fullest nodes keep q + 1, the others q: that split removes the fewest members.
        for i, c in enumerate(sorted(counts[t], reverse=True)):
            bound[t] += max(0, c - (q + 1 if i < r else q))
    return bound


def lower_bound(groups: Sequence[GroupDemand], nodes: Sequence[NodeSlot]) -> int:
    """The fewest moves a balanced placement of ``groups`` on ``nodes`` can make.

    Every wanted member that is not kept (its node departed, was drained, no longer matches the
    selector or is over capacity) needs one move. Then, per type with ``T`` members wanted on
    ``N`` nodes, a balanced placement has ``T % N`` nodes with ``T // N + 1`` members and the
    rest with ``T // N``; giving the larger targets to the nodes keeping the most, every kept
    member above its node's target must move (a removal plus an addition: one move). Wanted
    counts are capped at the number of nodes matching the selector.

    It bounds :func:`place` from below whenever every member is placed and every type ends up
    balanced (always the case without binding capacity or selectors). Under binding constraints
    the balance it assumes may be impossible and :func:`place` may make fewer moves.
    """
    return sum(_bound_per_type(_prepare(groups, nodes)))


# -- the mutable state ----------------------------------------------------------------------

_ADD = 0  # a member on a node the group did not keep (an addition: one move)
_KEEP = 1  # a kept member


@dataclass(slots=True)
class _Refine:
    """Counters for one type while its negative cycles are cancelled.

    ``co[p][cat][a][b]``: groups of pool ``p`` with a member of category ``cat`` on ``a`` that are
    also on ``b``; ``num[p][cat][a]``: groups of pool ``p`` with such a member on ``a``. A group of
    the pool can move from ``a`` to ``b`` iff ``co`` is below ``num`` (and ``b`` matches the pool's
    selector).
    """

    t: int
    co: dict[int, list[list[list[int]]]]
    num: dict[int, list[list[int]]]


class _Index:
    """The nodes of one pool with room left, bucketed by (count of the pool's type, total).

    A heap holds the bucket keys (each at most once; keys of emptied buckets are dropped when
    they surface), so the lowest bucket is found without a heap operation per node, and the
    nodes tied in it are compared on the group-dependent tie-break directly.
    """

    __slots__ = ("buckets", "keys", "queued", "where")

    def __init__(self) -> None:
        self.buckets: dict[tuple[int, int], dict[int, None]] = {}
        self.keys: list[tuple[int, int]] = []
        self.queued: set[tuple[int, int]] = set()
        self.where: dict[int, tuple[int, int]] = {}

    def put(self, n: int, key: tuple[int, int] | None) -> None:
        """Move node ``n`` to bucket ``key`` (None: out, the node is full)."""
        old = self.where.pop(n, None)
        if old is not None:
            bucket = self.buckets[old]
            del bucket[n]
            if not bucket:
                del self.buckets[old]
        if key is None:
            return
        self.where[n] = key
        found = self.buckets.get(key)
        if found is None:
            found = self.buckets[key] = {}
            if key not in self.queued:
                self.queued.add(key)
                heapq.heappush(self.keys, key)
        found[n] = None


class _State:
    """Members of every group, with per-node counters kept in step."""

    def __init__(self, prob: _Problem) -> None:
        self.p = prob
        n_nodes = len(prob.node_ids)
        self.n = n_nodes
        types = prob.n_types
        self.total = [0] * n_nodes
        self.cnt = [[0] * n_nodes for _ in range(types)]
        # Groups with a kept member / an addition on a node, per pool: a move only looks at
        # the pools whose selector admits the target node. Dicts used as ordered sets, so
        # iteration order depends only on the operations.
        pools = len(prob.pool_type)
        self.kept_on: list[list[dict[int, None]]] = [
            [{} for _ in range(n_nodes)] for _ in range(pools)
        ]
        self.added_on: list[list[dict[int, None]]] = [
            [{} for _ in range(n_nodes)] for _ in range(pools)
        ]
        # Groups whose kept member on the node was moved away (moving it back is cheap).
        self.removed_at: list[list[dict[int, None]]] = [
            [{} for _ in range(n_nodes)] for _ in range(types)
        ]
        self.on: list[set[int]] = [set(k) for k in prob.kept]
        self.orig: list[frozenset[int]] = [frozenset(k) for k in prob.kept]
        self.added: list[list[int]] = [[] for _ in prob.kept]
        # pair[t][a][b]: type-t groups with members on both a and b (sparse; fill's tie-break).
        self.pair: list[list[dict[int, int]]] = [[{} for _ in range(n_nodes)] for _ in range(types)]
        self.cost = [0] * types
        # Versions that tell when rebalance/refine could find something new: a type's
        # members changed, or some node became full or stopped being full.
        self.type_version = [0] * types
        self.full_version = 0
        self.bound = _bound_per_type(prob)
        self.type_pools: list[list[int]] = [[] for _ in range(types)]
        for p, t in enumerate(prob.pool_type):
            self.type_pools[t].append(p)
        self.node_pools: list[list[int]] = [[] for _ in range(n_nodes)]
        for p, members in enumerate(prob.pool_nodes):
            for n in members:
                self.node_pools[n].append(p)
        for g, members in enumerate(prob.kept):
            t = prob.g_type[g]
            for n in members:
                self.kept_on[prob.g_pool[g]][n][g] = None
                self.cnt[t][n] += 1
                self.total[n] += 1
                row = self.pair[t][n]
                for m in members:
                    if m != n:
                        row[m] = row.get(m, 0) + 1
        self.index: list[_Index] | None = None  # per pool, only while filling
        self.refining: _Refine | None = None

    # -- elementary changes ---------------------------------------------------------------

    def _touch(self, t: int, n: int) -> None:
        self.type_version[t] += 1
        if self.index is not None:
            tot = self.total[n]
            full = tot >= self.p.caps[n]
            for p in self.node_pools[n]:
                key = None if full else (self.cnt[self.p.pool_type[p]][n], tot)
                self.index[p].put(n, key)

    def _track(self, g: int, n: int, sign: int) -> None:
        """Update the refine counters for group ``g`` gaining (+1) or losing (-1) node ``n``."""
        ref = self.refining
        if ref is None or ref.t != self.p.g_type[g]:
            return
        p = self.p.g_pool[g]
        co = ref.co[p]
        cat = _KEEP if n in self.orig[g] else _ADD
        ref.num[p][cat][n] += sign
        for x in self.on[g]:
            if x != n:
                co[cat][n][x] += sign
                co[_KEEP if x in self.orig[g] else _ADD][x][n] += sign

    def _pair(self, g: int, n: int, sign: int) -> None:
        pair = self.pair[self.p.g_type[g]]
        for m in self.on[g]:
            if m != n:
                pair[m][n] = pair[m].get(n, 0) + sign
                pair[n][m] = pair[n].get(m, 0) + sign

    def add(self, g: int, n: int) -> None:
        """Put a member of group ``g`` on node ``n`` (not a member there yet)."""
        t = self.p.g_type[g]
        self.on[g].add(n)
        self._pair(g, n, 1)
        p = self.p.g_pool[g]
        if n in self.orig[g]:
            del self.removed_at[t][n][g]
            self.kept_on[p][n][g] = None
        else:
            self.added_on[p][n][g] = None
            self.added[g].append(n)
            self.cost[t] += 1
        self._track(g, n, 1)
        self.cnt[t][n] += 1
        self.total[n] += 1
        if self.total[n] == self.p.caps[n]:
            self.full_version += 1
        self._touch(t, n)

    def remove(self, g: int, n: int) -> None:
        """Take group ``g``'s member off node ``n``."""
        t = self.p.g_type[g]
        self._track(g, n, -1)
        self._pair(g, n, -1)
        self.on[g].discard(n)
        p = self.p.g_pool[g]
        if n in self.orig[g]:
            del self.kept_on[p][n][g]
            self.removed_at[t][n][g] = None
        else:
            del self.added_on[p][n][g]
            self.added[g].remove(n)
            self.cost[t] -= 1
        if self.total[n] == self.p.caps[n]:
            self.full_version += 1
        self.cnt[t][n] -= 1
        self.total[n] -= 1
        self._touch(t, n)

    # -- phase 2: fill --------------------------------------------------------------------

    def missing(self, g: int) -> int:
        """Members group ``g`` still lacks."""
        return self.p.groups[g].replicas - len(self.on[g])

    def fill(self) -> bool:
        """Add missing members, group by group in key order; True if any was added."""
        prob = self.p
        todo = [g for g in range(len(prob.groups)) if self.missing(g) > 0]
        if not todo:
            return False
        index: list[_Index] = []
        for p, members in enumerate(prob.pool_nodes):
            cnt = self.cnt[prob.pool_type[p]]
            idx = _Index()
            for n in members:
                if self.total[n] < prob.caps[n]:
                    idx.put(n, (cnt[n], self.total[n]))
            index.append(idx)
        self.index = index
        placed = False
        try:
            for g in todo:
                for _ in range(self.missing(g)):
                    n = self._lowest(g, index[prob.g_pool[g]])
                    if n < 0:
                        break
                    self.add(g, n)
                    placed = True
        finally:
            self.index = None
        return placed

    def _lowest(self, g: int, idx: _Index) -> int:
        """The node for group ``g``'s next member, or -1 if no eligible node is left: in the
        lowest (count, total) bucket holding a node ``g`` is not on, the node sharing the fewest
        type groups with ``g``'s members, then the lowest id."""
        members = self.on[g]
        pair = self.pair[self.p.g_type[g]]
        rows = [pair[m] for m in members]
        keys = idx.keys
        aside: list[tuple[int, int]] = []
        best = -1
        while keys:
            bucket = idx.buckets.get(keys[0])
            if bucket is None:
                idx.queued.discard(heapq.heappop(keys))
                continue
            best = _least_shared(bucket, members, rows)
            if best >= 0:
                break
            aside.append(heapq.heappop(keys))  # every node in it already has a member of g
        for key in aside:
            heapq.heappush(keys, key)
        return best

    # -- choosing which member moves --------------------------------------------------------

    def pick(self, t: int, a: int, b: int) -> tuple[int, int] | None:
        """The type-``t`` group to move from ``a`` to ``b``, with its cost, or None.

        Cost is the change in moves: -1 for moving an addition back to a node the group kept,
        0 for moving an addition elsewhere or a kept member back to another kept node, +1 for
        moving a kept member. Cheapest first, then non-leaders. Capacity of ``b`` is the
        caller's concern.
        """
        prob = self.p
        best: tuple[int, int] | None = None
        best_key = (2, True)
        for g in self.removed_at[t][b]:
            if a in self.on[g]:
                key = (0 if a in self.orig[g] else -1, prob.g_leader[g] == a)
                if key < best_key:
                    best, best_key = (g, key[0]), key
        if best_key <= (-1, False):
            return best
        pools = [p for p in self.type_pools[t] if prob.pool_ok[p][b]]
        if best_key > (0, False):
            leader: int | None = None
            for p in pools:
                for g in self.added_on[p][a]:
                    if b not in self.on[g]:
                        if prob.g_leader[g] != a:
                            return (g, 0)
                        if leader is None:
                            leader = g
            if leader is not None and best_key > (0, True):
                best, best_key = (leader, 0), (0, True)
        if best_key > (1, False):
            leader = None
            for p in pools:
                for g in self.kept_on[p][a]:
                    if b not in self.on[g]:
                        if prob.g_leader[g] != a:
                            return (g, 1)
                        if leader is None:
                            leader = g
            if leader is not None and best_key > (1, True):
                best = (leader, 1)
        return best

    def move(self, g: int, a: int, b: int) -> None:
        """Move group ``g``'s member from ``a`` to ``b``."""
        self.remove(g, a)
        self.add(g, b)

    # -- phase 3: rebalance ---------------------------------------------------------------

    def rebalance(self, t: int) -> bool:
        """Move type-``t`` members from the fullest to the emptiest nodes while the counts
        differ by two or more; True if anything moved.

        Each move lowers the sum of squared counts, so the loop ends.
        """
        cnt = self.cnt[t]
        total = self.total
        caps = self.p.caps
        nodes = range(self.n)
        moved = False
        while True:
            high = sorted(nodes, key=lambda n: (-cnt[n], n))
            low = sorted(nodes, key=lambda n: (cnt[n], total[n], n))
            done = True
            for a in high:
                if not low or cnt[a] - cnt[low[0]] < 2:
                    break
                for b in low:
                    if cnt[a] - cnt[b] < 2:
                        break
                    if total[b] >= caps[b]:
                        continue
                    choice = self.pick(t, a, b)
                    if choice is not None:
                        self.move(choice[0], a, b)
                        done = False
                        break
                if not done:
                    break
            if done:
                return moved
            moved = True

    # -- phase 4: refine ------------------------------------------------------------------

    def refine(self, t: int) -> bool:
        """Cancel negative cycles of type ``t`` until none is left or the type meets its
        lower bound; True if anything moved.

        The graph has a vertex per node: an edge ``a -> b`` costs the cheapest change in moves
        of moving some type-``t`` member from ``a`` to ``b``. A cycle keeps every count; to let
        the nodes holding one extra member change too, a node ``z`` may also close a cycle
        through level vertices to any node ``a`` with a higher count (``a`` loses one, ``z``
        gains one, so the spread of counts cannot grow). With no negative cycle left, the
        placement of the type has the fewest moves among those with its balance (the
        optimality condition of min-cost circulation).
        """
        prob = self.p
        n_nodes = self.n
        co: dict[int, list[list[list[int]]]] = {}
        num: dict[int, list[list[int]]] = {}
        for p in self.type_pools[t]:
            co[p] = [[[0] * n_nodes for _ in range(n_nodes)] for _ in range(2)]
            num[p] = [[0] * n_nodes for _ in range(2)]
        for g in range(len(prob.groups)):
            if prob.g_type[g] != t:
                continue
            p = prob.g_pool[g]
            members = self.on[g]
            for a in members:
                cat = _KEEP if a in self.orig[g] else _ADD
                num[p][cat][a] += 1
                row = co[p][cat][a]
                for b in members:
                    if b != a:
                        row[b] += 1
        self.refining = _Refine(t, co, num)
        moved = False
        try:
            while self.cost[t] > self.bound[t]:
                cycle = self._negative_cycle(t)
                if cycle is None:
                    break
                # Pick every member first, on the state the costs were computed on, then move.
                chosen: list[tuple[int, int, int]] = []
                for a, b, w in cycle:
                    choice = self.pick(t, a, b)
                    if choice is None or choice[1] != w:  # pragma: no cover - counters disagree
                        raise AssertionError("refine: edge without a member")
                    chosen.append((choice[0], a, b))
                for g, a, _ in chosen:
                    self.remove(g, a)
                for g, _, b in chosen:
                    self.add(g, b)
                moved = True
        finally:
            self.refining = None
        return moved

    def _negative_cycle(self, t: int) -> list[tuple[int, int, int]] | None:
        """A negative cycle of type ``t`` as (from, to, cost) node moves, or None."""
        prob = self.p
        ref = self.refining
        assert ref is not None
        n_nodes = self.n
        cnt = self.cnt[t]
        special: dict[tuple[int, int], int] = {}
        for b in range(n_nodes):
            for g in self.removed_at[t][b]:
                for a in self.on[g]:
                    w = 0 if a in self.orig[g] else -1
                    if special.get((a, b), 2) > w:
                        special[(a, b)] = w
        pools = [(p, prob.pool_ok[p], ref.co[p], ref.num[p]) for p in self.type_pools[t]]
        edges: list[tuple[int, int, int]] = []
        for a in range(n_nodes):
            for b in range(n_nodes):
                if a == b:
                    continue
                w = special.get((a, b), 2)
                if w > 0:
                    for _p, ok, co, num in pools:
                        if not ok[b]:
                            continue
                        if co[_ADD][a][b] < num[_ADD][a]:
                            w = 0
                            break
                        if co[_KEEP][a][b] < num[_KEEP][a]:
                            w = 1
                if w < 2:
                    edges.append((a, b, w))
        # Level vertices, one per count present, chained upward.
        levels = sorted(set(cnt))
        level_vertex = {c: n_nodes + i for i, c in enumerate(levels)}
        for i in range(len(levels) - 1):
            edges.append((n_nodes + i, n_nodes + i + 1, 0))
        for n in range(n_nodes):
            edges.append((level_vertex[cnt[n]], n, 0))
            if self.total[n] < prob.caps[n]:
                above = [c for c in levels if c > cnt[n]]
                if above:
                    edges.append((n, level_vertex[above[0]], 0))
        found = _find_negative_cycle(n_nodes + len(levels), edges)
        if found is None:
            return None
        return [(a, b, w) for a, b, w in found if a < n_nodes and b < n_nodes]


def _least_shared(bucket: dict[int, None], members: set[int], rows: list[dict[int, int]]) -> int:
    """The node of ``bucket`` not in ``members`` with the least sum of ``rows`` (groups shared
    with each member), then the lowest id; -1 if every node is a member. Loops written out per
    member count: this is the innermost loop of a fresh placement."""
    if not rows:
        return min(bucket, default=-1)
    best, least = -1, 0
    if len(rows) == 1:
        (r0,) = rows
        for n in bucket:
            if n not in members:
                shared = r0.get(n, 0)
                if best < 0 or shared < least or (shared == least and n < best):
                    best, least = n, shared
    elif len(rows) == 2:
        r0, r1 = rows
        for n in bucket:
            if n not in members:
                shared = r0.get(n, 0) + r1.get(n, 0)
                if best < 0 or shared < least or (shared == least and n < best):
                    best, least = n, shared
    else:
        for n in bucket:
            if n not in members:
                shared = sum(r.get(n, 0) for r in rows)
                if best < 0 or shared < least or (shared == least and n < best):
                    best, least = n, shared
    return best


def _find_negative_cycle(
    n_vertices: int, edges: list[tuple[int, int, int]]
) -> list[tuple[int, int, int]] | None:
    """Bellman-Ford from a virtual source at distance 0 to every vertex; after each pass the
    predecessor graph is searched for a cycle (any cycle there is negative), so a cycle is
    found in about as many passes as it has edges."""
    dist = [0] * n_vertices
    pred = [-1] * n_vertices
    for _ in range(n_vertices + 1):
        changed = False
        for i, (u, v, w) in enumerate(edges):
            d = dist[u] + w
            if d < dist[v]:
                dist[v] = d
                pred[v] = i
                changed = True
        if not changed:
            return None
        cycle = _predecessor_cycle(n_vertices, edges, pred)
        if cycle is not None:
            return cycle
    return None  # pragma: no cover - a negative cycle shows in the predecessor graph by now


def _predecessor_cycle(
    n_vertices: int, edges: list[tuple[int, int, int]], pred: list[int]
) -> list[tuple[int, int, int]] | None:
    mark = [0] * n_vertices
    for start in range(n_vertices):
        if mark[start]:
            continue
        v = start
        while v >= 0 and not mark[v]:
            mark[v] = start + 1
            v = edges[pred[v]][0] if pred[v] >= 0 else -1
        if v >= 0 and mark[v] == start + 1:
            cycle: list[tuple[int, int, int]] = []
            u = v
            while True:
                edge = edges[pred[u]]
                cycle.append(edge)
                u = edge[0]
                if u == v:
                    break
            cycle.reverse()
            if sum(w for _, _, w in cycle) < 0:
                return cycle
    return None


def place(groups: Sequence[GroupDemand], nodes: Sequence[NodeSlot]) -> Placement:
    """Place the members of ``groups`` on ``nodes``: keep what can stay, fill what is missing,
    balance every type across the nodes, with as few moves as that balance allows.

    Deterministic: the order of ``groups`` and ``nodes`` does not matter. A group never has two
    members on one node, a node never holds more than its capacity, and members only go to
    nodes matching the group's selector. Raises ValueError on duplicate node ids or group keys,
    a negative capacity or replicas below 1.
    """
    prob = _prepare(groups, nodes)
    st = _State(prob)
    st.fill()
    # What rebalance/refine last saw per type: (type version, full version).
    settled_rebalance: dict[int, tuple[int, int]] = {}
    settled_refine: dict[int, tuple[int, int]] = {}
    while True:
        changed = False
        for t in range(prob.n_types):
            if settled_rebalance.get(t) != (st.type_version[t], st.full_version):
                changed |= st.rebalance(t)
                settled_rebalance[t] = (st.type_version[t], st.full_version)
        for t in range(prob.n_types):
            if st.cost[t] <= st.bound[t]:
                continue
            if settled_refine.get(t) != (st.type_version[t], st.full_version):
                changed |= st.refine(t)
                settled_refine[t] = (st.type_version[t], st.full_version)
        # Moves may have freed room for members nobody could take before.
        changed |= st.fill()
        if not changed:
            break
    members: dict[str, tuple[str, ...]] = {}
    unplaced: dict[str, int] = {}
    ids = prob.node_ids
    for g, demand in enumerate(prob.groups):
        on = st.on[g]
        order = [n for n in prob.kept[g] if n in on] + st.added[g]
        members[demand.key] = tuple(ids[n] for n in order)
        if st.missing(g) > 0:
            unplaced[demand.key] = st.missing(g)
    return Placement(members=members, unplaced=unplaced, moves=sum(len(a) for a in st.added))
