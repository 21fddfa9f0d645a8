"""What a set looks like now: every member with its position, lag, tables and service
(``cascade status`` and ``members``), and ``check``, a node's rows against its provider's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from baton.cascade import beat, compare, copy_progress, table_diff
from baton.cascade.beat import Beat
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.set_ops import (
    CascadeSet,
)
from baton.errors import (
    CascadeError,
    CascadeInputError,
    Refused,
)

# -- status ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    location: str
    role: str
    provider: str | None
    position: int
    lag_ticks: int | None
    lag_seconds: float | None
    paused: bool
    dead: bool
    reachable: bool
    tables: dict[str, str]
    #: A branch that keeps only the queue (set by :func:`baton.cascade.commands.members`).
    queue_only: bool = False
    #: Partition set -> the merge-leaf this node hosts for it (a combined root or failover).
    merges: dict[str, str] = field(default_factory=dict)
    #: A merge-leaf: the combined set it feeds.
    combined: str | None = None
    #: When the tick at ``position`` was made (the root's clock; None: not known): a root's
    #: last tick long ago says its ticker is not running, a member's, with lag, its worker.
    tick_time: float | None = None
    #: The root, while a switchover is under way: the branch it switches to, and the switch
    #: tick (the root captures nothing from then on; the same switchover finishes it).
    switching_to: str | None = None
    switch_tick: int | None = None
    #: The last heartbeat of the process serving the node (None: never served).
    service: Beat | None = None
    #: The operation that paused the node for itself, "compare" or "repair" (None: none; a
    #: pause by ``baton cascade pause`` is :attr:`paused` alone).
    paused_by: str | None = None
    #: Table -> its copy's Spark tasks (done, in all), while the node's worker copies it.
    copies: dict[str, tuple[int, int]] = field(default_factory=dict)


def members(c: CascadeSet) -> list[Member]:
    """Every node with its position and lag behind the root (in ticks and seconds)."""
    root_last = None
    root_db_loc = None
    for loc, dead in c.nodes.values():
        if dead:
            continue
        try:
            with open_node_db(loc) as db:
                if db.state().role is Role.ROOT:
                    root_last = db.last_tick()
                    root_db_loc = loc
        except (CascadeError, OSError):
            continue
    out = []
    for name, (loc, dead) in sorted(c.nodes.items()):
        try:
            with open_node_db(loc) as db:
                st = db.state()
                tables = db.tables()
                merges = db.merge_leaves() if st.role.carries_queue else {}
                switch = db.get_local("switch_tick") if st.role is Role.ROOT else None
                switch_to = db.get_local("switch_to") if switch is not None else None
                served = beat.read(db)
                held = db.get_local(table_diff.MARK)
                copies = {
                    t: done_of
                    for t, state in tables.items()
                    if state == "copying" and (done_of := copy_progress.of(db, t)) is not None
                }
        except (CascadeError, OSError):
            out.append(Member(name, loc, "?", None, 0, None, None, False, dead, False, {}))
            continue
        position = root_last.tick_id if st.role is Role.ROOT and root_last else st.position
        lag_t = lag_s = None
        tick_time = None
        if root_last is not None:
            lag_t = max(0, root_last.tick_id - position)
            lag_s = 0.0
            if root_db_loc is not None:
                with open_node_db(root_db_loc) as rdb:
                    at = rdb.get_tick(position + 1) if lag_t else None
                    mine = rdb.get_tick(position)
                if lag_t:
                    lag_s = round(time.time() - at.time, 3) if at else None
                tick_time = None if mine is None else round(mine.time, 3)
        out.append(
            Member(
                name,
                loc,
                st.role.value,
                st.provider,
                position,
                lag_t,
                lag_s,
                st.paused,
                dead,
                True,
                tables,
                merges=merges,
                combined=st.combined,
                tick_time=tick_time,
                switching_to=switch_to,
                switch_tick=None if switch is None else int(switch),
                service=served,
                paused_by=table_diff.paused_by(held),
                copies=copies,
            )
        )
    return out


def status(c: CascadeSet) -> tuple[str | None, int | None, list[Member]]:
    """(the live root, reachable and not tagged dead, or None; its global watermark; every
    member, as :func:`members`)."""
    found = members(c)
    root = next((m.name for m in found if m.role == Role.ROOT and not m.dead and m.reachable), None)
    watermark = None
    if root is not None:
        watermark = c.state(root).global_watermark
    return root, watermark, found


def check(c: CascadeSet, node: str, table: str | None = None) -> dict[str, Any]:
    """Compare ``node``'s rows with its provider's (row count and checksum, see
    :mod:`baton.cascade.compare`) for each table it replicates, or only ``table``: ``{"node",
    "position", "provider", "provider_position", "equal", "tables"}``. A node behind its
    provider differs until it catches up."""
    results: dict[str, dict[str, Any]] = {}
    with c.db(node) as db:
        st = db.state()
        if st.provider is None:
            raise Refused(f"{node} is the root: it has no provider to compare with")
        if st.merge_leaf:
            raise Refused(
                f"{node} is a merge-leaf: its tables hold every partition's rows, not only its "
                f"provider's; run check on the nodes of the combined set {st.combined} instead"
            )
        mine = db.tables()
        if table is not None and table not in mine:
            raise CascadeInputError(f"{node} does not replicate {table!r} (see 'tables')")
        names = [table] if table is not None else sorted(mine)
        provider = st.provider
        with c.db(provider) as pdb:
            pst = pdb.state()
            theirs = pdb.tables()
            position, provider_position = compare.position(db, st), compare.position(pdb, pst)
            for name in names:
                rows, checksum = compare.digest(db, name)
                entry: dict[str, Any] = {"state": mine[name], "rows": rows}
                if name in theirs:
                    prows, pchecksum = compare.digest(pdb, name)
                    entry |= {"provider_rows": prows,
                              "equal": (rows, checksum) == (prows, pchecksum)}  # fmt: skip
                else:
                    entry |= {"provider_rows": None, "equal": False}
                results[name] = entry
    return {
        "node": node,
        "position": position,
        "provider": provider,
        "provider_position": provider_position,
        "equal": all(r["equal"] for r in results.values()),
        "tables": results,
    }


__all__ = [
    "Member",
    "check",
    "members",
    "status",
]
