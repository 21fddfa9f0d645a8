"""``baton object ...``, ``baton drain`` and ``baton placement``: the placement commands. They
talk to the store directly (no running node needed); the controller reacts to the change."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import click
from rich.text import Text

from baton.cli.common import existing_store, need_store, run_async, store_option
from baton.cli.output import Output, Shown, Table, emit, output_options
from baton.errors import ConfigError
from baton.keys import NODES
from baton.placement.records import (
    check_node_id,
    create_object,
    delete_object,
    make_object,
    read_drains,
    read_objects,
    set_drain,
)
from baton.placement.view import placement_view
from baton.placement.workload import check_spec, find_type, load_types
from baton.store import Store


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--selector {item!r}: expected KEY=VALUE, like zone=a")
        out[key] = value
    return out


@click.group("object")
def object_group() -> None:
    """Create, list and delete placed objects."""


@object_group.command("create")
@click.argument("type_", metavar="TYPE")
@click.argument("name")
@click.option("--partitions", default=1, show_default=True, help="Control groups (1-10000).")
@click.option("--replicas", default=1, show_default=True, help="Members per group (1-9).")
@click.option("--spec", metavar="JSON", help="Type-specific settings, a JSON object.")
@click.option("--selector", multiple=True, metavar="K=V", help="Required node label (repeat).")
@store_option
@output_options
def object_create(  # click passes every parameter by keyword
    *,
    type_: str,
    name: str,
    partitions: int,
    replicas: int,
    spec: str | None,
    selector: tuple[str, ...],
    store_url: str | None,
    out: Output,
) -> None:
    """Create object NAME of workload type TYPE."""
    url = need_store(store_url)
    obj = make_object(type_, name, partitions, replicas, spec=spec, selector=_labels(selector))
    # Before the store is even opened: a bad spec is the user's to fix, whatever the store says.
    obj = check_spec(obj)

    async def go() -> dict[str, Any]:
        async with existing_store(url) as store:
            await _check_type(store, obj.type)
            await create_object(store, obj)
            made = (await read_objects(store)).get(obj.name, obj)  # as stored: with created_at
            return made.model_dump()

    made = run_async(go)
    emit(out, made, lambda wide: [
        f"created {obj.type} {obj.name}: {obj.partitions} partition(s) x {obj.replicas}"
    ])  # fmt: skip


async def _node_types(store: Store) -> dict[str, list[str]]:
    """Every node that ever published its record, with the workload types it runs."""
    records, _ = await store.list(NODES)
    out: dict[str, list[str]] = {}
    for rec in records:
        try:
            data = json.loads(rec.value)
        except ValueError:
            continue
        types = data.get("types") if isinstance(data, dict) else None
        out[rec.key.removeprefix(NODES)] = [str(t) for t in types or [] if isinstance(t, str)]
    return out


async def _check_type(store: Store, type_name: str) -> None:
    """Refuse a workload type that neither this installation nor any node knows: an object of
    it could never be placed (a typo, or a node config without its ``[workloads]`` entry)."""
    if find_type(type_name) is not None:
        return
    known = {t for types in (await _node_types(store)).values() for t in types}
    if type_name in known:
        return
    known |= set(load_types())
    raise ConfigError(
        f"unknown workload type {type_name!r}: the types known are {', '.join(sorted(known))}; "
        "a type of your own must be in a node's [workloads] table (or an installed package's "
        "baton.workloads entry point) before objects of it are created; nothing changed"
    )


@object_group.command("list")
@store_option
@output_options
def object_list(store_url: str | None, out: Output) -> None:
    """List objects."""
    url = need_store(store_url)

    async def go() -> list[dict[str, Any]]:
        async with existing_store(url) as store:
            return [o.model_dump() for o in (await read_objects(store)).values()]

    objects = run_async(go)

    def view(wide: bool) -> list[Shown]:
        columns = ("name", "type", "partitions", "replicas", "selector", "spec")
        rows = []
        for o in objects:
            row = (
                o["name"],
                o["type"],
                str(o["partitions"]),
                str(o["replicas"]),
                ",".join(f"{k}={v}" for k, v in o["selector"].items()),
                json.dumps(o["spec"]) if o["spec"] else "",
            )
            rows.append(row + ((_when(o["created_at"]),) if wide else ()))
        return [Table((*columns, "created") if wide else columns, rows, title="objects")]

    emit(out, objects, view)


def _when(seconds: float) -> str:
    if seconds <= 0:
        return "-"
    return f"{dt.datetime.fromtimestamp(seconds, tz=dt.UTC):%Y-%m-%d %H:%M:%S} UTC"


@object_group.command("delete")
@click.argument("name")
@store_option
@output_options
def object_delete(name: str, store_url: str | None, out: Output) -> None:
    """Delete object NAME (its members are stopped by the controller)."""
    url = need_store(store_url)

    async def go() -> None:
        async with existing_store(url) as store:
            await delete_object(store, name)

    run_async(go)
    emit(out, {"deleted": name}, lambda wide: [f"deleted {name}"])


@click.command("drain")
@click.argument("node")
@click.option("--undo", is_flag=True, help="Let the node receive members again.")
@store_option
@output_options
def drain(node: str, undo: bool, store_url: str | None, out: Output) -> None:
    """Move every member off NODE and place nothing new on it."""
    url = need_store(store_url)

    async def go() -> None:
        check_node_id(node)
        async with existing_store(url) as store:
            if not undo or node not in await read_drains(store):
                known = sorted(await _node_types(store))
                if node not in known:
                    raise ConfigError(
                        f"no node {node!r} in this cluster: the nodes are "
                        f"{', '.join(known) or 'none yet'} (see 'baton nodes'); nothing changed"
                    )
            await set_drain(store, node, not undo)

    run_async(go)
    line = f"{node}: {'no longer draining' if undo else 'draining'}"
    emit(out, {"node": node, "draining": not undo}, lambda wide: [line])


@click.command("placement")
@store_option
@output_options
def placement(store_url: str | None, out: Output) -> None:
    """Objects per node and type, group leaders and terms, groups in failure reconciliation."""
    url = need_store(store_url)

    async def go() -> dict[str, Any]:
        async with existing_store(url) as store:
            return await placement_view(store)

    view = run_async(go)
    emit(out, view, lambda wide: _placement_view(view, wide))


def _placement_view(view: dict[str, Any], wide: bool) -> list[Shown]:
    """Members per node and type, then every group; wide: each group's record version and
    the transfer under way."""
    types = sorted({t for per in view["per_node"].values() for t in per})
    rows = []
    for node, per in view["per_node"].items():
        drained = " (draining)" if node in view["draining"] else ""
        rows.append(
            (
                node + drained,
                *(str(per.get(t, 0)) for t in types),
                str(view["leaders"].get(node, 0)),
            )
        )
    shown: list[Shown] = [
        Table(("node", *types, "leaders"), rows, title="members per node and type")
    ]
    columns: tuple[str, ...] = ("group", "type", "leader", "term", "members", "state")
    groups = []
    for g in view["groups"]:
        row: tuple[str, ...] = (
            g["group"],
            g["type"],
            g["leader"] or "-",
            str(g["term"]),
            ",".join(g["members"]),
            g["state"] + (f": {g['detail']}" if g["detail"] else ""),
        )
        if wide:
            moving = g["transfer"]
            row += (str(g["version"]), json.dumps(moving) if moving else "-")
        groups.append(row)
    shown.append(
        Table((*columns, "version", "transfer") if wide else columns, groups, title="groups")
    )
    if view["failures"]:
        shown.append(
            Text(f"{len(view['failures'])} group(s) in failure reconciliation", "bold red")
        )
    if view["errors"]:
        shown.append(
            Text(f"{len(view['errors'])} group(s) with a member that cannot run", "bold red")
        )
    return shown
