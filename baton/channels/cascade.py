"""The built-in ``cascade:<node>/<table>`` handler: the live row changes of a replicated table as
cascade node ``<node>`` applies them (seed 004 seen through seed 000).

The node's database is found in the node's settings (``[channels.settings.cascade.nodes]``,
node name to location) or else in the placed ``cascade-worker`` object of that name. The upstream
follows the node's applied position (its last tick at the root, the position it committed
with its batches elsewhere) and, each time it advances, publishes the table's row changes of the
batches in between, read from the node's queue (from its provider's for a leaf, which keeps no
queue): ``{"tick": T, "changes": [{"id", "op", "key", "data"}, ...]}``, in event order, at most
:data:`CHUNK` changes per publication. Spark is not involved: the events are the ones the
node's worker applied, read back from the node databases.

The initial data is ``{"node", "table", "role", "position", "columns", "key"}``: where the
stream starts. Subscribing is refused for a node or table this node cannot find.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from baton.cascade.db import open_node_db
from baton.cascade.model import ROW_TYPES, Role
from baton.errors import BadChannel, BatonError, ChannelRefused
from baton.keys import object_record

from .handler import Channel, Context, Handler, User

#: Seconds between two reads of the node's position.
POLL = 0.1
#: At most this many row changes per publication.
CHUNK = 500


def _split(channel: Channel) -> tuple[str, str]:
    node, sep, table = channel.path.partition("/")
    if not sep or not node or not table or "/" in table:
        raise BadChannel(f"malformed channel {channel}: expected cascade:<node>/<table>")
    return node, table


async def _location(ctx: Context, node: str) -> str:
    nodes = ctx.settings.get("nodes") or {}
    if node in nodes:
        return str(nodes[node])
    rec = await ctx.store.get(object_record(node))
    if rec is not None:
        obj = json.loads(rec.value)
        if obj.get("type") == "cascade-worker":
            return str(obj["spec"]["location"])
    raise ChannelRefused(
        f"cascade node {node!r} is unknown here: name it in [channels.settings.cascade.nodes] "
        "or place it as a cascade-worker object"
    )


def _position(location: str) -> tuple[Role, int, str | None]:
    """(role, applied position, the location the node's events are read from)."""
    with open_node_db(location, readonly=True) as db:
        st = db.state()
        if st.role is Role.ROOT:
            last = db.last_tick()
            return st.role, last.tick_id if last else 0, location
        if st.role.carries_queue:
            return st.role, st.position, location
        provider = db.nodes().get(st.provider or "")
        return st.role, st.position, provider[0] if provider else None


def _describe(location: str, node: str, table: str) -> dict[str, Any]:
    role, position, _ = _position(location)
    with open_node_db(location, readonly=True) as db:
        if table not in db.tables():
            raise ChannelRefused(f"cascade node {node!r} does not replicate table {table!r}")
        columns, key = db.columns(table)
    return {
        "node": node,
        "table": table,
        "role": role.value,
        "position": position,
        "columns": columns,
        "key": key,
    }


def _changes(source: str, table: str, after: int, upto: int) -> list[dict[str, Any]]:
    with open_node_db(source, readonly=True) as db:
        return [
            {
                "tick": ev.tick,
                "id": ev.ev_id,
                "op": ev.type,
                "key": json.loads(ev.key) if ev.key else None,
                "data": json.loads(ev.data) if ev.data else None,
            }
            for ev in db.batch_events(after, upto)
            if ev.table == table and ev.type in ROW_TYPES
        ]


class CascadeHandler(Handler):
    """``cascade:<node>/<table>``: see the module's docstring."""

    async def subscribe(self, ctx: Context, user: User, channel: Channel) -> Any:
        node, table = _split(channel)
        location = await _location(ctx, node)
        try:
            return await asyncio.to_thread(_describe, location, node, table)
        except ChannelRefused:
            raise
        except BatonError as exc:
            raise ChannelRefused(f"cascade node {node!r} cannot be read: {exc}") from None

    async def run(self, ctx: Context, channel: Channel) -> AsyncIterator[Any]:
        node, table = _split(channel)
        location = await _location(ctx, node)
        _, seen, _ = await asyncio.to_thread(_position, location)
        while not ctx.stopping.is_set():
            await ctx.clock.sleep(POLL)
            # A node database that fails raises out of here: the leader restarts the upstream
            # and tells subscribers of the gap.
            _, position, source = await asyncio.to_thread(_position, location)
            if position <= seen:
                seen = min(seen, position)  # a node re-created from scratch starts lower
                continue
            if source is None:
                raise ChannelRefused(f"cascade leaf {node!r} has no provider to read events from")
            changes = await asyncio.to_thread(_changes, source, table, seen, position)
            for i in range(0, len(changes), CHUNK):
                yield {"tick": position, "changes": changes[i : i + CHUNK]}
            seen = position


__all__ = ["CascadeHandler"]
