"""The cascade operations as the ``baton cascade`` CLI and the node's HTTP API run them: a thin
adapter with one function per command. Each parses and normalises its arguments, opens the set,
calls one operation of :mod:`~baton.cascade.set_ops` or :mod:`~baton.cascade.node_ops` (where
the rules of the domain are) and returns its result as plain data.

Each function checks its input before it writes anything and raises
:class:`~baton.errors.CascadeInputError` (a ConfigError) with one line when the input is bad (an
unknown node, a bad location, a table without a primary key, ...). When the input is well formed
but the set's state refuses the operation (a cycle, a dead provider, a node that is already
another one, a table still replicated below the root), it raises :class:`Refused`; a switchover
that did not finish within its timeout raises :class:`NotFinished`; a node database that cannot
be reached or fails raises :class:`~baton.errors.NodeDatabaseError` (its backend translated the
driver's error). :func:`classify` sorts any error into these kinds by its class alone, with its
message on one line and passwords removed, for the CLI's exit codes and the API's status codes.

Every operation is resumable: running it again after an interruption finishes the job, and
running it again after it finished changes nothing (the results say ``already``/``changed``).

This is synchronous code (node databases are): the API runs it in a thread.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Literal

from baton.cascade import node_ops, set_ops
from baton.cascade.model import Role
from baton.errors import (
    CascadeError,
    CascadeInputError,
    ConfigError,
    NodeDatabaseError,
    NotFinished,
    Refused,
    redact_url,
)
from baton.store import sqlite_path, sqlite_url

#: How often a switchover checks whether the new root has applied the switch tick.
POLL = set_ops.POLL

#: A node or set name, as :func:`baton.cascade.node_ops.check_name` accepts it.
NAME_PATTERN = node_ops.NAME_PATTERN


# -- errors ------------------------------------------------------------------------------------

#: input: bad input (changes nothing); refused: the state refuses it (changes nothing);
#: unreachable: a node database cannot be reached or fails; unfinished: run it again.
Kind = Literal["input", "refused", "unreachable", "unfinished"]


def one_line(message: str) -> str:
    """``message`` on one line (driver messages contain newlines), with passwords in URLs and
    secret query values shown as ``***``."""
    return redact_url(" ".join(message.split()))


def classify(exc: BaseException) -> tuple[Kind, str] | None:
    """The kind of an error raised by an operation and its one-line message without secrets;
    None for anything else (a bug). By class alone: the node databases translated their
    drivers' errors where they were raised."""
    kind: Kind
    if isinstance(exc, NotFinished):
        kind = "unfinished"
    elif isinstance(exc, NodeDatabaseError):
        kind = "unreachable"
    elif isinstance(exc, ConfigError):  # a CascadeInputError among others
        kind = "input"
    elif isinstance(exc, CascadeError):  # Refused, FencedOut, or a state that does not allow it
        kind = "refused"
    elif isinstance(exc, OSError):  # a file of this host (a save file): not a driver's error
        where = f"{exc.filename}: " if exc.filename else ""
        return "unreachable", one_line(f"{where}{exc.strerror or exc}")
    else:
        return None
    return kind, one_line(str(exc))


# -- locations and the set -----------------------------------------------------------------------


def normalise(location: str) -> str:
    """An SQLite location as ``sqlite:///abs/path`` (from any spelling :func:`sqlite_path` takes,
    a relative path made absolute): the location is stored in every node list and used by
    workers started elsewhere, so a path relative to this process's directory would not find
    the node from anywhere else."""
    if not location.lower().startswith("sqlite:"):
        return location
    try:  # every spelling the store accepts, with the same meaning (baton.store.sqlite_path)
        return sqlite_url(sqlite_path(location))
    except ConfigError as exc:
        raise CascadeInputError(str(exc)) from None


def existing(location: str) -> str:
    """``location`` normalised, refusing an SQLite file that does not exist: opening it would
    create an empty database, and a mistyped path must change nothing."""
    location = normalise(location)
    if location.startswith("sqlite://"):
        path = Path(location.removeprefix("sqlite://"))
        if path.parent.is_dir() and not path.exists():
            raise CascadeInputError(f"{location}: no such node database (the file does not exist)")
    return location


def open_set(via: str) -> set_ops.CascadeSet:
    """The set seen through the node list at ``via`` (any member's location)."""
    return set_ops.CascadeSet(existing(via))  # "not a cascade node" before any node list


def _known(c: set_ops.CascadeSet, *names: str) -> None:
    for name in names:
        c.location(name)  # an unknown name is refused, with the known ones


# -- creating nodes ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Created:
    name: str
    role: str
    provider: str | None
    set_name: str
    #: The stored location (an SQLite path made absolute), password shown as ``***``.
    location: str
    #: The tick it starts from (for a root, 0).
    position: int
    already: bool


def create_root(name: str, location: str, set_name: str) -> Created:
    """Make the database at ``location`` the root ``name`` of a new set ``set_name``."""
    node_ops.check_name(name)
    node_ops.check_name(set_name)  # both before the database is opened (which may create a file)
    location = normalise(location)
    before = node_ops.installed(location)
    with set_ops.refusing():
        node_ops.create_root(name, location, set_name)
    return Created(name, Role.ROOT.value, None, set_name, redact_url(location), 0,
                   before is not None)  # fmt: skip


def create_subscriber(role: Role, name: str, location: str, provider: str, via: str) -> Created:
    """Add the branch or leaf ``name`` at ``location``, receiving from ``provider``."""
    node_ops.check_name(name)
    if role is Role.ROOT:
        raise CascadeInputError("use create-root for a root")
    c = open_set(via)
    _known(c, provider)
    location = normalise(location)
    before = node_ops.installed(location)
    with set_ops.refusing():
        st = node_ops.create_subscriber(role, name, location, provider, c.via)
    return Created(name, role.value, provider, st.set_name, redact_url(location), st.position,
                   before is not None)  # fmt: skip


# -- tables ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TableState:
    node: str
    table: str
    #: ``ok`` (the root captures it), ``copying`` (its worker copies it), ``catching-up``.
    state: str


@dataclasses.dataclass(frozen=True, slots=True)
class TableAdded:
    table: str
    nodes: list[TableState]
    #: With ``everywhere``: the nodes skipped because they are tagged dead.
    skipped: list[str]


def add_table(
    via: str, table: str, node: str | None = None, everywhere: bool = False
) -> TableAdded:
    """Replicate ``table`` on ``node``, or on every live node (root first, then each node after
    its provider). The root captures it; elsewhere it is registered as ``copying`` and the
    node's worker copies it from the provider with Spark, then catches up."""
    if (node is None) == (not everywhere):
        raise CascadeInputError("give either a node or all")
    c = open_set(via)
    done = [TableState(n, table, state) for n, state in set_ops.add_table(c, table, node)]
    skipped = sorted(n for n in c.nodes if c.dead(n)) if everywhere else []
    return TableAdded(table, done, skipped)


@dataclasses.dataclass(frozen=True, slots=True)
class TableRemoved:
    node: str
    table: str
    #: False: it was not replicated (nothing to do).
    removed: bool
    #: The node is the root: it no longer captures the table.
    uncaptured: bool


def remove_table(via: str, table: str, node: str) -> TableRemoved:
    """Stop replicating ``table`` on ``node`` (its rows stay). At the root, stop capturing it,
    which is refused while another live node replicates it."""
    removed, uncaptured = set_ops.remove_table(open_set(via), table, node)
    return TableRemoved(node, table, removed, uncaptured)


def tables(via: str, node: str) -> dict[str, str]:
    """The tables ``node`` replicates, with their state (copying, catching-up, ok)."""
    return set_ops.tables(open_set(via), node)


@dataclasses.dataclass(frozen=True, slots=True)
class Missing:
    node: str
    #: None: the node is the root (it has no provider).
    provider: str | None
    #: The tables the provider replicates and the node does not.
    tables: list[str]


def missing(via: str, node: str) -> Missing:
    """The tables ``node``'s provider replicates that ``node`` does not (for add-table)."""
    provider, tables = set_ops.missing(open_set(via), node)
    return Missing(node, provider, tables)


# -- events ------------------------------------------------------------------------------------


def parse_event_data(text: str) -> dict[str, Any]:
    """An event's data given as JSON text: it must be an object."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CascadeInputError(f"data is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise CascadeInputError(f"data must be a JSON object, not {type(payload).__name__}")
    return payload


@dataclasses.dataclass(frozen=True, slots=True)
class Emitted:
    ev_id: int
    type: str
    root: str


def emit(via: str, type_: str, data: dict[str, Any]) -> Emitted:
    """Add a custom event at the set's live root; it travels with the next tick."""
    node_ops.check_event_type(type_)
    c = open_set(via)
    with set_ops.refusing():
        ev_id, root = set_ops.emit(c, type_, data)
    return Emitted(ev_id, type_, root)


# -- providers, tags, pause ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderChanged:
    node: str
    provider: str
    previous: str | None
    changed: bool


def change_provider(via: str, node: str, provider: str) -> ProviderChanged:
    """Make ``node`` receive from ``provider``; refused for the root, a leaf, dead or cycling
    provider, or one that lacks ``node``'s tick (see :func:`candidates`)."""
    c = open_set(via)
    _known(c, node, provider)
    if provider == node:
        raise CascadeInputError(f"{node} cannot be its own provider")
    previous = c.state(node).provider
    with set_ops.refusing():
        set_ops.change_provider(c, node, provider)
    return ProviderChanged(node, provider, previous, previous != provider)


def candidates(via: str, node: str) -> list[str]:
    """The nodes that can be ``node``'s provider now (no cycle, alive, still have its tick)."""
    return set_ops.candidates(open_set(via), node)


@dataclasses.dataclass(frozen=True, slots=True)
class Tagged:
    node: str
    dead: bool
    #: Members whose node list could not be updated: run it again when they are back.
    not_reached: list[str]


def tag(via: str, node: str, dead: bool) -> Tagged:
    """Tag ``node`` dead (or alive) in every reachable node list."""
    c = open_set(via)
    _known(c, node)
    with set_ops.refusing():
        missed = [n for n in set_ops.tag(c, node, dead) if n != node]
    return Tagged(node, dead, missed)


@dataclasses.dataclass(frozen=True, slots=True)
class Paused:
    node: str
    paused: bool


def set_paused(via: str, node: str, paused: bool) -> Paused:
    """Pause (or resume) ``node``'s worker: it applies nothing while paused."""
    c = open_set(via)
    _known(c, node)
    set_ops.set_paused(c, node, paused)
    return Paused(node, paused)


# -- switchover, failover, resurrect ------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Switched:
    new_root: str
    #: The root before (None if there was none).
    old_root: str | None
    #: The switch tick: the new root is the root from it.
    tick: int
    already: bool


def switchover(via: str, new_root: str, timeout: float = 60.0) -> Switched:
    """Planned: the branch ``new_root`` becomes the root, the old root its branch (nothing
    lost). Waits up to ``timeout`` seconds for ``new_root``'s worker to apply the switch tick;
    raises :class:`NotFinished` if it did not (the old root no longer captures: run it again)."""
    if not timeout > 0:
        raise CascadeInputError(f"bad timeout {timeout!r}: give a number of seconds above 0")
    c = open_set(via)
    _known(c, new_root)  # unknown names first, with the known ones
    old = set_ops.live_root(c)
    with set_ops.refusing():
        tick = set_ops.switchover(c, new_root, timeout=timeout)
    return Switched(new_root, old, tick, old == new_root)


@dataclasses.dataclass(frozen=True, slots=True)
class FailedOver:
    dead_root: str
    new_root: str
    #: The new root's last tick when promoted: the set goes on from it.
    fork: int
    #: One line per node that needs attention.
    notes: list[str]


def failover(via: str, dead_root: str) -> FailedOver:
    """Unplanned: ``dead_root`` is gone. Tag it dead, promote the live branch with the highest
    tick and redirect the nodes that received from ``dead_root``."""
    c = open_set(via)
    _known(c, dead_root)  # unknown names first, with the known ones
    with set_ops.refusing():
        new_root, fork, notes = set_ops.failover(c, dead_root)
    return FailedOver(dead_root, new_root, fork, notes)


@dataclasses.dataclass(frozen=True, slots=True)
class Resurrected:
    node: str
    #: Its provider now: the current root.
    provider: str | None
    #: The fork tick, where it goes on from.
    fork: int
    #: Events saved to ``file`` by this run (0 on a re-run: the file is kept).
    saved: int
    file: str


def resurrect(via: str, old_root: str, save: Path) -> Resurrected:
    """``old_root`` came back after a failover: save the events it had after the fork to
    ``save`` (JSON lines, a file on this host), and make it a branch of the current root."""
    c = open_set(via)
    _known(c, old_root)
    if not save.parent.is_dir():
        raise CascadeInputError(f"{save}: directory {save.parent} does not exist")
    if save.is_dir():
        raise CascadeInputError(f"{save} is a directory: give a file name")
    with set_ops.refusing():
        saved = set_ops.resurrect(c, old_root, save)
    st = c.state(old_root)
    return Resurrected(old_root, st.provider, st.position, saved, str(save))


# -- status ------------------------------------------------------------------------------------


def member_dict(m: set_ops.Member) -> dict[str, Any]:
    """A member as JSON carries it (its location without a password)."""
    out = dataclasses.asdict(m)
    out["location"] = redact_url(m.location)
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class SetStatus:
    set_name: str
    #: The live root (None: use failover).
    root: str | None
    global_watermark: int | None
    members: list[set_ops.Member]

    def as_dict(self) -> dict[str, Any]:
        return {
            "set": self.set_name,
            "root": self.root,
            "global_watermark": self.global_watermark,
            "members": [member_dict(m) for m in self.members],
        }


def members(via: str) -> tuple[str, list[set_ops.Member]]:
    """The set's name and every member: role, provider, position, lag (ticks and seconds),
    paused, dead, reachable, tables."""
    c = open_set(via)
    return c.set_name, set_ops.members(c)


def status(via: str) -> SetStatus:
    """The set: its live root, global watermark and members."""
    c = open_set(via)
    root, watermark, found = set_ops.status(c)
    return SetStatus(c.set_name, root, watermark, found)


# -- check -------------------------------------------------------------------------------------


def check(via: str, node: str, table: str | None = None) -> dict[str, Any]:
    """Compare ``node``'s rows with its provider's (row count and checksum) for each table it
    replicates, or only ``table``: ``{"node", "position", "provider", "provider_position",
    "equal", "tables"}``. A node behind its provider differs until it catches up."""
    return set_ops.check(open_set(via), node, table)


__all__ = [
    "NAME_PATTERN",
    "POLL",
    "Created",
    "Emitted",
    "FailedOver",
    "Kind",
    "Missing",
    "NotFinished",
    "Paused",
    "ProviderChanged",
    "Refused",
    "Resurrected",
    "SetStatus",
    "TableAdded",
    "TableRemoved",
    "TableState",
    "Tagged",
    "add_table",
    "candidates",
    "change_provider",
    "check",
    "classify",
    "create_root",
    "create_subscriber",
    "emit",
    "existing",
    "failover",
    "member_dict",
    "members",
    "missing",
    "normalise",
    "one_line",
    "open_set",
    "parse_event_data",
    "remove_table",
    "resurrect",
    "set_paused",
    "status",
    "switchover",
    "tables",
    "tag",
]
