"""``--watch [SECONDS]``: show a command's result again and again until Ctrl-C (exit 130), the
one loop of ``baton status`` and ``baton cascade status`` (and the other cascade reads)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from baton.cli.output import Format, Output

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: Seconds between two snapshots when ``--watch`` is given without a number.
EVERY = 2.0


_SETTINGS: dict[str, Any] = {
    "type": click.FloatRange(min=0.1),
    "is_flag": False,
    "flag_value": EVERY,
    "default": None,
    "metavar": "[SECONDS]",
    "help": "Show it again every SECONDS (2 when not given) until Ctrl-C: on a terminal in "
    "place; piped, one snapshot after another (each JSON document on its own line, YAML "
    "documents after ---).",
}


def watch_param() -> click.Option:
    """The ``--watch`` option, for a command built from parameters (the cascade reads)."""
    return click.Option(["--watch"], **_SETTINGS)


def watch_option(fn: F) -> F:
    """``--watch [SECONDS]`` on a command (its value as ``watch``, None when not given)."""
    return click.option("--watch", **_SETTINGS)(fn)


def watch(
    out: Output, every: float, snapshot: Callable[[], T], show: Callable[[T], None]
) -> NoReturn:
    """``show(snapshot())`` every ``every`` seconds until interrupted. For a person, on a
    terminal the screen is redrawn; piped, each snapshot follows a ``-- DATE TIME`` line. A
    snapshot that fails ends the loop with its error, as the command alone would."""
    tty = sys.stdout.isatty()
    while True:
        value = snapshot()  # before clearing: the screen stays while a slow read runs
        if out.for_people:
            if tty:
                click.clear()
            else:
                click.echo(f"-- {time.strftime('%Y-%m-%d %H:%M:%S')}")
        elif out.format is Format.YAML:
            click.echo("---")
        show(value)
        sys.stdout.flush()
        time.sleep(every)


__all__ = ["EVERY", "watch", "watch_option", "watch_param"]
