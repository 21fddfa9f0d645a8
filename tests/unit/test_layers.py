"""baton's import layering, read from the source: ``pytest tests/unit/test_layers.py``.

Every ``import`` and ``from ... import`` in every module under ``baton/`` counts: at module
level, inside functions (a lazy import is still a dependency, and the usual way to hide a
cycle), and under ``if TYPE_CHECKING:`` (a type-only import is a dependency of the design: the
module cannot be read, or checked by mypy, without the other; and a lower layer naming a higher
one's types is exactly the coupling the layers forbid). What is checked:

(a) no import cycle between modules;
(b) no import cycle between *units*: the folders under ``baton/`` (``baton.cascade``,
    ``baton.placement``, ...) and the modules directly in it (``baton.errors``, ...);
(c) every unit has a place in :data:`LAYERS`, and no unit imports one of a higher layer;
(d) the units of :data:`INDEPENDENT` do not import each other.

An import names its module exactly: ``from baton.store import Lease`` depends on
``baton.store``, ``from baton import logs`` on ``baton.logs``. Python also runs every parent
package's ``__init__`` first, but that is not a dependency the importing code chose, so it is
not counted (otherwise everything would depend on ``baton/__init__.py``).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

BATON = Path(__file__).resolve().parents[2] / "baton"

#: The layers, lowest first. A unit imports only units of its own layer or of lower ones (and,
#: by (b), never in a circle). Why this order:
LAYERS: list[tuple[str, ...]] = [
    # Leaves that everything uses: the exception tree, log formatting, timing values and the
    # store's keyspace. They know nothing else of baton.
    (
        "baton.errors",
        "baton.logs",
        "baton.epochs",
        "baton.keys",
        "baton.backoff",
        "baton.validation",
        "baton.settings",
        "baton.clock",
        # The collector paused around a loop of many objects (the store, the cascade).
        "baton.collector",
        # Node-to-node HTTP (the cluster token, the listen address): here, below both the
        # channels and the node agent, so that the two share one transport.
        "baton.transport",
    ),
    # The coordination store: leases, records, the change feed. Knows nothing of elections.
    ("baton.store",),
    # Leadership over the store: elections, the many-lease keeper, the synchronous facade, and
    # ``baton elect``'s supervisor and guard. Know nothing of nodes or placement.
    ("baton.lease",),
    # Two domains side by side, which know nothing of each other (see INDEPENDENT):
    # placement (objects, control groups, the controller and the workload contract; types that
    # run on it register through entry points, and the controller is given a store, an
    # election, peers and metrics, never a node agent), and the event queue and cascade (node
    # databases and their operations; knows nothing of Spark).
    ("baton.placement", "baton.cascade"),
    # The data pipeline on Spark: the ``baton`` source, the apply sink, the worker, built on
    # the cascade's node databases.
    ("baton.spark",),
    # A cascade node's service (ticker, Spark worker, watermarks), running it under a lease,
    # and the ``cascade-worker`` workload that runs it as a placed object: where placement and
    # the cascade meet.
    ("baton.service",),
    # The public API (``baton/__init__.py``): re-exports the layers below (those above the
    # leadership layer lazily). Nothing below imports it.
    ("baton",),
    # Live channels (one upstream per channel, led under a lease) and store failover (a Redis
    # master switch every client agrees to): services the node agent runs and serves, which talk
    # to other nodes over HTTP, never through the agent's objects.
    ("baton.channels", "baton.failover"),
    # The node agent: membership, the controller role, the HTTP API; runs workloads.
    ("baton.node",),
    # ``baton up``'s local cluster: node processes on one host, and the process, port and
    # waiting tools it is built on (it starts ``baton node`` by its command, never imports it).
    ("baton.local",),
    # The public test kit: servers, fenced resources, cascades and channels in one process;
    # re-exports the local cluster's tools.
    ("baton.testing",),
    # The fault campaign (``python -m baton.chaos``): network namespaces, faults, a history and
    # its checker, over a cluster of real processes started with the test kit.
    ("baton.chaos",),
    # ``baton demo``: walks through a local cluster with the test kit.
    ("baton.demo",),
    # The command line, over everything.
    ("baton.cli",),
]

#: Units of one layer (or of layers next to each other) that must not import each other in either
#: direction: placement places whatever registers as a workload type, and the queue and its
#: Spark pipeline run with or without placement.
INDEPENDENT: list[tuple[str, str]] = [
    ("baton.placement", "baton.cascade"),
    ("baton.placement", "baton.spark"),
]

#: Imports that break a rule today, in files whose owners are moving them: (importer, imported)
#: -> where. The checks above skip them; an entry that no longer breaks a rule fails
#: test_known_exceptions_are_still_needed, so the list can only shrink.
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(frozen=True, slots=True)
class Import:
    importer: str
    imported: str
    line: int
    where: str  # "module", "function" or "TYPE_CHECKING"

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.path()}:{self.line}, {self.where})"

    def path(self) -> str:
        parts = self.importer.split(".")
        file = BATON.parent.joinpath(*parts)
        init = file / "__init__.py"
        return str((init if init.exists() else file.with_suffix(".py")).relative_to(BATON.parent))


@cache
def modules() -> dict[str, Path]:
    """Every module under baton/, by dotted name (a package is its ``__init__``)."""
    out = {}
    for path in sorted(BATON.rglob("*.py")):
        parts = list(path.relative_to(BATON.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, where: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, where
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk(ast.Module([stmt], []), "TYPE_CHECKING")
            for stmt in child.orelse:
                yield from _walk(ast.Module([stmt], []), where)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk(child, "function" if where == "module" else where)
        else:
            yield from _walk(child, where)


def _resolve(name: str, known: Iterable[str]) -> str | None:
    """The baton module ``name`` is in (``baton.x.Y`` -> ``baton.x``), or None."""
    known = set(known)
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports() -> tuple[Import, ...]:
    mods = modules()
    out: list[Import] = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        for node, where in _walk(tree, "module"):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                # ``from pkg import sub`` imports the submodule when there is one.
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            for target in targets:
                if not (target == "baton" or target.startswith("baton.")):
                    continue
                imported = _resolve(target, mods)
                if imported is not None and imported != name:
                    out.append(Import(name, imported, node.lineno, where))
    return tuple(sorted(set(out), key=str))


def unit(module: str) -> str:
    """The folder or top-level module ``module`` belongs to."""
    return ".".join(module.split(".")[:2])


def layer_of() -> dict[str, int]:
    return {u: i for i, units in enumerate(LAYERS) for u in units}


def checked() -> list[Import]:
    """Every import but the known exceptions."""
    return [i for i in imports() if (i.importer, i.imported) not in KNOWN]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walk_sees_every_kind_of_import() -> None:
    found = imports()
    wheres = {i.where for i in found}
    assert wheres == {"module", "function", "TYPE_CHECKING"}, wheres
    # Spot checks that the resolution is right: a submodule, a package, the facade.
    pairs = {(i.importer, i.imported) for i in found}
    assert ("baton.lease.election", "baton.store.base") in pairs
    assert ("baton.lease.sync", "baton.store") in pairs
    assert ("baton", "baton.placement.workload") in pairs  # under TYPE_CHECKING


def test_cycles_are_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_no_cycle_between_modules() -> None:
    found = checked()
    edges: dict[str, set[str]] = defaultdict(set)
    for i in found:
        edges[i.importer].add(i.imported)
    bad = cycles(edges)
    report = "\n".join(
        "cycle "
        + " <-> ".join(c)
        + ":\n"
        + "\n".join(f"  {i}" for i in found if i.importer in c and i.imported in c)
        for c in bad
    )
    assert not bad, f"import cycles between modules:\n{report}"


def test_no_cycle_between_folders() -> None:
    found = checked()
    between: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for i in found:
        if unit(i.importer) != unit(i.imported):
            between[(unit(i.importer), unit(i.imported))].append(i)
    edges: dict[str, set[str]] = defaultdict(set)
    for a, b in between:
        edges[a].add(b)
    bad = cycles(edges)
    report = "\n".join(
        "cycle "
        + " <-> ".join(c)
        + ":\n"
        + "\n".join(
            f"  {a} -> {b}: " + ", ".join(f"{i.path()}:{i.line}" for i in imps)
            for (a, b), imps in sorted(between.items())
            if a in c and b in c
        )
        for c in bad
    )
    assert not bad, f"import cycles between folders:\n{report}"


def test_every_unit_has_a_layer() -> None:
    units = {unit(m) for m in modules()}
    placed = layer_of()
    missing = sorted(units - set(placed))
    assert not missing, f"give {missing} a place in LAYERS (tests/unit/test_layers.py)"
    gone = sorted(set(placed) - units)
    assert not gone, f"LAYERS names {gone}, which no longer exist: remove them"


def test_no_import_from_a_higher_layer() -> None:
    layer = layer_of()
    bad = [
        f"  {i}: layer {layer[unit(i.importer)]} ({unit(i.importer)}) imports layer "
        f"{layer[unit(i.imported)]} ({unit(i.imported)})"
        for i in checked()
        if layer.get(unit(i.importer), 0) < layer.get(unit(i.imported), 0)
    ]
    assert not bad, "imports from a higher layer:\n" + "\n".join(sorted(bad))


def test_independent_units_do_not_import_each_other() -> None:
    bad = [
        f"  {i}"
        for i in checked()
        if (unit(i.importer), unit(i.imported)) in INDEPENDENT
        or (unit(i.imported), unit(i.importer)) in INDEPENDENT
    ]
    assert not bad, "imports between independent units:\n" + "\n".join(sorted(bad))


def offending(found: Iterable[Import]) -> set[tuple[str, str]]:
    """The (importer, imported) pairs of ``found`` that break a rule: on a module cycle, on a
    cycle between units, or from a lower layer to a higher one."""
    found = list(found)
    layer = layer_of()
    by_module: dict[str, set[str]] = defaultdict(set)
    by_unit: dict[str, set[str]] = defaultdict(set)
    for i in found:
        by_module[i.importer].add(i.imported)
        if unit(i.importer) != unit(i.imported):
            by_unit[unit(i.importer)].add(unit(i.imported))
    module_cycle = {m: n for n, c in enumerate(cycles(by_module)) for m in c}
    unit_cycle = {u: n for n, c in enumerate(cycles(by_unit)) for u in c}
    out = set()
    for i in found:
        a, b = unit(i.importer), unit(i.imported)
        if (
            module_cycle.get(i.importer, -1) == module_cycle.get(i.imported, -2)
            or (a != b and unit_cycle.get(a, -1) == unit_cycle.get(b, -2))
            or layer.get(a, 0) < layer.get(b, 0)
            or (a, b) in INDEPENDENT
            or (b, a) in INDEPENDENT
        ):
            out.add((i.importer, i.imported))
    return out


def test_known_exceptions_are_still_needed() -> None:
    # Without this, KNOWN could only grow: an import fixed (or moved) would leave its entry
    # behind, excusing whatever import comes to have the same name.
    needed = offending(imports())
    stale = sorted(k for k in KNOWN if k not in needed)
    assert not stale, f"no longer breaking a rule, so remove from KNOWN: {stale}"
