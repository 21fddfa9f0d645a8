"""The arguments of the cascade verbs (:mod:`baton.cascade.verbs`), one pydantic model each:
the command line's positional arguments and options, the API's body or query fields. How a
field becomes an argument or an option is said in :mod:`baton.cascade.verb`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from baton.cascade import commands
from baton.cascade.verb import (
    Args,
    HostFile,
    Location,
    NodeName,
    OnNode,
    OnSet,
    TableName,
    positional,
)


def _json_object(value: object) -> object:
    """The command line gives ``--data`` as JSON text; the API, as a JSON object."""
    return commands.parse_event_data(value) if isinstance(value, str) else value


def _timeout(description: str) -> Any:
    """How long an operation that waits for a worker waits: a minute unless told, an hour at
    the most (a client that waits longer has long given up)."""
    return Field(60.0, gt=0, le=3600, description=description,
                 json_schema_extra={"metavar": "SECONDS"})  # fmt: skip


class OnNodeOption(OnSet):
    """A read about one node, named by ``--node``."""

    node: NodeName = Field(description="The node to look at.")


class ChangeProvider(OnSet):
    node: NodeName = positional()
    provider: NodeName = Field(description="The new provider.")


class Candidates(OnNode):
    detail: bool = Field(
        False, description="With --json: objects with name, queue_only and note instead of names."
    )


class RemoveTable(OnSet):
    table: TableName = positional()
    node: NodeName = Field(description="The node to remove it from.")


class Check(OnNodeOption):
    node: NodeName = Field(description="The node to compare.")
    table: TableName | None = Field(None, description="Only this table.")


class Compare(OnSet):
    node: NodeName = positional("The branch or leaf to compare with its provider.")
    tables: list[TableName] = Field(
        default_factory=list,
        max_length=1000,
        description="The tables to compare (default: every table NODE replicates).",
        json_schema_extra={"cli": "argument", "metavar": "TABLE"},
    )
    keys: int = Field(
        10, ge=0, le=1_000_000, description="Keys of each kind shown (JSON carries them all)."
    )


class Repair(OnSet):
    node: NodeName = positional("The branch or leaf to repair.")
    table: TableName = positional("The table to make equal to the provider's.")


class Resync(OnSet):
    node: NodeName = positional("The branch or leaf to copy the table to again.")
    table: TableName = positional("The table to copy again from the provider.")
    timeout: float = Field(
        60.0, ge=0, le=3600, description="Seconds to wait for the copy to be ok (0: do not wait).",
        json_schema_extra={"metavar": "SECONDS"},
    )  # fmt: skip


class RootOf(OnSet):
    set: NodeName = positional("The set's name.")


class OnOff(StrEnum):
    ON = "on"
    OFF = "off"


class AutoFailover(OnSet):
    set: NodeName = positional("The set's name.")
    state: OnOff = positional("on or off.")


class Sync(OnSet):
    set: NodeName = positional("The set's name.")
    k: Annotated[int, Field(ge=0)] = positional(
        "How many branches must hold a transaction before the writer's commit returns "
        "(0: asynchronous, the default)."
    )


class Failover(OnSet):
    dead_root: NodeName = positional()
    accept_loss: bool = Field(
        default=False,
        description="Sync mode: promote the highest live branch even when it lacks "
        "transactions writers were acknowledged for (they are lost).",
    )


class Switchover(OnSet):
    new_root: NodeName = positional()
    timeout: float = _timeout("Seconds to wait for NEW_ROOT to apply the switch tick.")
    max_behind: int = Field(
        commands.MAX_BEHIND,
        ge=0,
        description="Refuse when NEW_ROOT is more ticks than this behind the root.",
        json_schema_extra={"metavar": "TICKS"},
    )
    dry_run: bool = Field(False, description="Check and print the steps; change nothing.")


class Resurrect(OnSet):
    old_root: NodeName = positional()
    save: HostFile = Field(
        min_length=1,
        description="The file for the events OLD_ROOT had after the fork (JSON lines); over "
        "HTTP an absolute path ON THE NODE'S HOST, whose directory must exist.",
    )


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


class CreateNode(Args):
    type: commands.NodeType = positional("root, branch, leaf, queue-only or merge-leaf")
    name: NodeName = positional()
    location: Location = positional()
    provider: NodeName | None = Field(
        None, description="The node it receives events from (not a root)."
    )
    set: NodeName | None = Field(None, description="A root: the name of the new set.")
    host: Location | None = Field(
        None,
        description="A merge-leaf: the combined set's node hosting it (the same as LOCATION).",
        json_schema_extra={"metavar": "LOCATION"},
    )
    # Not needed by a root: a set is made, not found.
    via: Location | None = Field(None, description="The location of any member of the set.")


class AddTable(OnSet):
    """Give ``node`` or ``all`` (every live node, the root first)."""

    table: TableName = positional()
    node: NodeName | None = Field(None, description="The node to add it on.")
    all: bool = Field(False, description="Every live node, root first.")


class AddSeq(OnSet):
    """Give ``node`` or ``all`` (every live node with tables, the root first)."""

    seq: TableName = positional()
    node: NodeName | None = Field(None, description="The node to keep it on.")
    all: bool = Field(False, description="Every live node with tables, root first.")


class RemoveSeq(OnSet):
    seq: TableName = positional()
    node: NodeName = Field(description="The node to stop keeping it on.")


class Execute(OnSet):
    name: str = Field(min_length=1, max_length=200, description="The script's name (a file's).")
    sql: str = Field(min_length=1, max_length=10_000_000, description="The SQL script.")


class ExecuteFile(OnSet):
    """``execute`` on the command line: a file of the caller's host."""

    file: HostFile = positional()


class ReplaceNode(OnSet):
    new: NodeName = positional()
    old: NodeName = Field(description="The branch NEW replaces.")
    timeout: float = _timeout("Seconds to wait for NEW's worker to catch up.")


class Emit(OnSet):
    type: str = positional("Not I, U, D nor baton.*")
    data: Annotated[dict[str, Any], BeforeValidator(_json_object)] = Field(
        default_factory=dict, description="A JSON object.", json_schema_extra={"metavar": "JSON"}
    )


__all__ = [
    "AddSeq",
    "AddTable",
    "AutoFailover",
    "Candidates",
    "ChangeProvider",
    "Check",
    "CreateBranch",
    "CreateNode",
    "CreateRoot",
    "CreateSubscriber",
    "Emit",
    "Execute",
    "ExecuteFile",
    "Failover",
    "OnNodeOption",
    "OnOff",
    "RemoveSeq",
    "RemoveTable",
    "ReplaceNode",
    "Resurrect",
    "RootOf",
    "Switchover",
    "Sync",
]
