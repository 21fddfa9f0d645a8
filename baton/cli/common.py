"""Helpers shared by the ``baton`` commands: one-line errors and the store option."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NoReturn, TypeVar
from urllib.parse import urlsplit

import click
from rich.console import Console

from baton.errors import BatonError, ConfigError, StoreError, redact_url
from baton.store import Store, open_store, sqlite_path

T = TypeVar("T")
EXIT_USAGE = 2
EXIT_STORE = 1


def console() -> Console:
    """Where commands print tables and lines: the terminal's width on a terminal; piped or
    redirected, lines as long as they are (rich would wrap them at 80 columns, splitting a
    word like ``catching-up`` over two lines of a script's input)."""
    return Console(width=None if sys.stdout.isatty() else 10_000)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    # One line whatever the driver put in its message (psycopg's contain newlines).
    click.echo(f"baton: error: {' '.join(message.split())}", err=True)
    sys.exit(code)


def run_async(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine for a command, turning baton errors into one-line messages."""

    async def main() -> T:
        return await fn()

    try:
        return asyncio.run(main())
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except StoreError as exc:
        fail(str(exc), EXIT_STORE)
    except BatonError as exc:
        fail(str(exc), EXIT_STORE)
    except KeyboardInterrupt:
        sys.exit(130)


store_option = click.option(
    "--store",
    "store_url",
    envvar="BATON_STORE",
    metavar="URL",
    help="Store URL (sqlite:///path, redis://host:port/db, postgresql://...); env BATON_STORE.",
)


#: Where ``baton up`` keeps its SQLite store by default (its ``--data-dir``, ``.baton``): the
#: store the commands use when none is given and this file exists in the working directory.
LOCAL_STORE = Path(".baton") / "store.db"


def api_token(token_file: Path | None, use: str = "") -> str:
    """The token a command sends to a node's API: ``--token-file``, else ``BATON_TOKEN``;
    :class:`ConfigError` naming both when neither gives one. ``use``: what it is for (``for
    --api``), said in that error."""
    token = os.environ.get("BATON_TOKEN", "")
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {token_file}: {exc.strerror}") from None
    if not token:
        raise ConfigError(
            f"no token{' ' + use if use else ''}: give --token-file FILE or set BATON_TOKEN"
        )
    return token


def need_store(url: str | None) -> str:
    """The store URL given (``--store`` or ``BATON_STORE``), else the store of a ``baton up``
    run in this directory, else a usage error."""
    if not url:
        if not LOCAL_STORE.is_file():
            raise click.UsageError(
                "no store given: use --store URL or set BATON_STORE (a 'baton up' in this "
                "directory is found without either)"
            )
        url = f"sqlite://{LOCAL_STORE.resolve()}"
    open_store(url)  # validates the URL (ConfigError) before anything else happens
    return url


def existing_store(url: str) -> Store:
    """The store at ``url`` for a command that reads or changes a cluster's state: an SQLite
    store must already be there (opening a mistyped path would create an empty store and
    answer from it, "controller: none"). Only ``baton up``, ``baton node`` and ``baton elect``
    create one."""
    if url.split(":", 1)[0].lower() == "sqlite":
        path = Path(sqlite_path(url.partition("?")[0]))
        if not path.is_file():
            raise ConfigError(
                f"no store at {redact_url(url)} ({path.resolve()} does not exist; nothing was "
                "created): check --store or BATON_STORE, or start a cluster with 'baton up' or "
                "'baton node'"
            )
    return open_store(url)


def check_api_url(
    ctx: click.Context | None, param: click.Parameter | None, value: str | None
) -> str | None:
    """Validate a node API URL (the callback of every ``--api`` option): ``http://`` or
    ``https://``, a host and a valid port. Without a scheme, httpx failed in a way that read
    like a node that is down ("is the node running?")."""
    if value is None:
        return None
    try:
        parts = urlsplit(value)
    except ValueError:  # an unbalanced IPv6 bracket
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        hint = f"http://{value}" if value and "://" not in value else "http://127.0.0.1:7400"
        raise click.BadParameter(
            f"{value!r} is not a node API URL: it needs http:// (or https://) and a host, "
            f"for example {hint}"
        )
    try:
        parts.port  # noqa: B018 - parsed on access: raises for a port that is not one
    except ValueError:
        raise click.BadParameter(f"{value!r}: the port is not a number from 0 to 65535") from None
    return value.rstrip("/")


api_option = click.option(
    "--api",
    metavar="URL",
    callback=check_api_url,
    help="Ask a node's API instead of the store (http://host:port).",
)
