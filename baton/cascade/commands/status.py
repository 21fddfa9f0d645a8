"""Reading the set: its status and members, a node's rows checked against its provider's,
and the foreign keys and triggers that get in the way of applying."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from baton.cascade import auto_switch, node_ops, observe, schema_check, sync_mode
from baton.cascade.beat import ServiceState
from baton.cascade.commands.sets import existing, known, open_set
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.cascade.root import Root, locate_root
from baton.errors import CascadeError, redact_url

# -- status ------------------------------------------------------------------------------------


def member_dict(m: observe.Member) -> dict[str, Any]:
    """A member as JSON carries it (its location without a password)."""
    out = dataclasses.asdict(m)
    out["location"] = redact_url(m.location)
    # What serves the node, with its state now ("never": nothing ever did).
    out["service"] = (
        {"state": ServiceState.NEVER.value} if m.service is None else m.service.as_dict(time.time())
    )
    if not m.queue_only:
        del out["queue_only"]  # only queue-only branches carry the key (``"queue_only": true``)
    for key in ("merges", "combined"):  # only nodes of combined sets carry them
        if not out[key]:
            del out[key]
    # Only a node whose worker is copying carries its copies' progress.
    out["copies"] = {t: {"done": d, "total": n} for t, (d, n) in m.copies.items()}
    if not out["copies"]:
        del out["copies"]
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class SetStatus:
    set_name: str
    #: The live root (None: use failover).
    root: str | None
    global_watermark: int | None
    members: list[observe.Member]
    #: Automatic failover is on for the set (``auto-failover SET on``).
    auto_failover: bool = False
    #: Synchronous mode: the branches a writer's commit waits for (0: asynchronous).
    sync: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "set": self.set_name,
            "root": self.root,
            "global_watermark": self.global_watermark,
            "auto_failover": self.auto_failover,
            "sync": self.sync,
            "members": [member_dict(m) for m in self.members],
        }


def _queue_only(found: list[observe.Member]) -> list[observe.Member]:
    """``found`` with ``queue_only`` set for each reachable queue-only branch."""
    out = []
    for m in found:
        queue_only = False
        if m.reachable and m.role == Role.BRANCH:
            try:
                with open_node_db(m.location) as db:
                    queue_only = node_ops.is_queue_only(db)
            except CascadeError:
                pass  # unreachable since: shown as it was read
        out.append(dataclasses.replace(m, queue_only=queue_only) if queue_only else m)
    return out


def members(via: str) -> tuple[str, list[observe.Member]]:
    """The set's name and every member: role, provider, position, lag (ticks and seconds),
    paused, dead, reachable, tables, queue-only."""
    c = open_set(via)
    return c.set_name, _queue_only(observe.members(c))


def status(via: str) -> SetStatus:
    """The set: its live root, global watermark and members."""
    c = open_set(via)
    root, watermark, found = observe.status(c)
    return SetStatus(
        c.set_name,
        root,
        watermark,
        _queue_only(found),
        auto_failover=auto_switch.switch_of(c),
        sync=sync_mode.sync_of(c),
    )


def root(via: str, set_name: str) -> Root:
    """Where writers of ``set_name`` write now (:func:`~baton.cascade.root.locate_root`),
    found through the member at ``via``: the root, its location and tick, writable or why
    not."""
    return locate_root(set_name, existing(via))


# -- check -------------------------------------------------------------------------------------


def check(via: str, node: str, table: str | None = None) -> dict[str, Any]:
    """Compare ``node``'s rows with its provider's (row count and checksum) for each table it
    replicates, or only ``table``: ``{"node", "position", "provider", "provider_position",
    "equal", "tables"}``. A node behind its provider differs until it catches up."""
    return observe.check(open_set(via), node, table)


# -- foreign keys and triggers -------------------------------------------------------------------


def fkeys(via: str, node: str) -> schema_check.Found[schema_check.ForeignKey]:
    """The foreign keys on ``node`` that applying batches can break, each with what to do."""
    c = open_set(via)
    known(c, node)
    return schema_check.fkeys(c, node)


def triggers(via: str, node: str) -> schema_check.Found[schema_check.Trigger]:
    """The user triggers that fire for the rows applying batches writes on ``node``."""
    c = open_set(via)
    known(c, node)
    return schema_check.triggers(c, node)
