"""Helpers shared by the ``baton`` commands: one-line errors, the store and API options and
where their values come from when they are not given (the context in use)."""

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

from baton.cli import contexts
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
    help="Store URL (sqlite:///path, redis://host:port/db, postgresql://...); env BATON_STORE, "
    "else the context's.",
)


#: Where ``baton up`` keeps its SQLite store by default (its ``--data-dir``, ``.baton``): the
#: store the commands use when none is given and this file exists in the working directory.
LOCAL_STORE = Path(".baton") / "store.db"


def api_token(token_file: Path | None, use: str = "") -> str:
    """The token a command sends to a node's API: ``--token-file``, else ``BATON_TOKEN``, else
    the context's token file; :class:`ConfigError` naming them when none gives one. ``use``:
    what it is for (``for --api``), said in that error."""
    token = os.environ.get("BATON_TOKEN", "")
    if token_file is None and not token:
        found = contexts.in_use()
        if found is not None and found.token_file is not None:
            token_file = Path(found.token_file)
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {token_file}: {exc.strerror}") from None
    if not token:
        raise ConfigError(
            f"no token{' ' + use if use else ''}: give --token-file FILE, set BATON_TOKEN or "
            "a context's token_file ('baton context set NAME --token-file FILE')"
        )
    return token


def context_value(key: str) -> str | None:
    """The value of ``key`` (:data:`baton.cli.contexts.KEYS`) in the context in use: the
    default of an option when neither it nor its environment variable is given."""
    found = contexts.in_use()
    return None if found is None else getattr(found, key)


def node_api(api: str | None) -> str | None:
    """The node API a command asks: ``--api`` (or ``BATON_API``), else the context's."""
    if api:
        return api
    found = contexts.in_use()
    if found is None or found.api is None:
        return None
    try:
        return check_api_url(None, None, found.api)
    except click.BadParameter as exc:
        where = f"{contexts.config_path()}: [contexts.{found.name}] api"
        raise ConfigError(f"{where}: {exc.format_message()}") from None


def store_or_api(store_url: str | None, api: str | None) -> tuple[str | None, str | None]:
    """What a command that reads from either asks, the store's URL or a node's API: the one
    given (``--api`` first), else the context's store, else its API, else a ``baton up`` store
    in this directory (see :func:`need_store`)."""
    if api:
        return None, api
    if store_url:
        return need_store(store_url), None
    found = contexts.in_use()
    if found is not None and found.store is None and found.api is not None:
        return None, node_api(None)
    return need_store(None), None


def need_store(url: str | None) -> str:
    """The store URL given (``--store`` or ``BATON_STORE``), else the context's, else the store
    of a ``baton up`` run in this directory, else a usage error."""
    url = url or context_value("store")
    if not url:
        if not LOCAL_STORE.is_file():
            raise click.UsageError(
                "no store given: use --store URL, set BATON_STORE or use a context ('baton "
                "context set NAME --store URL'); a 'baton up' in this directory is found "
                "without any"
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
    envvar="BATON_API",
    callback=check_api_url,
    help="Ask a node's API instead of the store (http://host:port); env BATON_API.",
)
