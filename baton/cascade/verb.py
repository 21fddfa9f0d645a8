"""What a cascade verb is: its arguments as a pydantic model, what it runs, its result as JSON
and what a person reads of it. The verbs themselves are declared in :mod:`baton.cascade.verbs`;
the ``baton cascade`` commands (:mod:`baton.cli.cascade_verbs`) and the node's ``/v1/cascade``
routes (:mod:`baton.node.api_cascade`) are both generated from those declarations.

An argument model's fields say how the command line takes them: a field marked
``cli="argument"`` (:func:`positional`) is positional (``NODE``), every other one an option
named after it (``--provider``, a bool a flag); an enum is a choice; a :data:`HostFile` is a
path of the caller's host. ``via`` is the set, given by ``--via`` or ``BATON_CASCADE`` on the
command line and as a field over HTTP. Reads are GETs with query parameters, changes POSTs with
a JSON body; both refuse unknown fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

from baton.cascade import node_ops

#: A node's name: checked as node_ops.check_name checks it (one message for the CLI and the
#: API), with the pattern in the API's schema.
NodeName = Annotated[
    str,
    AfterValidator(node_ops.check_name),
    Field(examples=["s1"], json_schema_extra={"pattern": node_ops.NAME_PATTERN}),
]
Location = Annotated[str, Field(min_length=1, max_length=4096)]
TableName = Annotated[str, Field(min_length=1, max_length=128, examples=["accounts"])]

#: The validation context of the command line: its files are files of the caller's own host.
ON_THIS_HOST = {"host": "caller"}


class _HostPath:
    """Marks a :data:`HostFile` field, for the command line (a file path, not a directory)."""


def _host_path(value: str, info: ValidationInfo) -> str:
    if "\x00" in value:
        raise ValueError("a path cannot hold a NUL character")
    # Over HTTP the file is the node's, whose working directory the client does not know; on
    # the command line it is the caller's own, and a relative path means what it says there.
    if info.context != ON_THIS_HOST and not PurePosixPath(value).is_absolute():
        raise ValueError("give an absolute path on the node's host")
    return value


#: A file of the host that runs the operation: on the command line any path of that host, over
#: HTTP an absolute path on the node's host.
HostFile = Annotated[str, _HostPath(), AfterValidator(_host_path), Field(max_length=4096)]


def positional(description: str = "") -> Any:
    """A field the command line takes as a positional argument."""
    return Field(description=description or None, json_schema_extra={"cli": "argument"})


def is_host_path(metadata: Sequence[object]) -> bool:
    """Whether a field's metadata marks it a :data:`HostFile`."""
    return any(isinstance(m, _HostPath) for m in metadata)


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OnSet(Args):
    via: Location = Field(description="The location of any member of the set.")


class OnNode(OnSet):
    node: NodeName = positional()


@dataclass(frozen=True, slots=True)
class Grid:
    """A table a person reads: the command line draws it (``--json`` and the API carry the
    data it is made from instead)."""

    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    title: str | None = None
    #: Long cells fold onto more lines instead of being cut (every table name is shown).
    fold: bool = False


#: What a person reads of a result: lines and tables, in order.
Shown = str | Grid

A = TypeVar("A", bound=Args)
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class CommandLine:
    """A command line that takes other arguments than the API: ``execute`` takes a FILE of
    the caller's host where the API takes the script's name and text. ``convert`` turns the
    command's arguments (an instance of ``args``) into the verb's fields."""

    args: type[Args]
    convert: Callable[[Any], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Verb(Generic[A, R]):
    """One cascade verb."""

    name: str
    #: What it does, for ``--help`` and the API's description (first line: the summary).
    help: str
    args: type[A]
    run: Callable[[A], R]
    #: What a person reads (the command line prints it; the API returns :meth:`result`).
    show: Callable[[A, R], Sequence[Shown]]
    #: A read: GET with query parameters (else POST with a JSON body).
    read: bool = False
    #: The JSON result, when it is not the result's fields as they are.
    shape: Callable[[A, R], Any] | None = None
    #: What ``--json`` prints, when it is not :meth:`result` (``missing``: the names alone).
    cli_json: Callable[[A, R], Any] | None = None
    #: The command line exits with 1 (after printing) when this says so (``check``: rows
    #: differ); the API answers 200 with the result either way.
    fails: Callable[[R], bool] | None = None
    #: The type of :meth:`result`, for the API's schema.
    returns: Any = dict[str, Any]
    #: The command line's own arguments, when they are not :attr:`args`.
    cli: CommandLine | None = None

    def result(self, args: A, value: R) -> Any:
        """The JSON the API returns (and the command line with ``--json``)."""
        if self.shape is not None:
            return self.shape(args, value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        return value

    def printed(self, args: A, value: R) -> Any:
        """The JSON the command line prints with ``--json``."""
        return self.cli_json(args, value) if self.cli_json else self.result(args, value)


__all__ = [
    "ON_THIS_HOST",
    "Args",
    "CommandLine",
    "Grid",
    "HostFile",
    "Location",
    "NodeName",
    "OnNode",
    "OnSet",
    "Shown",
    "TableName",
    "Verb",
    "is_host_path",
    "positional",
]
