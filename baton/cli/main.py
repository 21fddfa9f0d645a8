"""The ``baton`` command line. Every error is one line on stderr and a non-zero exit; a
traceback is shown only with ``BATON_DEBUG=1``."""

from __future__ import annotations

import datetime as dt
import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from baton import logs
from baton.cli import cascade as cascade_cli
from baton.cli import cascade_run, context_cmd, contexts
from baton.cli import channels as channels_cli
from baton.cli import placement as placement_cli
from baton.cli import redis_failover as redis_failover_cli
from baton.cli.common import (
    EXIT_USAGE,
    LOCAL_STORE,
    api_option,
    api_token,
    console,
    existing_store,
    fail,
    need_store,
    run_async,
    store_option,
    store_or_api,
)
from baton.cli.output import Output, Shown, Table, emit, output_options
from baton.cli.watch import watch as watch_loop
from baton.cli.watch import watch_option
from baton.epochs import epoch_text, granted_at
from baton.errors import ConfigError, redact_url
from baton.lease.timings import Timings
from baton.store import Lease


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="baton")
@click.option(
    "--log-format",
    type=click.Choice(sorted(logs.FORMATS)),
    envvar=logs.FORMAT_ENV,
    default="kv",
    show_default=True,
    help="How every service writes its log lines to stderr: key=value, or one JSON object "
    "per line (also for the processes it starts) [env BATON_LOG_FORMAT].",
)
@click.option(
    "--context",
    "context_name",
    metavar="NAME",
    shell_complete=context_cmd.complete_name,
    help="Take the defaults of --store, --api, --token-file and --via from context NAME "
    "instead of the current one [env BATON_CONTEXT] (see 'baton context').",
)
def cli(log_format: str, context_name: str | None) -> None:
    """baton: fenced leadership, placement and cascaded replication."""
    logs.use_format(log_format)
    contexts.choose(context_name)


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@store_option
@click.option("--ttl", type=float, default=10.0, show_default=True, help="Lease ttl in seconds.")
@click.option("--id", "holder", metavar="ID", help="Participant id [default: HOST:PID].")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def elect(
    name: str, store_url: str | None, ttl: float, holder: str | None, command: tuple[str, ...]
) -> None:
    """Run COMMAND only while leader of NAME (COMMAND after '--').

    COMMAND gets BATON_EPOCH, BATON_LEASE and BATON_HOLDER. It is stopped (SIGTERM, then
    SIGKILL) before the lease can expire at the store when leadership is lost or cannot be
    renewed, even if this process is paused or killed. When COMMAND exits, the lease is
    released and baton exits with its status.
    """
    from baton.cli import elect as elect_mod

    url = need_store(store_url)
    timings = Timings.for_ttl(ttl)
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    who = holder or f"{socket.gethostname()}:{os.getpid()}"
    code = run_async(lambda: elect_mod.run(name, url, timings, who, argv))
    sys.exit(code)


@cli.command()
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), help="TOML file (env BATON_*)."
)
def node(config_path: Path | None) -> None:
    """Run a node agent: membership, controller election, the HTTP API."""
    from baton.node import config as node_config
    from baton.node.run import serve

    cfg = node_config.load(config_path)
    logs.setup(logging.INFO)
    run_async(lambda: serve(cfg))


@cli.command()
@click.option("--nodes", "count", default=3, show_default=True, help="How many nodes.")
@store_option
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=Path(".baton"),
    show_default=True,
    help="Where the nodes keep their files (and the SQLite store by default).",
)
@click.option("--ttl", type=float, default=10.0, show_default=True, help="Lease ttl in seconds.")
def up(count: int, store_url: str | None, data_dir: Path, ttl: float) -> None:
    """Start a local cluster in the foreground; Ctrl-C stops every node."""
    import signal as signals

    from baton.local.cluster import LocalCluster

    if not 1 <= count <= 50:
        raise click.UsageError(f"--nodes {count}: use 1 to 50")
    Timings.for_ttl(ttl)  # refuse a bad ttl before starting anything
    if store_url:
        need_store(store_url)
    cluster = LocalCluster(count, store_url, data_dir.resolve(), ttl=ttl)
    out = console()
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signals.signal(signals.SIGINT, on_signal)
    signals.signal(signals.SIGTERM, on_signal)
    cluster.start()
    try:
        out.print(f"store {redact_url(cluster.store_url)}")
        if redact_url(cluster.store_url) == cluster.store_url:  # nothing secret in it
            here = store_url is None and Path(data_dir, "store.db").resolve() == (
                LOCAL_STORE.resolve()
            )
            # Markup off: the line is printed as it is, to be pasted into a shell.
            out.print(
                f"export BATON_STORE={cluster.store_url}"
                + ("   # commands run in this directory find it without" if here else ""),
                markup=False,
                soft_wrap=True,
            )
        out.print(f"cluster token in {cluster.token_file} (Bearer token for the API)")
        for node in cluster.nodes.values():
            out.print(f"  {node.id}  {node.url}  log {cluster.data_dir / (node.id + '.log')}")
        shown = None
        while not stop:
            ctl = cluster.controller()
            if ctl != shown and ctl is not None:
                out.print(f"controller: {ctl[0]} at epoch {epoch_text(ctl[1])}")
                shown = ctl
            for node in cluster.nodes.values():
                if node.proc is not None and node.proc.popen.poll() is not None and not stop:
                    out.print(f"[red]{node.id} exited[/] (see its log)")
                    node.proc = None
            time.sleep(0.5)
    finally:
        out.print("stopping every node...")
        cluster.stop()


async def _cluster_status(url: str) -> dict[str, Any]:
    from baton.node.status import cluster_status

    async with existing_store(url) as store:
        # Suspect for 2 ttl after the lapse the store keeps, the ttl each node's membership had
        # (this process does not know the nodes' config).
        return await cluster_status(store)


def _api_status(api: str, token_file: Path | None) -> dict[str, Any]:
    import httpx

    token = api_token(token_file, "for --api")
    try:
        res = httpx.get(
            f"{api.rstrip('/')}/v1/status",
            headers={"authorization": f"Bearer {token}"},
            timeout=5,
        )
    except httpx.HTTPError as exc:
        raise ConfigError(
            f"cannot reach node API {api}: {logs.describe(exc)}; is the node running?"
        ) from None
    if res.status_code == 401:
        raise ConfigError(f"node API {api} refused the token: check --token-file")
    if res.status_code != 200:
        raise ConfigError(f"node API {api} answered {res.status_code}")
    body: dict[str, Any] = res.json()
    return body


@cli.command()
@store_option
@api_option
@click.option(
    "--token-file",
    type=click.Path(path_type=Path),
    help="Cluster token for --api (or BATON_TOKEN, else the context's token file).",
)
@output_options
@watch_option
def status(
    store_url: str | None,
    api: str | None,
    token_file: Path | None,
    out: Output,
    watch: float | None,
) -> None:
    """Show the cluster: the controller and every node (from the store, or a node's API)."""
    url, api = store_or_api(store_url, api)

    def snapshot() -> dict[str, Any]:
        if api:
            return _api_status(api, token_file)
        assert url is not None
        return run_async(lambda: _cluster_status(url))

    def render(st: dict[str, Any]) -> None:
        emit(out, st, lambda wide: _status_view(st, wide))

    if watch is None:
        render(snapshot())
    else:
        watch_loop(out, watch, snapshot, render)


def _status_view(st: dict[str, Any], wide: bool) -> list[Shown]:
    ctl = st["controller"]
    line = (
        f"controller: {ctl['id']} at epoch {epoch_text(ctl['epoch'])}"
        if ctl
        else ("controller: none")
    )
    return [line, _nodes_table(st["nodes"], wide)]


@cli.command()
@store_option
@output_options
def nodes(store_url: str | None, out: Output) -> None:
    """List the nodes and their state (live, suspect, dead)."""
    url = need_store(store_url)
    st = run_async(lambda: _cluster_status(url))
    emit(out, st["nodes"], lambda wide: [_nodes_table(st["nodes"], wide)])


_STATE_COLOURS = {"live": "green", "suspect": "yellow"}


def _nodes_table(rows: list[dict[str, Any]], wide: bool) -> Table:
    """Every node; wide: with its membership epoch, when it started and the types it runs."""
    columns: tuple[str, ...] = ("id", "state", "address", "capacity", "labels", "version")
    if wide:
        columns += ("epoch", "started", "types")
    cells = []
    for n in rows:
        row: tuple[str | Text, ...] = (
            n["id"],
            Text(n["state"], style=_STATE_COLOURS.get(n["state"], "red")),
            n["address"],
            str(n["capacity"]),
            ",".join(f"{k}={v}" for k, v in n["labels"].items()),
            n["version"],
        )
        if wide:
            started = n.get("started_at")
            row += (
                "-" if n.get("epoch") is None else str(n["epoch"]),
                _when(started) if isinstance(started, int | float) else "-",
                ",".join(n.get("types") or []) or "-",
            )
        cells.append(row)
    return Table(columns, cells, title="nodes")


def _when(seconds: float) -> str:
    """A time of the store's or a node's clock for a person: UTC to the second."""
    at = dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    return f"{at:%Y-%m-%d %H:%M:%S} UTC"


@cli.group()
def lease() -> None:
    """Inspect leases."""


def _lease_dict(item: Lease, now: float) -> dict[str, Any]:
    return {
        "name": item.name,
        "holder": item.holder,
        "epoch": item.epoch,
        "granted_at": granted_at(item.epoch),
        "ttl": item.ttl,
        "expires_at": item.expires_at,
        "expires_in": round(item.expires_at - now, 3),
    }


@lease.command("show")
@click.argument("name")
@store_option
@output_options
def lease_show(name: str, store_url: str | None, out: Output) -> None:
    """Show who holds lease NAME (exit status 1 when nobody does)."""
    url = need_store(store_url)

    async def go() -> tuple[Lease | None, float]:
        async with existing_store(url) as store:
            return await store.get_lease(name), await store.now()

    found, now = run_async(go)

    def view(wide: bool) -> list[Shown]:
        if found is None:
            return [f"{name}: free"]
        return [
            f"{name}: held by {found.holder} at epoch {epoch_text(found.epoch)}, "
            f"expires in {found.expires_at - now:.1f}s (ttl {found.ttl:g}s)"
        ]

    emit(out, _lease_dict(found, now) if found else {"name": name, "holder": None}, view)
    sys.exit(0 if found else 1)


@lease.command("list")
@store_option
@click.option("--prefix", default="", help="Only leases whose name starts with this.")
@output_options
def lease_list(store_url: str | None, prefix: str, out: Output) -> None:
    """List held leases."""
    url = need_store(store_url)

    async def go() -> tuple[list[Lease], float]:
        async with existing_store(url) as store:
            return await store.list_leases(prefix), await store.now()

    leases, now = run_async(go)

    def view(wide: bool) -> list[Shown]:
        columns: tuple[str, ...] = ("name", "holder", "epoch", "granted", "expires in", "ttl")
        rows = []
        for x in leases:
            at = granted_at(x.epoch)
            row = (
                x.name, x.holder, str(x.epoch), f"{at:%Y-%m-%d %H:%M:%S} UTC" if at else "-",
                f"{x.expires_at - now:.1f}s", f"{x.ttl:g}s",
            )  # fmt: skip
            rows.append(row + ((_when(x.expires_at),) if wide else ()))
        columns += ("expires at",) if wide else ()
        return [Table(columns, rows, title=f"leases on {redact_url(url)}")]

    emit(out, [_lease_dict(x, now) for x in leases], view)


@cli.command()
@click.option("--nodes", default=3, show_default=True, help="Election participants.")
@click.option("--ttl", type=float, default=2.0, show_default=True, help="Lease ttl in seconds.")
@click.option(
    "--spark",
    type=click.Choice(["local", "cluster"]),
    default="local",
    show_default=True,
    help="Where the cascade part's Spark runs: local[4], or a standalone cluster (a master and "
    "two workers) started for the demo.",
)
@click.option(
    "--keep/--no-keep",
    default=None,
    help="Keep the dashboard's node up at the end until Enter (or Ctrl-C). Default: when "
    "stdin is a terminal (or BATON_DEMO_KEEP=1).",
)
def demo(nodes: int, ttl: float, spark: str, keep: bool | None) -> None:
    """Run the demonstration on the embedded default (SQLite): elect, kill, take over; then
    a node cluster, a live channel, placement, a cascade on Spark and a Redis store failover;
    at the end, the web dashboard's address."""
    from baton.demo import run_demo

    if nodes < 2:
        raise click.UsageError("--nodes must be at least 2 to show a takeover")
    started = time.monotonic()
    ok = run_demo(nodes=nodes, ttl=ttl, spark=spark, keep=keep)
    click.echo(f"demo {'passed' if ok else 'FAILED'} in {time.monotonic() - started:.1f}s")
    sys.exit(0 if ok else 1)


cli.add_command(placement_cli.object_group)
cli.add_command(placement_cli.drain)
cli.add_command(placement_cli.placement)


cascade_cli.cascade.add_command(cascade_run.run)
cli.add_command(cascade_cli.cascade)
cli.add_command(channels_cli.subscribe)
cli.add_command(channels_cli.channels)
cli.add_command(redis_failover_cli.redis_failover)
cli.add_command(context_cmd.context)


def main() -> None:
    """Console entry point. ``kill -USR1`` writes every thread's stack to stderr and the
    process goes on: the one way to see what a long-running service that seems stuck is
    waiting for, without stopping it."""
    logs.setup(logging.DEBUG if os.environ.get("BATON_DEBUG") else logging.WARNING)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        cli.main(standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        fail(f"{exc.format_message()}{hint}", EXIT_USAGE)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code or EXIT_USAGE)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except Exception as exc:  # the last line of defence against a traceback for users
        if os.environ.get("BATON_DEBUG"):
            raise
        fail(f"internal error: {logs.describe(exc)} (BATON_DEBUG=1 shows a traceback)", 70)


if __name__ == "__main__":
    main()
