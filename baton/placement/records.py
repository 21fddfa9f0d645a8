"""Reading and writing placement's records in the store (their shapes are in
:mod:`baton.placement.model`, their keys in :mod:`baton.keys`).

``objects/<name>``        an object: type, partitions, replicas, spec, node selector. Written
                          by users (``baton object create``), created only if absent.
``groups/<name>/<p>``     the control group of partition ``p``: members, the nominated leader
                          and the group's term. Written only by the controller, every write
                          conditioned on its lease and epoch (and the record's version).
``drain/<node>``          a drain request: the node receives no members and loses the ones it has.

The shapes are re-exported here, so ``from baton.placement.records import ObjectSpec`` keeps
working.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from baton.errors import ConfigError
from baton.keys import DRAIN, GROUPS, OBJECTS, drain_record, object_record
from baton.placement.model import (
    NAME,
    TYPE_LABEL,
    GroupRecord,
    GroupState,
    ObjectSpec,
    Transfer,
    dump,
    group_key,
    make_object,
    parse_group,
    parse_object,
)
from baton.placement.workload import check_spec
from baton.store import Record, Store

__all__ = [
    "NAME",
    "TYPE_LABEL",
    "GroupRecord",
    "GroupState",
    "ObjectSpec",
    "Transfer",
    "check_node_id",
    "create_object",
    "delete_object",
    "dump",
    "group_key",
    "make_object",
    "parse_group",
    "parse_object",
    "read_drains",
    "read_groups",
    "read_objects",
    "set_drain",
]


async def create_object(store: Store, obj: ObjectSpec) -> None:
    """Create ``obj``; refuses (ConfigError) when the name is taken, and (SpecError) when its
    type, if this process knows it, does not accept its spec. A refusal writes nothing."""
    obj = check_spec(obj)
    obj = obj.model_copy(update={"created_at": obj.created_at or await store.now()})
    res = await store.put(object_record(obj.name), dump(obj), version=0)
    if not res.ok:
        raise ConfigError(f"object {obj.name!r} already exists: delete it first or pick a name")


async def delete_object(store: Store, name: str) -> None:
    """Delete object ``name`` (the controller then removes its groups and stops its roles)."""
    rec = await store.get(object_record(name))
    if rec is None:
        raise ConfigError(f"no object named {name!r} (see 'baton object list')")
    res = await store.delete(object_record(name), version=rec.version)
    if not res.ok:
        raise ConfigError(f"object {name!r} changed while deleting it: try again")


async def read_objects(store: Store) -> dict[str, ObjectSpec]:
    records, _ = await store.list(OBJECTS)
    return {x.name: x for x in (_object_or_none(r) for r in records) if x is not None}


def _object_or_none(rec: Record) -> ObjectSpec | None:
    # A record another version wrote, or a hand edit, must not stop placement of the others.
    try:
        return parse_object(rec.value)
    except ValidationError:
        return None


async def read_groups(store: Store) -> dict[str, tuple[GroupRecord, int]]:
    """Group key -> (record, store version)."""
    records, _ = await store.list(GROUPS)
    out: dict[str, tuple[GroupRecord, int]] = {}
    for rec in records:
        try:
            group = parse_group(rec.value)
        except ValidationError:
            continue
        out[group.key] = (group, rec.version)
    return out


async def read_drains(store: Store) -> set[str]:
    records, _ = await store.list(DRAIN)
    return {r.key.removeprefix(DRAIN) for r in records}


async def set_drain(store: Store, node: str, drain: bool) -> None:
    check_node_id(node)
    if drain:
        await store.put(drain_record(node), json.dumps({"at": await store.now()}).encode())
    else:
        await store.delete(drain_record(node))


def check_node_id(node: str) -> None:
    if not NAME.match(node):
        raise ConfigError(f"node id {node!r} is not valid: see 'baton nodes' for the ids")
