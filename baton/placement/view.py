"""Placement as the store shows it, for ``baton placement`` and ``GET /v1/placement`` (no
running controller needed to read it)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from baton.placement.records import read_drains, read_groups, read_objects
from baton.store import Store


async def placement_view(store: Store) -> dict[str, Any]:
    """``per_node``: node -> type -> members; ``groups``: every group with its members, leader,
    term and state; ``failures``: groups in failure reconciliation; ``errors``: groups with a
    member whose workload cannot run (the detail says which and why); plus objects and
    drains."""
    objects = await read_objects(store)
    groups = await read_groups(store)
    drains = await read_drains(store)
    per_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    leaders: dict[str, int] = defaultdict(int)
    rows = []
    for key in sorted(groups, key=_group_order):
        g, version = groups[key]
        for node in g.members:
            per_node[node][g.type] += 1
        if g.leader:
            leaders[g.leader] += 1
        rows.append(
            {
                "group": key,
                "type": g.type,
                "members": list(g.members),
                "leader": g.leader,
                "term": g.term,
                "state": g.state,
                "detail": g.detail,
                "version": version,
                "transfer": g.transfer.model_dump() if g.transfer else None,
            }
        )
    return {
        "objects": [o.model_dump() for o in objects.values()],
        "per_node": {n: dict(sorted(t.items())) for n, t in sorted(per_node.items())},
        "leaders": dict(sorted(leaders.items())),
        "groups": rows,
        "failures": [r for r in rows if r["state"] == "failure"],
        "errors": [r for r in rows if r["state"] == "error"],
        "draining": sorted(drains),
    }


def _group_order(key: str) -> tuple[str, int]:
    name, _, partition = key.rpartition("/")
    return name, int(partition) if partition.isdigit() else 0
