"""``baton cascade status`` drawn as the set's tree, as ``londiste status`` draws it: the root,
then each node indented under its provider, with its role, position, lag and worker state;
``-o wide`` adds every column ``cascade members`` shows and each node's location.

The cells are the verb's own (:func:`baton.cascade.verb_shown.members_grid`): only their order
and the tree's indentation are this module's, so the tree and the flat ``members`` table
always agree.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from baton.cascade import commands, observe
from baton.cascade.beat import ServiceState
from baton.cascade.model import Role
from baton.cascade.verb import Grid
from baton.cascade.verb_shown import members_grid
from baton.cli.output import Shown, Table
from baton.errors import redact_url

#: The tree's branches, as ``tree`` draws them: a child, the last child, and what stands below
#: a child that has siblings after it (or not).
_TEE, _ELL, _BAR, _GAP = "├─ ", "└─ ", "│  ", "   "

_NARROW = ("node", "role", "tick", "lag", "lag s", "worker", "state")


def in_tree_order(members: list[observe.Member]) -> Iterator[tuple[str, observe.Member]]:
    """Every member with the prefix that places it in the tree: the root first (then any
    member whose provider is not in the set, such as an unreachable one), each node followed by
    the nodes it provides, by name."""
    names = {m.name for m in members}
    below: dict[str, list[observe.Member]] = {}
    tops = []
    for m in sorted(members, key=lambda m: m.name):
        if m.provider is not None and m.provider in names and m.provider != m.name:
            below.setdefault(m.provider, []).append(m)
        else:
            tops.append(m)
    tops.sort(key=lambda m: (m.role != Role.ROOT, m.name))
    seen: set[str] = set()

    def walk(m: observe.Member, lead: str, branch: str) -> Iterator[tuple[str, observe.Member]]:
        if m.name in seen:  # a cycle cannot be made, but a drawing never loops
            return
        seen.add(m.name)
        yield lead + branch, m
        kids = below.get(m.name, [])
        under = lead + ("" if not branch else _BAR if branch == _TEE else _GAP)
        for i, kid in enumerate(kids):
            yield from walk(kid, under, _ELL if i == len(kids) - 1 else _TEE)

    for top in tops:
        yield from walk(top, "", "")
    for m in members:  # members on a cycle of providers: listed all the same
        if m.name not in seen:
            yield from walk(m, "", "")


def _worker(m: observe.Member) -> str:
    """What the node's process does now: ticking, applying, starting, waiting; or stopped,
    silent (killed, frozen or cut off), never (nothing ever served it)."""
    if m.service is None:
        return ServiceState.NEVER.value
    state = m.service.state(time.time())
    return m.service.phase.value if state is ServiceState.RUNNING else state.value


def tree(members: list[observe.Member], title: str, wide: bool) -> Table:
    """The members as a tree; ``wide``: with every column of the flat table."""
    grid = members_grid(members, title)
    cells = {row[0]: dict(zip(grid.columns, row, strict=True)) for row in grid.rows}
    rows: list[tuple[str, ...]] = []
    for prefix, m in in_tree_order(members):
        c = cells[m.name]
        state = c["state"]
        if m.paused:
            state = "paused" if state == "ok" else f"{state}, paused"
        if wide:
            rows.append((
                prefix + m.name, c["role"], c["provider"], c["tick"], c["made"], c["lag"],
                c["lag s"], c["paused"], c["state"], _worker(m), c["service"], c["tables"],
                redact_url(m.location),
            ))  # fmt: skip
        else:
            rows.append(
                (prefix + m.name, c["role"], c["tick"], c["lag"], c["lag s"], _worker(m), state)
            )
    if wide:
        columns = ("node", *grid.columns[1:9], "worker", "service", "tables", "location")
        return Table(columns, rows, title=title, fold=True)
    return Table(_NARROW, rows, title=title)


def status(shown: list[Any], result: commands.SetStatus, wide: bool) -> list[Shown]:
    """``cascade status``: the verb's lines about the set, then its members as a tree."""
    lines: list[Shown] = [item for item in shown if not isinstance(item, Grid)]
    return [*lines, tree(result.members, f"set {result.set_name}", wide)]


__all__ = ["in_tree_order", "status", "tree"]
