"""The cluster as the store shows it: nodes (live, suspect, dead), the controller, leases.
Used by the node API and by ``baton status`` / ``baton nodes`` (which need no running node)."""

from __future__ import annotations

import json
from typing import Any

from baton.store import Store

CONTROLLER = "controller"
MEMBERS = "members/"
NODES = "nodes/"


async def cluster_status(
    store: Store, grace: float, down_since: dict[str, float] | None = None
) -> dict[str, Any]:
    """Every node with its state, and the controller. A node is *live* while it holds its
    membership lease, *suspect* when the lease lapsed less than ``grace`` seconds ago (as seen
    in ``down_since``, store-clock times), and *dead* otherwise."""
    records, _ = await store.list(NODES)
    leases = {x.name: x for x in await store.list_leases(MEMBERS)}
    now = await store.now()
    nodes = []
    for rec in records:
        info = json.loads(rec.value)
        lease = leases.get(MEMBERS + info["id"])
        if lease is not None:
            state = "live"
        else:
            down = (down_since or {}).get(info["id"])
            state = "suspect" if down is not None and now - down < grace else "dead"
        nodes.append({**info, "state": state, "epoch": lease.epoch if lease else None})
    ctl = await store.get_lease(CONTROLLER)
    return {
        "nodes": nodes,
        "controller": {"id": ctl.holder, "epoch": ctl.epoch} if ctl else None,
        "store_time": now,
    }
