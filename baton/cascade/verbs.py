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

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from baton.cascade import commands, node_ops

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

    def result(self, value: R) -> Any:
        """The JSON the API returns."""
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


VERBS: list[Verb[Any, Any]] = [
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

__all__ = ["VERBS", "Args", "OnNode", "OnSet", "Verb", "positional"]
