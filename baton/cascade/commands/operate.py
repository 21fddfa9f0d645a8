"""Day-to-day operations on members: custom events at the root, providers and the
candidates for one, dead and alive tags, pause and resume."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from baton.cascade import handover, node_ops, set_ops
from baton.cascade.beat import ServiceState
from baton.cascade.commands.sets import known, open_set
from baton.errors import CascadeError, CascadeInputError, Refused

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
    known(c, node, provider)
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
    known(c, node)
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
    known(c, node)
    set_ops.set_paused(c, node, paused)
    return Paused(node, paused)
