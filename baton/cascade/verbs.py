"""The cascade's verbs, each declared once: its arguments (a pydantic model), what it runs,
its result and the lines a person reads. The ``baton cascade`` commands
(:mod:`baton.cli.cascade_verbs`) and the node's ``/v1/cascade`` routes
(:mod:`baton.node.api_cascade`) are both generated from :data:`VERBS`, so a verb's name,
arguments, checks, errors and result are the same however it is called.

An argument model's fields say how the command line takes them: a field marked
``cli="argument"`` is positional (``NODE``), every other one an option named after it
(``--provider``); ``via`` is the set, given by ``--via`` or ``BATON_CASCADE`` on the command
line and as a field over HTTP. Reads are GETs with query parameters, changes POSTs with a JSON
body; both refuse unknown fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from baton.cascade import commands, node_ops
from baton.cascade.model import Role
from baton.cascade.node_replace import Replaced

#: A node's name: checked as node_ops.check_name checks it (one message for the CLI and the
#: API), with the pattern in the API's schema.
NodeName = Annotated[
    str,
    AfterValidator(node_ops.check_name),
    Field(examples=["s1"], json_schema_extra={"pattern": commands.NAME_PATTERN}),
]
Location = Annotated[str, Field(min_length=1, max_length=4096)]
TableName = Annotated[str, Field(min_length=1, max_length=128, examples=["accounts"])]


def positional(description: str = "") -> Any:
    """A field the command line takes as a positional argument."""
    return Field(description=description or None, json_schema_extra={"cli": "argument"})


def _json_object(value: object) -> object:
    """The command line gives ``--data`` as JSON text; the API, as a JSON object."""
    return commands.parse_event_data(value) if isinstance(value, str) else value


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OnSet(Args):
    via: Location = Field(description="The location of any member of the set.")


class OnNode(OnSet):
    node: NodeName = positional()


class ChangeProvider(OnSet):
    node: NodeName = positional()
    provider: NodeName = Field(description="The new provider.")


class RemoveTable(OnSet):
    table: TableName = positional()
    node: NodeName = Field(description="The node to remove it from.")


class Failover(OnSet):
    dead_root: NodeName = positional()


class CreateRoot(Args):
    name: NodeName = positional()
    location: Location = positional()
    set: NodeName = Field(description="The name of the new set.")


class CreateSubscriber(OnSet):
    name: NodeName = positional()
    location: Location = positional()
    provider: NodeName = Field(description="The node it receives events from.")


class CreateBranch(CreateSubscriber):
    queue_only: bool = Field(
        False, description="Keep only the queue: replicate no tables (never add-table)."
    )


class AddTable(OnSet):
    """Give ``node`` or ``all`` (every live node, the root first)."""

    table: TableName = positional()
    node: NodeName | None = Field(None, description="The node to add it on.")
    all: bool = Field(False, description="Every live node, root first.")


class ReplaceNode(OnSet):
    new: NodeName = positional()
    old: NodeName = Field(description="The branch NEW replaces.")
    timeout: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Seconds to wait for NEW's worker to catch up.",
        json_schema_extra={"metavar": "SECONDS"},
    )


class Emit(OnSet):
    type: str = positional("Not I, U, D nor baton.*")
    data: Annotated[dict[str, Any], BeforeValidator(_json_object)] = Field(
        default_factory=dict, description="A JSON object.", json_schema_extra={"metavar": "JSON"}
    )


A = TypeVar("A", bound=Args)
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Verb(Generic[A, R]):
    """One cascade verb."""

    name: str
    #: What it does, for ``--help`` and the API's description (first line: the summary).
    help: str
    args: type[A]
    run: Callable[[A], R]
    #: The lines a person reads (the command line prints them; the API returns :attr:`result`).
    lines: Callable[[A, R], list[str]]
    #: A read: GET with query parameters (else POST with a JSON body).
    read: bool = False
    #: The command line takes ``--json`` and prints :meth:`result` instead of the lines.
    json: bool = False
    #: The JSON result, when it is not the result's fields as they are.
    shape: Callable[[R], Any] | None = None

    def result(self, value: R) -> Any:
        """The JSON the API returns (and the command line with ``--json``)."""
        if self.shape is not None:
            return self.shape(value)
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value  # type: ignore[arg-type]


def _tagged(args: OnNode, r: commands.Tagged) -> list[str]:
    out = [f"{r.node}: tagged {'dead' if r.dead else 'alive'}"]
    if r.not_reached:
        # Tagging is idempotent: running it again later reaches them.
        out.append(f"not reached: {', '.join(r.not_reached)} (run this again when they are back)")
    return out


def _removed(args: RemoveTable, r: commands.TableRemoved) -> list[str]:
    if not r.removed:
        return [f"{args.node}: {args.table} is not replicated (nothing to do)"]
    return [
        f"{args.node}: {args.table} removed" + (" (no longer captured)" if r.uncaptured else "")
    ]


def _done(already: bool) -> str:
    return " (already done)" if already else ""


def created_lines(r: commands.Created) -> list[str]:
    """What a person reads of a node made (create-root, -branch, -leaf, -node)."""
    if r.provider is None:
        return [f"{r.name}: root of set {r.set_name} at {r.location}{_done(r.already)}"]
    return [
        f"{r.name}: {r.role} of {r.provider} in set {r.set_name} at {r.location}, "
        f"from tick {r.position}{_done(r.already)}"
    ]


def _failed_over(args: Failover, r: commands.FailedOver) -> list[str]:
    return [
        f"new root: {r.new_root}",
        f"fork tick: {r.fork}",
        *(f"note: {note}" for note in r.notes),
        f"move writers to {r.new_root}; when {args.dead_root} is back, run "
        f"'baton cascade resurrect {args.dead_root} --save FILE'",
    ]


def _added(args: AddTable, r: commands.TableAdded) -> list[str]:
    out = []
    for t in r.nodes:
        hint = " (the node's worker copies it with Spark)" if t.state == "copying" else ""
        out.append(f"{t.node}: {t.table} {t.state}{hint}")
    out += [f"{name}: skipped (tagged dead)" for name in r.skipped]
    out += [f"{name}: skipped ({why})" for name, why in r.held.items()]
    return out


def _added_json(r: commands.TableAdded) -> dict[str, Any]:
    out = dataclasses.asdict(r)
    if not out["held"]:
        del out["held"]  # the nodes skipped as queue-only (or below one): only when any
    return out


def _replaced(args: ReplaceNode, r: Replaced) -> list[str]:
    if r.already:
        return [f"{r.new} has already replaced {r.old} (nothing to do)"]
    return [
        f"{r.new}: receives from {r.provider}, in {r.old}'s place",
        *(f"{name}: receives from {r.new}" for name in r.moved),
        f"{r.old}: tagged dead" if r.failover else f"{r.old}: receives from {r.new}",
    ]


VERBS: list[Verb[Any, Any]] = [
    Verb(
        "create-root",
        "Make the database at LOCATION the root NAME of a new set SET.",
        CreateRoot,
        lambda a: commands.create_root(a.name, a.location, a.set),
        lambda a, r: created_lines(r),
    ),
    Verb(
        "create-branch",
        "Add branch NAME at LOCATION (keeps the queue: it can provide others).",
        CreateBranch,
        lambda a: commands.create_subscriber(
            Role.BRANCH, a.name, a.location, a.provider, a.via, queue_only=a.queue_only
        ),
        lambda a, r: created_lines(r),
    ),
    Verb(
        "create-leaf",
        "Add leaf NAME at LOCATION (applies tables only; provides no one).",
        CreateSubscriber,
        lambda a: commands.create_subscriber(Role.LEAF, a.name, a.location, a.provider, a.via),
        lambda a, r: created_lines(r),
    ),
    Verb(
        "add-table",
        "Replicate TABLE on NODE: the root captures it; elsewhere it is registered as copying "
        "and the node's worker copies it from the provider with Spark, then catches up.",
        AddTable,
        lambda a: commands.add_table(a.via, a.table, a.node, a.all),
        _added,
        shape=_added_json,
    ),
    Verb(
        "node-switchover",
        "Planned: NEW takes branch OLD's place; OLD's subscribers move to NEW and OLD becomes "
        "a subscriber of NEW.",
        ReplaceNode,
        lambda a: commands.replace_node(a.via, a.new, a.old, failover=False, timeout=a.timeout),
        _replaced,
    ),
    Verb(
        "node-failover",
        "Unplanned: branch OLD is gone. NEW takes its place, its subscribers move to NEW, and "
        "OLD is tagged dead.",
        ReplaceNode,
        lambda a: commands.replace_node(a.via, a.new, a.old, failover=True, timeout=a.timeout),
        _replaced,
    ),
    Verb(
        "emit",
        "Add a custom event of TYPE at the root; every node carries it in its queue.",
        Emit,
        lambda a: commands.emit(a.via, a.type, a.data),
        lambda a, r: [
            f"event {r.ev_id} ({r.type}) added at root {r.root}; it travels with the next tick"
        ],
    ),
    Verb(
        "failover",
        "Unplanned: DEAD_ROOT is gone. Promote the live branch with the highest tick.",
        Failover,
        lambda a: commands.failover(a.via, a.dead_root),
        _failed_over,
        json=True,
    ),
    Verb(
        "change-provider",
        "Make NODE receive from PROVIDER (see candidates); its worker follows at once.",
        ChangeProvider,
        lambda a: commands.change_provider(a.via, a.node, a.provider),
        lambda a, r: [f"{a.node}: receives from {a.provider}"],
    ),
    Verb(
        "tag-dead",
        "Tag NODE dead: it is no provider candidate and stops holding the queue back.\n\n"
        "Refused while a service runs at NODE (its heartbeat is fresh).",
        OnNode,
        lambda a: commands.tag(a.via, a.node, True),
        _tagged,
    ),
    Verb(
        "tag-alive",
        "Tag NODE alive again.",
        OnNode,
        lambda a: commands.tag(a.via, a.node, False),
        _tagged,
    ),
    Verb(
        "pause",
        "Pause NODE's worker: it applies nothing until resume.",
        OnNode,
        lambda a: commands.set_paused(a.via, a.node, True),
        lambda a, r: [f"{a.node}: paused"],
    ),
    Verb(
        "resume",
        "Resume NODE's worker.",
        OnNode,
        lambda a: commands.set_paused(a.via, a.node, False),
        lambda a, r: [f"{a.node}: resumed"],
    ),
    Verb(
        "remove-table",
        "Stop replicating TABLE on NODE (its rows stay). At the root, stop capturing it: "
        "remove it from every other node first.",
        RemoveTable,
        lambda a: commands.remove_table(a.via, a.table, a.node),
        _removed,
    ),
]

__all__ = [
    "VERBS",
    "Args",
    "Location",
    "NodeName",
    "OnNode",
    "OnSet",
    "TableName",
    "Verb",
    "created_lines",
    "positional",
]
