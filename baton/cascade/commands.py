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
import time
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from baton.cascade import (
    ddl,
    handover,
    node_ops,
    node_replace,
    observe,
    schema_check,
    seqs,
    set_ops,
    takeover,
)
from baton.cascade.beat import ServiceState
from baton.cascade.db import open_node_db
from baton.cascade.handover import SwitchPlan
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
POLL = handover.POLL
#: How many ticks a switchover's target may be behind the root, unless told otherwise.
MAX_BEHIND = handover.MAX_BEHIND

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
            raise CascadeInputError(
                f"{location}: no such node database (the file does not exist; nothing was "
                "created): check the path, or make the node with baton cascade "
                "create-root|create-branch|create-leaf"
            )
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


def create_subscriber(
    role: Role, name: str, location: str, provider: str, via: str, *, queue_only: bool = False
) -> Created:
    """Add the branch or leaf ``name`` at ``location``, receiving from ``provider``;
    ``queue_only``: a branch that keeps the queue and replicates no tables."""
    node_ops.check_name(name)
    if role is Role.ROOT:
        raise CascadeInputError("use create-root for a root")
    if queue_only and role is not Role.BRANCH:
        raise CascadeInputError("only a branch can be queue-only (a leaf has no queue)")
    c = open_set(via)
    _known(c, provider)
    location = normalise(location)
    before = node_ops.installed(location)
    with set_ops.refusing():
        st = node_ops.create_subscriber(
            role, name, location, provider, c.via, queue_only=queue_only
        )
    shown = QUEUE_ONLY_ROLE if queue_only else role.value
    return Created(name, shown, provider, st.set_name, redact_url(location), st.position,
                   before is not None)  # fmt: skip


#: How a queue-only branch's role is shown (``Created.role``, ``create-node``'s TYPE).
QUEUE_ONLY_ROLE = "queue-only"


class NodeType(StrEnum):
    """The node types of :func:`create_node` (``create-node``'s TYPE)."""

    ROOT = "root"
    BRANCH = "branch"
    LEAF = "leaf"
    QUEUE_ONLY = QUEUE_ONLY_ROLE
    MERGE_LEAF = "merge-leaf"


#: The node types of :func:`create_node`, as the CLI lists them.
NODE_TYPES = tuple(t.value for t in NodeType)


def create_node(
    type_: str,
    name: str,
    location: str,
    *,
    provider: str | None = None,
    set_name: str | None = None,
    via: str | None = None,
    host: str | None = None,
) -> Created:
    """Seed 004's ``create-node TYPE NAME LOCATION``: one verb for every kind of node.
    ``root`` needs ``set_name``; ``branch``, ``leaf`` and ``queue-only`` need ``provider`` and
    ``via``; ``merge-leaf`` needs ``provider`` and ``via`` (any member of the partition set),
    and LOCATION (or ``host``, the same) is the combined set's node that hosts it."""
    if type_ not in NODE_TYPES:
        raise CascadeInputError(f"bad node type {type_!r}: use one of {', '.join(NODE_TYPES)}")
    kind = NodeType(type_)
    if kind is NodeType.ROOT:
        if set_name is None:
            raise CascadeInputError("a root needs --set SET (the new set's name)")
        if provider is not None or host is not None:
            raise CascadeInputError("a root has no provider and no host")
        return create_root(name, location, set_name)
    if provider is None or via is None:
        raise CascadeInputError(f"a {type_} needs a provider (--provider NODE) and --via")
    if set_name is not None:
        raise CascadeInputError(f"a {type_} joins the set of its provider: leave out --set")
    if kind is NodeType.MERGE_LEAF:
        host = normalise(host or location)
        if host != normalise(location):
            raise CascadeInputError(
                "a merge-leaf lives in the combined set's node: give its location as LOCATION "
                "(--host, if given, must be the same)"
            )
        return create_merge_leaf(name, host, provider, via)
    if host is not None:
        raise CascadeInputError(f"a {type_} has no host: --host is for a merge-leaf")
    role = Role.LEAF if kind is NodeType.LEAF else Role.BRANCH
    return create_subscriber(
        role, name, location, provider, via, queue_only=kind is NodeType.QUEUE_ONLY
    )


def create_merge_leaf(name: str, host: str, provider: str, via: str) -> Created:
    """Add the merge-leaf ``name`` of ``provider``'s (partition) set, hosted in the combined
    set's node at ``host`` (see :mod:`baton.cascade.merge`)."""
    from baton.cascade import merge  # the combined sets' module: only when one is made

    node_ops.check_name(name)
    c = open_set(via)
    _known(c, provider)
    host = existing(host)
    location = merge.merge_location(host, c.set_name)
    before = node_ops.installed(location)
    with set_ops.refusing():
        st = merge.create_merge_leaf(name, host, provider, c.via)
    return Created(name, "merge-leaf", provider, st.set_name, redact_url(location), st.position,
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
    #: With ``everywhere``: the live nodes skipped because they cannot replicate a table now
    #: (queue-only, or below a queue-only provider), and why.
    held: dict[str, str] = dataclasses.field(default_factory=dict)


def add_table(
    via: str, table: str, node: str | None = None, everywhere: bool = False
) -> TableAdded:
    """Replicate ``table`` on ``node``, or on every live node (root first, then each node after
    its provider). The root captures it; elsewhere it is registered as ``copying`` and the
    node's worker copies it from the provider with Spark, then catches up."""
    if (node is None) == (not everywhere):
        raise CascadeInputError(
            "give either a node (--node NODE, or node) or every node (--all, or all)"
        )
    c = open_set(via)
    held = set_ops.without_tables(c, set_ops.live_states(c)) if everywhere else {}
    done = [TableState(n, table, state) for n, state in set_ops.add_table(c, table, node)]
    skipped = sorted(n for n in c.nodes if c.dead(n)) if everywhere else []
    return TableAdded(table, done, skipped, held)


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
class Candidate:
    name: str
    #: It keeps only the queue: it cannot give an initial copy of any table.
    queue_only: bool
    #: What to know about it as a provider ("" when nothing).
    note: str


#: Why a queue-only candidate cannot give a table's initial copy.
QUEUE_ONLY_NOTE = (
    "queue-only: it cannot provide the initial copy of a table (a copy needs a provider that "
    "replicates the table)"
)


def candidates_detail(via: str, node: str) -> list[Candidate]:
    """:func:`candidates`, each saying whether it is queue-only (it can carry the node's
    queue but cannot give it an initial table copy)."""
    c = open_set(via)
    out = []
    for name in set_ops.candidates(c, node):
        with c.db(name) as db:
            queue_only = node_ops.is_queue_only(db)
        out.append(Candidate(name, queue_only, QUEUE_ONLY_NOTE if queue_only else ""))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Tagged:
    node: str
    dead: bool
    #: Members whose node list could not be updated: run it again when they are back.
    not_reached: list[str]


def tag(via: str, node: str, dead: bool) -> Tagged:
    """Tag ``node`` dead (or alive) in every reachable node list. Tagging dead is refused
    while a service runs there (its heartbeat is fresh): a live node tagged dead stops holding
    back its provider's queue, which may then trim what it still needs (the wrong node, at
    3 a.m.)."""
    c = open_set(via)
    _known(c, node)
    if dead:
        _refuse_if_served(c, node)
    with set_ops.refusing():
        missed = [n for n in set_ops.tag(c, node, dead) if n != node]
    return Tagged(node, dead, missed)


def _refuse_if_served(c: set_ops.CascadeSet, node: str) -> None:
    try:
        served = handover.served_by(c, node)
    except (CascadeError, OSError):
        return  # unreachable, as a dead node usually is
    now = time.time()
    if served is not None and served.state(now) is ServiceState.RUNNING:
        raise Refused(
            f"{node} is alive: its service runs on {served.holder} at epoch {served.epoch} "
            f"(last heartbeat {now - served.at:.1f}s ago); stop it first, or check the name "
            "(a node tagged dead no longer holds its provider's queue back); nothing was changed"
        )


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


def switchover(
    via: str, new_root: str, timeout: float = 60.0, max_behind: int = MAX_BEHIND
) -> Switched:
    """Planned: the branch ``new_root`` becomes the root, the old root its branch (nothing
    lost). Refused, changing nothing, unless ``new_root``'s worker runs, applies and is at most
    ``max_behind`` ticks behind (:func:`switch_plan`). Waits up to ``timeout`` seconds for it to
    apply the switch tick; raises :class:`NotFinished` if it did not (the old root no longer
    captures: run it again)."""
    if not timeout > 0:
        raise CascadeInputError(f"bad timeout {timeout!r}: give a number of seconds above 0")
    c = _switch_set(via, new_root, max_behind)
    old = set_ops.live_root(c)
    with set_ops.refusing():
        tick = handover.switchover(c, new_root, timeout=timeout, max_behind=max_behind)
    return Switched(new_root, old, tick, old == new_root)


def switch_plan(via: str, new_root: str, max_behind: int = MAX_BEHIND) -> SwitchPlan:
    """What :func:`switchover` would do (``--dry-run``), after the same checks; changes
    nothing."""
    c = _switch_set(via, new_root, max_behind)
    with set_ops.refusing():
        return handover.switch_plan(c, new_root, max_behind)


def _switch_set(via: str, new_root: str, max_behind: int) -> set_ops.CascadeSet:
    if max_behind < 0:
        raise CascadeInputError(
            f"bad --max-behind {max_behind!r}: give a number of ticks, 0 or more"
        )
    c = open_set(via)
    _known(c, new_root)  # unknown names first, with the known ones
    return c


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
        new_root, fork, notes = takeover.failover(c, dead_root)
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
        saved = takeover.resurrect(c, old_root, save)
    st = c.state(old_root)
    return Resurrected(old_root, st.provider, st.position, saved, str(save))


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
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class SetStatus:
    set_name: str
    #: The live root (None: use failover).
    root: str | None
    global_watermark: int | None
    members: list[observe.Member]

    def as_dict(self) -> dict[str, Any]:
        return {
            "set": self.set_name,
            "root": self.root,
            "global_watermark": self.global_watermark,
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
    return SetStatus(c.set_name, root, watermark, _queue_only(found))


# -- check -------------------------------------------------------------------------------------


def check(via: str, node: str, table: str | None = None) -> dict[str, Any]:
    """Compare ``node``'s rows with its provider's (row count and checksum) for each table it
    replicates, or only ``table``: ``{"node", "position", "provider", "provider_position",
    "equal", "tables"}``. A node behind its provider differs until it catches up."""
    return observe.check(open_set(via), node, table)


# -- sequences ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SeqAdded:
    seq: str
    #: Each node and whether it kept the sequence already.
    nodes: list[tuple[str, bool]]


def add_seq(via: str, seq: str, node: str | None = None, everywhere: bool = False) -> SeqAdded:
    """Keep sequence ``seq`` on ``node``, or on every live node with tables (the root first):
    at least as high as the root's (PostgreSQL only: SQLite has no sequences)."""
    if (node is None) == (not everywhere):
        raise CascadeInputError(
            "give either a node (--node NODE, or node) or every node (--all, or all)"
        )
    c = open_set(via)
    return SeqAdded(seq, seqs.add_seq(c, seq, node))


@dataclasses.dataclass(frozen=True, slots=True)
class SeqRemoved:
    node: str
    seq: str
    #: False: it was not kept there (nothing to do).
    removed: bool


def remove_seq(via: str, seq: str, node: str) -> SeqRemoved:
    """Stop keeping ``seq`` on ``node`` (the sequence stays); the root last."""
    c = open_set(via)
    _known(c, node)
    return SeqRemoved(node, seq, seqs.remove_seq(c, seq, node))


def list_seqs(via: str, node: str) -> dict[str, int | None]:
    """The sequences ``node`` keeps and their last values there (None: never used)."""
    c = open_set(via)
    _known(c, node)
    return seqs.seqs(c, node)


# -- foreign keys and triggers -------------------------------------------------------------------


def fkeys(via: str, node: str) -> schema_check.Found[schema_check.ForeignKey]:
    """The foreign keys on ``node`` that applying batches can break, each with what to do."""
    c = open_set(via)
    _known(c, node)
    return schema_check.fkeys(c, node)


def triggers(via: str, node: str) -> schema_check.Found[schema_check.Trigger]:
    """The user triggers that fire for the rows applying batches writes on ``node``."""
    c = open_set(via)
    _known(c, node)
    return schema_check.triggers(c, node)


# -- scripts through the queue -------------------------------------------------------------------


def execute(via: str, name: str, sql: str) -> ddl.Executed:
    """Run the SQL script ``sql`` (named ``name``, a file's name) at the root and, through the
    queue, on every node at its place among the events (see :mod:`baton.cascade.ddl`). A
    script run before (same name and content) is not run again."""
    ddl.check_script(name, sql)
    c = open_set(via)
    return ddl.execute(c, name, sql)  # bad SQL stays bad input: not wrapped in refusing()


def read_script(path: Path) -> tuple[str, str]:
    """(name, text) of a script file of this host."""
    try:
        return path.name, path.read_text()
    except UnicodeDecodeError:
        raise CascadeInputError(f"{path}: not a text file") from None
    except FileNotFoundError:
        raise CascadeInputError(f"{path}: no such file") from None


# -- replacing a branch --------------------------------------------------------------------------


def replace_node(
    via: str, new: str, old: str, *, failover: bool, timeout: float = 60.0
) -> node_replace.Replaced:
    """``node-switchover`` (``failover`` False) or ``node-failover``: ``new`` takes branch
    ``old``'s place (see :mod:`baton.cascade.node_replace`). Waits up to ``timeout`` seconds
    for ``new``'s worker; :class:`NotFinished` if it did not get there (run it again)."""
    if not timeout > 0:
        raise CascadeInputError(f"bad timeout {timeout!r}: give a number of seconds above 0")
    c = open_set(via)
    _known(c, new, old)
    return node_replace.replace(c, new, old, failover=failover, timeout=timeout)


__all__ = [
    "MAX_BEHIND",
    "NAME_PATTERN",
    "NODE_TYPES",
    "POLL",
    "QUEUE_ONLY_NOTE",
    "QUEUE_ONLY_ROLE",
    "Candidate",
    "Created",
    "Emitted",
    "FailedOver",
    "Kind",
    "Missing",
    "NodeType",
    "NotFinished",
    "Paused",
    "ProviderChanged",
    "Refused",
    "Resurrected",
    "SeqAdded",
    "SeqRemoved",
    "SetStatus",
    "SwitchPlan",
    "TableAdded",
    "TableRemoved",
    "TableState",
    "Tagged",
    "add_seq",
    "add_table",
    "candidates",
    "candidates_detail",
    "change_provider",
    "check",
    "classify",
    "create_node",
    "create_root",
    "create_subscriber",
    "emit",
    "execute",
    "existing",
    "failover",
    "fkeys",
    "list_seqs",
    "member_dict",
    "members",
    "missing",
    "normalise",
    "one_line",
    "open_set",
    "parse_event_data",
    "read_script",
    "remove_seq",
    "remove_table",
    "replace_node",
    "resurrect",
    "set_paused",
    "status",
    "switch_plan",
    "switchover",
    "tables",
    "tag",
    "triggers",
]
