"""Where every command starts: the set found through ``via`` (any member's location, an SQLite
one normalised), and the kinds of error a command raises, sorted by class for the CLI's exit
codes and the API's status codes."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from baton.cascade import handover, node_ops, set_ops
from baton.cascade.db.base import split_location
from baton.errors import (
    CascadeError,
    CascadeInputError,
    ConfigError,
    NodeDatabaseError,
    NotFinished,
    redact_url,
)
from baton.store import sqlite_path, sqlite_url

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
        # A merge-leaf's location is its host's file and ``#SET``: the file is what must exist.
        path = Path(split_location(location)[0].removeprefix("sqlite://"))
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


def known(c: set_ops.CascadeSet, *names: str) -> None:
    for name in names:
        c.location(name)  # an unknown name is refused, with the known ones
