"""What every ``baton`` command that prints a result prints, and how: one option set
(``-o/--output table|wide|json|yaml``, ``--json``, ``--no-headers``) and one renderer.

A command hands :func:`emit` two things: the result as data (a *document*), and a view of it
for a person (lines and tables, :data:`Shown`), made with or without the wide columns. The
document is what ``-o json`` and ``-o yaml`` print, in one shape for every command:

- one document per command (one per snapshot with ``--watch``), JSON on one line;
- a timestamp is an ISO-8601 UTC string (``2026-11-28T02:55:45.355Z``), ``null`` when not
  known: a number under one of the keys of :data:`TIMESTAMPS` (the store's and the nodes'
  clocks in seconds since 1970, as the services keep them);
- durations are seconds as numbers (``ttl``, ``expires_in``, ``lag_seconds``), epochs integers.

Tables are not wrapped when stdout is not a terminal (see :func:`baton.cli.common.console`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any, Literal, TypeVar

import click
from rich.table import Table as RichTable
from rich.text import Text

from baton.cascade.verb import Grid
from baton.cli.common import console

F = TypeVar("F", bound=Callable[..., Any])


class Format(enum.StrEnum):
    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


@dataclasses.dataclass(frozen=True, slots=True)
class Table:
    """A table a person reads; a cell is plain text, or a :class:`rich.text.Text` with a
    colour. Never read as markup: a node named ``[red]`` shows as it is."""

    columns: tuple[str, ...]
    rows: Sequence[tuple[str | Text, ...]]
    title: str | None = None
    #: Long cells fold onto more lines instead of being cut.
    fold: bool = False


#: What a person reads of a result, in order: lines and tables (a cascade verb's :class:`Grid`
#: is one too).
Shown = str | Text | Table | Grid
#: The person's view of a result: ``wide`` asks for the columns a table leaves out.
View = Callable[[bool], Sequence[Shown]]


@dataclasses.dataclass(frozen=True, slots=True)
class Output:
    """How a command prints: the format, and whether tables have their header row."""

    format: Format = Format.TABLE
    headers: bool = True

    @property
    def for_people(self) -> bool:
        return self.format in (Format.TABLE, Format.WIDE)


#: The shared options: (names, settings) of each.
_OPTIONS: list[tuple[list[str], dict[str, Any]]] = [
    (
        ["-o", "--output", "output_format"],
        {
            "type": click.Choice([f.value for f in Format]),
            "default": None,
            "metavar": "FORMAT",
            "help": "table (the default), wide (every column), json (one document on one "
            "line) or yaml.",
        },
    ),
    (["--json", "as_json"], {"is_flag": True, "help": "The same as -o json."}),
    (["--no-headers"], {"is_flag": True, "help": "Tables without their title and header row."}),
]


def output_params() -> list[click.Parameter]:
    """The shared options, for a command built from parameters (the cascade verbs);
    :func:`output_of` reads them back."""
    return [click.Option(names, **settings) for names, settings in _OPTIONS]


def output_of(given: dict[str, Any]) -> Output:
    """The :class:`Output` of a command's parameters (removed from ``given``)."""
    chosen, as_json = given.pop("output_format", None), given.pop("as_json", False)
    headers = not given.pop("no_headers", False)
    if as_json and chosen not in (None, Format.JSON.value):
        raise click.UsageError(f"--json is -o json: give it or -o {chosen}, not both")
    fmt = Format.JSON if as_json else Format(chosen or Format.TABLE.value)
    return Output(fmt, headers)


def output_options(fn: F) -> F:
    """``-o/--output``, ``--json`` and ``--no-headers`` on a command; it is called with
    ``out``, an :class:`Output`, in their place."""

    @functools.wraps(fn)
    def run(*args: Any, **given: Any) -> Any:
        return fn(*args, out=output_of(given), **given)

    decorated: Callable[..., Any] = run
    for names, settings in reversed(_OPTIONS):
        decorated = click.option(*names, **settings)(decorated)
    return decorated  # type: ignore[return-value]


# -- the document ---------------------------------------------------------------------------


def iso(seconds: float | None) -> str | None:
    """``seconds`` since 1970 as ISO-8601 UTC with milliseconds (None, or 0: not known)."""
    if seconds is None or seconds <= 0:
        return None
    at = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


#: The fields that hold a time (seconds since 1970 where baton keeps them): named, not guessed
#: from a suffix, so that a user's table or sequence named ``..._at`` is never taken for one.
TIMESTAMPS = frozenset(
    {"at", "created_at", "expires_at", "granted_at", "started_at", "store_time", "tick_time"}
)


def _is_timestamp(key: str) -> bool:
    return key in TIMESTAMPS


def document(value: Any, key: str = "") -> Any:
    """``value`` as plain JSON data in the shape every command prints (see the module's
    docstring): dataclasses as objects, enums as their values, paths as strings, timestamps
    (by their key, ``key`` being the one ``value`` is under) as ISO-8601 UTC strings, dates
    and times of day in ISO-8601, anything else as its text."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return iso(float(value)) if _is_timestamp(key) else value
    if isinstance(value, enum.Enum):
        return document(value.value, key)
    if isinstance(value, str):
        return value
    if isinstance(value, dt.datetime):
        return iso(value.timestamp())
    if isinstance(value, PurePath):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return document(dataclasses.asdict(value), key)
    if isinstance(value, Mapping):
        return {str(k): document(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [document(v, key) for v in value]
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    # A value read from a table (a key compare reports: a Decimal, bytes): as its text, exact.
    return str(value)


def dumps(doc: Any, fmt: Format) -> str:
    """``doc`` (already a :func:`document`) as JSON on one line, or as YAML."""
    if fmt is Format.YAML:
        try:
            import yaml
        except ImportError:
            raise click.UsageError(
                "-o yaml needs PyYAML: pip install pyyaml (or use -o json)"
            ) from None
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).rstrip("\n")
    return json.dumps(doc)


# -- printing ---------------------------------------------------------------------------------


def emit(out: Output, doc: Any, view: View) -> None:
    """Print a command's result: ``doc`` for ``-o json|yaml``, else ``view(wide)``."""
    if out.for_people:
        show(view(out.format is Format.WIDE), out.headers)
    else:
        click.echo(dumps(document(doc), out.format))


def show(shown: Sequence[Shown], headers: bool = True) -> None:
    """Lines and tables, in order; ``headers=False`` drops each table's title and header row
    and draws no borders (rows a script can split on whitespace)."""
    for item in shown:
        if isinstance(item, str):
            click.echo(item)
        elif isinstance(item, Text):
            console().print(item)
        else:
            console().print(_rich_table(item, headers))


def _rich_table(item: Table | Grid, headers: bool) -> RichTable:
    overflow: Literal["fold", "ellipsis"] = "fold" if item.fold else "ellipsis"
    if headers:
        table = RichTable(title=item.title)
    else:
        table = RichTable(show_header=False, box=None, pad_edge=False, show_edge=False)
    for column in item.columns:
        table.add_column(column, overflow=overflow)
    for row in item.rows:
        table.add_row(*(c if isinstance(c, Text) else Text(c) for c in row))
    return table


__all__ = [
    "TIMESTAMPS",
    "Format",
    "Output",
    "Shown",
    "Table",
    "View",
    "document",
    "dumps",
    "emit",
    "iso",
    "output_of",
    "output_options",
    "output_params",
    "show",
]
