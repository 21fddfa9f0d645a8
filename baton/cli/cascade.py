"""``baton cascade ...``: build and operate a cascade set (Londiste 3 style) from the command line.

The commands work on the node databases directly: no node agent or worker needs to run, except
that a switchover waits for the new root's worker to apply the switch tick. A set is found
through ``--via LOCATION`` (any member's location, or ``BATON_CASCADE``) because the node list is
the one thing every member holds.

Every command is generated from its verb's declaration (:mod:`baton.cascade.verbs`, by
:mod:`baton.cli.cascade_verbs`), as the node's HTTP API routes are: both run the same
:mod:`baton.cascade.commands`. This module holds the group, the shared ``--via`` option and
the exit status of each kind of error (``baton cascade run`` is :mod:`baton.cli.cascade_run`).
Every command is resumable (running it again after an interruption finishes the job, and
running it again after it finished changes nothing), and bad input is refused as one line on
stderr with exit status 2 before anything is written; a node database that cannot be reached
is exit 1.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click

from baton.cascade import commands
from baton.cascade.verbs import VERBS
from baton.cli import cascade_verbs
from baton.cli.common import EXIT_STORE, EXIT_USAGE, context_value, fail

P = ParamSpec("P")
R = TypeVar("R")

#: The exit status of each kind of error (see :func:`baton.cascade.commands.classify`).
EXIT = {"input": EXIT_USAGE, "refused": EXIT_USAGE, "unreachable": EXIT_STORE,
        "unfinished": EXIT_STORE}  # fmt: skip


def _handled(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn cascade and driver errors raised by a command into one line on stderr."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            found = commands.classify(exc)
            if found is None:
                raise  # a bug: main() reports it as an internal error
            kind, message = found
            fail(message, EXIT[kind])

    return run


def _via(via: str | None) -> str:
    """``--via`` (or ``BATON_CASCADE``), else the context's ``via``."""
    via = via or context_value("via")
    if not via:
        raise click.UsageError(
            "no set given: use --via LOCATION (any member), set BATON_CASCADE or use a context "
            "with one ('baton context set NAME --via LOCATION')"
        )
    return via


_VIA = {
    "envvar": "BATON_CASCADE",
    "metavar": "LOCATION",
    "help": "Any member's location (finds the set's node list); env BATON_CASCADE, else the "
    "context's.",
}


@click.group("cascade")
def cascade() -> None:
    """Build and operate a cascade set: nodes, tables, providers, switchover, failover."""


# -- every verb, generated from its declaration (baton.cascade.verbs) --------------------------

for _verb in VERBS:
    cascade.add_command(
        cascade_verbs.command(_verb, click.Option(["--via"], **_VIA), _via, _handled)  # type: ignore[arg-type]
    )


__all__ = ["cascade"]
