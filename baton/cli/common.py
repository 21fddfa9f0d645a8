"""Helpers shared by the ``baton`` commands: one-line errors and the store option."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

import click

from baton.errors import BatonError, ConfigError, StoreError
from baton.store import open_store

T = TypeVar("T")
EXIT_USAGE = 2
EXIT_STORE = 1


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


def need_store(url: str | None) -> str:
    if not url:
        raise click.UsageError("no store given: use --store URL or set BATON_STORE")
    open_store(url)  # validates the URL (ConfigError) before anything else happens
    return url
