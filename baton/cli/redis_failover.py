"""``baton redis-failover``: the store-failover roles (seed 002) and their operations.

The roles' modules (HTTP server and client, redis-py, Prometheus) are imported inside the
commands, so that every other ``baton`` command starts without them."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from baton import logs
from baton.cli.common import run_async
from baton.cli.output import Output, Shown, emit, output_options
from baton.errors import ConfigError

config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="TOML file (its [redis_failover] table, or its top level).",
)
servers_option = click.option(
    "--redis-servers", metavar="H:P,H:P,...", help="Every Redis server (master and replicas)."
)
clients_option = click.option(
    "--client-ids",
    metavar="ID@H:P,...",
    help="Every client id, with where its role listens (rcc-1@10.0.1.1:9101,...).",
)
token_option = click.option(
    "--token-file",
    type=click.Path(path_type=Path),
    help="Bearer token between servers and clients (or BATON_FAILOVER_TOKEN).",
)


def _settings(config_path: Path | None, role: str, **given: Any) -> dict[str, Any]:
    """The file's keys for ``role``, overridden by the options given on the command line. A
    file with both roles (a node's ``[redis_failover]``) keeps the server's keys in its
    ``server`` sub-table."""
    from baton.failover.config import load_table

    data = load_table(config_path)
    server = data.pop("server", None)
    if role == "server" and isinstance(server, dict):
        data = dict(server)
    if given.get("client_ids") is not None:
        data.pop("clients", None)
    for key, value in given.items():
        if value is not None:
            data[key] = value
    return data


async def _until_signal(role: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await role(stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


@click.group("redis-failover")
def redis_failover() -> None:
    """Redis master failover that happens only when every client agrees (seed 002)."""


@redis_failover.command("server")
@config_option
@servers_option
@clients_option
@click.option("--server-id", help="This server's id [default: the host name].")
@click.option("--listen", metavar="H:P", help="Serve /v1/status and /metrics here.")
@click.option("--check-interval", type=float, help="Seconds between checks [0.5].")
@click.option("--retries", type=int, help="Failed checks before a round [3].")
@click.option("--request-timeout", type=float, help="Seconds per message or Redis call [1].")
@click.option("--reconfigure-interval", type=float, help="Periodic reconfigure, seconds [2].")
@token_option
def server_cmd(
    *,
    config_path: Path | None,
    redis_servers: str | None,
    client_ids: str | None,
    server_id: str | None,
    listen: str | None,
    check_interval: float | None,
    retries: int | None,
    request_timeout: float | None,
    reconfigure_interval: float | None,
    token_file: Path | None,
) -> None:
    """Run a configuration server: watch the master, switch when every client agrees."""
    from baton.failover.config import server_config
    from baton.failover.serve import run_server
    from baton.failover.server import ConfigurationServer

    cfg = server_config(
        _settings(
            config_path,
            "server",
            redis_servers=redis_servers,
            client_ids=client_ids,
            server_id=server_id,
            listen=listen,
            check_interval=check_interval,
            retries=retries,
            request_timeout=request_timeout,
            reconfigure_interval=reconfigure_interval,
            token_file=None if token_file is None else str(token_file),
        )
    )

    async def go() -> None:
        probe = ConfigurationServer(cfg)
        try:
            infos = await probe.redis.infos()
        finally:
            await probe.close()
        if not any(i.reachable for i in infos):
            raise ConfigError(
                "none of the Redis servers answers ("
                + ", ".join(str(a) for a in cfg.redis_servers)
                + "): check --redis-servers and that they run"
            )
        logs.setup(logging.INFO)
        await _until_signal(lambda stop: run_server(cfg, stop))

    run_async(go)


@redis_failover.command("client")
@config_option
@click.option("--client-id", help="This client's id (one of the server's --client-ids).")
@click.option("--master-file", type=click.Path(path_type=Path), help="The master file.")
@click.option("--listen", metavar="H:P", help="Where the servers reach this client.")
@click.option("--state-file", type=click.Path(path_type=Path), help="[MASTER_FILE.state]")
@click.option("--check-timeout", type=float, help="Seconds the old master gets to answer [0.5].")
@token_option
def client_cmd(
    *,
    config_path: Path | None,
    client_id: str | None,
    master_file: Path | None,
    listen: str | None,
    state_file: Path | None,
    check_timeout: float | None,
    token_file: Path | None,
) -> None:
    """Run a configuration client: keep this host's master file, answer the servers."""
    from baton.failover.client import run_client
    from baton.failover.config import client_config

    cfg = client_config(
        _settings(
            config_path,
            "client",
            client_id=client_id,
            master_file=None if master_file is None else str(master_file),
            listen=listen,
            state_file=None if state_file is None else str(state_file),
            check_timeout=check_timeout,
            token_file=None if token_file is None else str(token_file),
        )
    )
    logs.setup(logging.INFO)
    run_async(lambda: _until_signal(lambda stop: run_client(cfg, stop)))


def _status_settings(
    config_path: Path | None, redis_servers: str | None, client_ids: str | None
) -> dict[str, Any]:
    data = _settings(config_path, "server", redis_servers=redis_servers, client_ids=client_ids)
    return {k: v for k, v in data.items() if k not in ("client_id", "master_file", "state_file")}


@redis_failover.command("status")
@config_option
@servers_option
@clients_option
@click.option(
    "--server",
    "server_url",
    metavar="URL",
    help="A server's status API (http://its --listen) for its rounds [the config's listen].",
)
@token_option
@output_options
def status_cmd(
    *,
    config_path: Path | None,
    redis_servers: str | None,
    client_ids: str | None,
    server_url: str | None,
    token_file: Path | None,
    out: Output,
) -> None:
    """Show the master, every server's role, each client's file and answer, the last round."""
    import httpx

    from baton.failover.config import server_config
    from baton.failover.server import ConfigurationServer

    data = _status_settings(config_path, redis_servers, client_ids)
    if token_file is not None:
        data["token_file"] = str(token_file)
    cfg = server_config(data)

    async def go() -> dict[str, Any]:
        probe = ConfigurationServer(cfg)
        try:
            infos = await probe.redis.infos()
            clients = await probe.clients.states()
        finally:
            await probe.close()
        out: dict[str, Any] = {
            "masters": [str(i.address) for i in infos if i.reachable and i.role == "master"],
            "servers": [
                {
                    "address": str(i.address),
                    "reachable": i.reachable,
                    "role": i.role or None,
                    "offset": i.offset if i.reachable else None,
                    "master": None if i.master_of is None else str(i.master_of),
                    "round": None if i.token is None else str(i.token),
                }
                for i in infos
            ],
            "clients": clients,
            "server": None,
        }
        # A server's config names where its status is served: no --server needed then.
        url = server_url or (f"http://{cfg.listen}" if cfg.listen is not None else None)
        if url:
            try:
                async with httpx.AsyncClient(timeout=cfg.request_timeout) as http:
                    res = await http.get(f"{url.rstrip('/')}/v1/status")
                out["server"] = res.json()
            except (httpx.HTTPError, ValueError) as exc:
                out["server"] = f"not reached: {logs.describe(exc)}"
        return out

    st = run_async(go)
    emit(out, st, lambda wide: _status_lines(st))


def _status_lines(st: dict[str, Any]) -> list[Shown]:
    """The master, each server, each client's file and last answer, the server's last round."""
    masters = st["masters"]
    out: list[Shown] = [f"master: {', '.join(masters) if masters else 'none'}"]
    if len(masters) > 1:
        out.append("ALERT: more than one server is a master")
    for s in st["servers"]:
        if not s["reachable"]:
            out.append(f"  {s['address']}: unreachable")
        else:
            follows = f" of {s['master']}" if s["master"] else ""
            out.append(
                f"  {s['address']}: {s['role']}{follows} offset {s['offset']} "
                f"round {s['round'] or '-'}"
            )
    out.append("clients:")
    for cid, c in st["clients"].items():
        if isinstance(c, str):
            out.append(f"  {cid}: {c}")
            continue
        last = c.get("last") or {}
        answer = f"{last.get('message')} -> {last.get('answer')}" if last else "no message yet"
        reason = f" ({last['reason']})" if last.get("reason") else ""
        named = f" (round {_round(c.get('confirmed'))})" if c.get("confirmed") else ""
        waits = (
            f", waiting for round {_round(c['invalidated_in'])} (quiet {c.get('quiet', 0):g}s)"
            if c.get("invalidated_in")
            else ""
        )
        out.append(
            f"  {cid}: file {c.get('master') or 'EMPTY'}{named}{waits}, last {answer}{reason}"
        )
    srv = st["server"]
    if isinstance(srv, dict):
        last_round = srv.get("last_round")
        out.append(f"server {srv.get('server')}: master {srv.get('master')}")
        if last_round:
            out.append(f"  last round {last_round.get('token')}: {last_round.get('outcome')}")
        else:
            out.append("  last round: none since it started")
        out += [f"  ALERT: {alert}" for alert in srv.get("alerts") or []]
    elif srv is not None:
        out.append(f"server: {srv}")
    return out


@redis_failover.command("switch")
@click.argument("new_master")
@config_option
@servers_option
@clients_option
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Catch-up limit.")
@token_option
@output_options
def switch_cmd(
    *,
    new_master: str,
    config_path: Path | None,
    redis_servers: str | None,
    client_ids: str | None,
    timeout: float,
    token_file: Path | None,
    out: Output,
) -> None:
    """Planned switch to NEW_MASTER (H:P): every client invalidates, writes pause on the old
    master until NEW_MASTER caught up, then it is promoted: no acknowledged write is lost."""
    from baton.failover.config import server_config
    from baton.failover.serve import switch
    from baton.store.master_file import parse_address

    # The outcome is this command's one line (or its one error line), not the round's log.
    logging.getLogger("baton.failover").setLevel(logging.ERROR)

    data = _status_settings(config_path, redis_servers, client_ids)
    data.setdefault("server_id", f"switch-{_host()}")
    if token_file is not None:
        data["token_file"] = str(token_file)
    cfg = server_config(data)
    new = parse_address(new_master, what="NEW_MASTER")
    st = run_async(lambda: switch(cfg, new, timeout))
    last = st.get("last_round") or {}
    line = (
        f"switched from {last.get('old')} to {last.get('new')} in round "
        f"{last.get('token')} ({last.get('seconds')}s)"
    )
    emit(out, last, lambda wide: [line])
    sys.exit(0)


def _round(token: Any) -> str:
    """A round token as JSON (``[generation, server]``) as it is written in logs."""
    if isinstance(token, list) and len(token) == 2:
        return f"{token[0]}/{token[1]}"
    return str(token)


def _host() -> str:
    import socket

    return socket.gethostname()
