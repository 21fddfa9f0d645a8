"""``baton context list|show|use|set|delete``: the named contexts of :mod:`baton.cli.contexts`.

Every change reads the whole file first: a file that cannot be used is refused (one line
naming it and what to fix) before anything is written. Store URLs and locations are shown
with their passwords masked, whatever the format.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from click.shell_completion import CompletionItem

from baton.cascade.commands import normalise
from baton.cli import contexts
from baton.cli.common import check_api_url, fail
from baton.cli.output import Output, Table, emit, output_options
from baton.errors import ConfigError, redact_url
from baton.store import open_store, sqlite_path, sqlite_url


def complete_name(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Context names for the shell's completion (none when the file cannot be read)."""
    try:
        names = contexts.load().contexts
    except ConfigError:
        return []
    return [CompletionItem(n) for n in sorted(names) if n.startswith(incomplete)]


_NAME = click.argument("name", shell_complete=complete_name)


def _shown(found: contexts.Context) -> dict[str, str]:
    """A context's values as printed: passwords in URLs masked."""
    return {k: redact_url(v) if k in ("store", "via") else v for k, v in found.values().items()}


@click.group("context")
def context() -> None:
    """Named contexts: the store, node API, token file and cascade set a command uses when
    neither its option nor the option's environment variable gives one."""


@context.command("list")
@output_options
def list_(out: Output) -> None:
    """List the contexts; * marks the current one."""
    found = contexts.load()
    doc = {
        "file": str(found.path),
        "current": found.current,
        "contexts": [{"name": n, **_shown(c)} for n, c in sorted(found.contexts.items())],
    }

    def view(wide: bool) -> list[Table | str]:
        if not found.contexts:
            return [f"no contexts in {found.path}: add one with 'baton context set NAME ...'"]
        columns = ("current", "name", "store", "api", "via", *(("token file",) if wide else ()))
        rows = []
        for name, c in sorted(found.contexts.items()):
            v = _shown(c)
            cells = ["*" if name == found.current else "", name]
            cells += [v.get(k, "-") for k in ("store", "api", "via")]
            if wide:
                cells.append(v.get("token_file", "-"))
            rows.append(tuple(cells))
        return [Table(columns, rows, title=f"contexts in {found.path}")]

    emit(out, doc, view)


@context.command("show")
@click.argument("name", required=False, shell_complete=complete_name)
@output_options
def show(name: str | None, out: Output) -> None:
    """Show context NAME (by default the one in use); exit 1 when none is in use."""
    if name is None:
        found = contexts.in_use()
        if found is None:
            fail(
                f"no context in use ({contexts.config_path()} sets no current one): run 'baton "
                "context use NAME'",
                1,
            )
    else:
        known = contexts.load()
        if name not in known.contexts:
            raise ConfigError(_unknown(known, name))
        found = known.contexts[name]
    values = _shown(found)
    doc = {"name": found.name, **values}
    emit(out, doc, lambda wide: [f"{found.name}:", *(f"  {k} = {v}" for k, v in values.items())])


def _unknown(known: contexts.Contexts, name: str) -> str:
    names = ", ".join(sorted(known.contexts)) or "none"
    return (
        f"no context {name!r} in {known.path} (the contexts are {names}): make it with "
        f"'baton context set {name} --store URL'"
    )


@context.command("use")
@_NAME
def use(name: str) -> None:
    """Make NAME the current context."""
    known = contexts.load(repairing=True)  # also mends a current context no longer there
    if name not in known.contexts:
        raise ConfigError(_unknown(known, name))
    contexts.save(dataclasses.replace(known, current=name))
    click.echo(f"current context: {name}")


@context.command("set")
@_NAME
@click.option("--store", metavar="URL", help="The cluster's store URL.")
@click.option("--api", metavar="URL", help="A node's API, http://HOST:PORT.")
@click.option(
    "--token-file", metavar="FILE", help="The file holding the cluster token (never the token)."
)
@click.option("--via", metavar="LOCATION", help="Any member of the cascade set to operate on.")
def set_(
    name: str, store: str | None, api: str | None, token_file: str | None, via: str | None
) -> None:
    """Make context NAME, or change the values given ('' removes one); the first context
    made becomes the current one."""
    contexts.check_name(name)
    given = {"store": store, "api": api, "token_file": token_file, "via": via}
    if all(v is None for v in given.values()):
        raise click.UsageError("give at least one of --store, --api, --token-file, --via")
    known = contexts.load()  # a file that cannot be used is refused before anything is written
    values: dict[str, str] = dict(known.contexts[name].values()) if name in known.contexts else {}
    for key, value in given.items():
        if value == "":
            values.pop(key, None)
        elif value is not None:
            values[key] = _checked(key, value)
    made = contexts.Context(name, **values)
    first = known.current is None
    contexts.save(
        dataclasses.replace(
            known, contexts={**known.contexts, name: made}, current=name if first else known.current
        )
    )
    now_current = " (now the current one)" if first else ""
    click.echo(f"context {name} saved in {known.path}{now_current}")


def _checked(key: str, value: str) -> str:
    """A value to keep: checked now rather than when a command uses it, and SQLite paths and
    the token file made absolute (a context is used from any directory)."""
    if key == "store":
        try:
            open_store(value)  # a URL that is not a store's is refused now
        except ConfigError as exc:
            raise ConfigError(f"--store: {exc}") from None
        if value.lower().startswith("sqlite:"):
            base, sep, query = value.partition("?")
            return sqlite_url(sqlite_path(base)) + sep + query
        return value
    if key == "api":
        try:
            checked = check_api_url(None, None, value)
        except click.BadParameter as exc:
            raise click.UsageError(f"--api {exc.format_message()}") from None
        assert checked is not None
        return checked
    if key == "token_file":
        path = Path(value).expanduser().absolute()
        if not path.is_file():
            raise ConfigError(
                f"--token-file {value}: no such file (the context keeps where the token is, not "
                "the token: create the file first)"
            )
        return str(path)
    return normalise(value)


@context.command("delete")
@_NAME
def delete(name: str) -> None:
    """Delete context NAME (when it is the current one, no context is current after)."""
    known = contexts.load()
    if name not in known.contexts:
        raise ConfigError(_unknown(known, name))
    rest = {n: c for n, c in known.contexts.items() if n != name}
    current = None if known.current == name else known.current
    contexts.save(dataclasses.replace(known, contexts=rest, current=current))
    was_current = known.current == name
    click.echo(f"context {name} deleted" + (" (no context is current now)" if was_current else ""))


__all__ = ["complete_name", "context"]
