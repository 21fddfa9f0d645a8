"""``baton subscribe`` and ``baton channels``: live channels from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from baton.cli.common import api_token, check_api_url, node_api, run_async
from baton.cli.output import Output, Shown, Table, emit, output_options
from baton.errors import ConfigError

token_option = click.option(
    "--token-file",
    type=click.Path(path_type=Path),
    help="Cluster token, or a per-user token a handler accepts (or BATON_TOKEN).",
)


@click.command()
@click.argument("channel")
@click.option(
    "--api",
    "apis",
    metavar="URL",
    multiple=True,
    envvar="BATON_API",
    callback=lambda ctx, param, values: tuple(check_api_url(ctx, param, v) for v in values),
    help="A node's API (http://host:port); repeat it to fail over between nodes [env "
    "BATON_API, else the context's].",
)
@token_option
@click.option("--count", type=click.IntRange(min=1), help="Exit after this many publications.")
def subscribe(
    channel: str, apis: tuple[str, ...], token_file: Path | None, count: int | None
) -> None:
    """Subscribe to CHANNEL (namespace:path) and print every message as a JSON line.

    Reconnects (to the next --api) and recovers from the last epoch and offset. Exits 0 after
    --count publications or when the channel finishes; a refusal is one line on stderr."""
    from baton.channels.client import Client
    from baton.channels.handler import parse_channel

    parse_channel(channel)  # bad input is refused before connecting
    apis = apis or (_api(None),)
    token = api_token(token_file)

    async def go() -> None:
        seen = 0
        async with Client(list(apis), token) as client:
            async for msg in client.subscribe(channel):
                click.echo(json.dumps(msg.to_dict()))
                sys.stdout.flush()
                if msg.kind == "pub":
                    seen += 1
                    if count is not None and seen >= count:
                        return

    # A refusal or a closed connection is a BatonError: one line on stderr, exit 1 (2 for
    # bad input such as a wrong token).
    run_async(go)


def _api(api: str | None) -> str:
    found = node_api(api)
    if found is None:
        raise click.UsageError(
            "no node API given: use --api URL, set BATON_API or use a context with one "
            "('baton context set NAME --api URL')"
        )
    return found


@click.command("channels")
@click.option(
    "--api",
    metavar="URL",
    envvar="BATON_API",
    callback=check_api_url,
    help="A node's API [env BATON_API, else the context's].",
)
@token_option
@output_options
def channels(api: str | None, token_file: Path | None, out: Output) -> None:
    """List the cluster's channels: leader, epoch, offset, subscribers per node."""
    import httpx

    api = _api(api)
    token = api_token(token_file)
    try:
        res = httpx.get(
            f"{api}/v1/channels/cluster", headers={"authorization": f"Bearer {token}"}, timeout=10
        )
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot reach node API {api}: {type(exc).__name__}") from None
    if res.status_code == 401:
        raise ConfigError(f"node API {api} refused the token: check --token-file")
    if res.status_code != 200:
        raise ConfigError(f"node API {api} answered {res.status_code}")
    rows: list[dict[str, Any]] = res.json()["channels"]

    def view(wide: bool) -> list[Shown]:
        cells = []
        for row in rows:
            per = ", ".join(f"{n}={k}" for n, k in sorted(row["subscribers"].items())) or "-"
            cells.append((
                row["channel"], str(row["leader"] or "-"), str(row["epoch"] or "-"),
                str(row["offset"] if row["offset"] is not None else "-"), per,
            ))  # fmt: skip
        columns = ("channel", "leader", "epoch", "offset", "subscribers")
        return [Table(columns, cells, title="channels")]

    emit(out, rows, view)


__all__ = ["channels", "subscribe"]
