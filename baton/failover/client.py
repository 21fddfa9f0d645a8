"""The configuration client (seed 002's RCC): one per worker host, keeper of its master file.

It answers the configuration servers over HTTP (a small Starlette app): ``POST /v1/ping``,
``/v1/invalidate``, ``/v1/reconfigure``, ``/v1/hold``, and ``GET /v1/state`` for ``status``.
Every answer follows :mod:`baton.failover.decide`; messages are handled one at a time (a
lock), and its state (the highest round seen, the round it invalidated in, the round that named
its master) is written to its state file before it answers, so a client restarted mid-round
keeps its word.

Why HTTP and not a channel inside Redis: the messages exist to replace a Redis master that may
be down or cut off; carried by that Redis (pub/sub, a list), they would fail exactly when they
are needed, and carried by a replica they would depend on the replication they are about to
change. A direct connection from each server to each client has no such dependency and makes
"this client answered" a fact the server observes itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import redis.asyncio as aioredis
import uvicorn
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baton.errors import ConfigError
from baton.failover.config import ClientConfig
from baton.failover.decide import (
    Answer,
    ClientState,
    Decision,
    Token,
    on_hold,
    on_invalidate,
    on_ping,
    on_reconfigure,
)
from baton.store.master_file import Address, parse_address, read_master, write_master

log = logging.getLogger("baton.failover.client")


def _probe(address: Address, timeout: float, password: str | None) -> aioredis.Redis:
    """A one-shot client for a health question: bounded by ``timeout``, never retried (a
    retry would turn one unanswered probe into several)."""
    return aioredis.Redis(
        host=address.host,
        port=address.port,
        password=password,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


async def master_answers(address: Address, timeout: float, password: str | None = None) -> bool:
    """Whether the Redis server at ``address`` answers ``PING`` within ``timeout`` from here."""
    client = _probe(address, timeout, password)
    try:
        async with asyncio.timeout(timeout):
            return bool(await client.ping())
    except (RedisError, OSError, TimeoutError):
        return False
    finally:
        with contextlib.suppress(RedisError, OSError):
            await client.aclose()


async def role_of(address: Address, timeout: float, password: str | None = None) -> str | None:
    """``master`` or ``slave`` as the server says, None when it does not answer."""
    client = _probe(address, timeout, password)
    try:
        async with asyncio.timeout(timeout):
            info = await client.info("replication")
            return str(info.get("role", ""))
    except (RedisError, OSError, TimeoutError):
        return None
    finally:
        with contextlib.suppress(RedisError, OSError):
            await client.aclose()


class ConfigurationClient:
    """The client role: state, answers and the master file. :meth:`handle` is the protocol;
    :func:`build_app` serves it."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.state = ClientState()
        self._lock = asyncio.Lock()
        self.last: dict[str, Any] | None = None
        #: When (monotonic) the round this client invalidated in last reached it; a client
        #: (re)started mid-round counts from its start.
        self._round_heard = time.monotonic()

    # -- state ------------------------------------------------------------------------------

    def load(self) -> None:
        """Read the state file (a missing one is a fresh client)."""
        path = self.config.state_file
        try:
            self.state = ClientState.from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            self.state = ClientState()
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot use state file {path}: {exc}; remove it only if no switch is under way"
            ) from None

    def _save(self, state: ClientState) -> None:
        path = self.config.state_file
        tmp = path.with_name(f".{path.name}.tmp")
        # On disk before the answer that depends on it (a power loss must not forget a round).
        with tmp.open("w") as f:
            f.write(json.dumps(state.to_json()))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)

    async def startup_check(self) -> None:
        """Seed 002: on start, a client consults its master file and checks that the server it
        names is still a master; one that became a replica is forgotten (the file emptied) and
        the periodic reconfigure names the current one."""
        if self.state.invalidated_in is not None:
            # Stopped mid-round: the file must stay empty until that round's reconfigure
            # (it may have stopped between saving its state and emptying the file).
            if read_master(self.config.master_file) is not None:
                write_master(self.config.master_file, None)
            return
        master = read_master(self.config.master_file)
        if master is None:
            return
        role = await role_of(master, self.config.check_timeout, self.config.redis_password)
        if role == "slave":
            log.warning(
                "master file names a replica: emptied until the server names the master",
                extra={"client": self.config.client_id, "master": str(master)},
            )
            write_master(self.config.master_file, None)

    # -- protocol ---------------------------------------------------------------------------

    async def handle(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one message (``ping``, ``invalidate`` or ``reconfigure``)."""
        token = Token.from_json(body.get("token"))
        if token is None:
            raise ConfigError("a message without a round token")
        async with self._lock:
            decision = await self._decide(kind, token, body)
            # Invariant across crashes: a state that says "invalidated" goes with an empty
            # file (start-up empties it again). So an invalidation is saved before the file is
            # emptied, and a reconfigure writes the file before the state forgets the round.
            save_first = decision.state.invalidated_in is not None
            if save_first and decision.state != self.state:
                self._save(decision.state)
            if decision.write:
                write_master(self.config.master_file, decision.master)
            if not save_first and decision.state != self.state:
                self._save(decision.state)
            if decision.state.invalidated_in is not None and decision.state.invalidated_in == token:
                self._round_heard = time.monotonic()
            self.state = decision.state
        reply = self.describe()
        reply.update(answer=decision.answer.value, reason=decision.reason)
        self.last = {
            "message": kind,
            "token": token.to_json(),
            "answer": decision.answer.value,
            "reason": decision.reason,
            "at": time.time(),
        }
        if decision.answer == Answer.HELD:
            return reply  # every check interval while a round works: not worth a line each
        level = logging.INFO if decision.answer != Answer.REFUSED else logging.WARNING
        log.log(
            level,
            f"{kind} -> {decision.answer.value}",
            extra={"client": self.config.client_id, "round": str(token), "reason": decision.reason},
        )
        return reply

    async def _decide(self, kind: str, token: Token, body: dict[str, Any]) -> Decision:
        old = body.get("old")
        old_addr = parse_address(old) if isinstance(old, str) and old else None
        check = bool(body.get("check", True)) and old_addr is not None
        # The server says how long it waits for the old master (its request timeout); this
        # client's own setting is the upper bound.
        wait = self.config.check_timeout
        asked = body.get("check_timeout")
        if isinstance(asked, int | float) and not isinstance(asked, bool) and 0 < asked < wait:
            wait = float(asked)

        async def old_answers() -> bool | None:
            if not check or old_addr is None:
                return None
            return await master_answers(old_addr, wait, self.config.redis_password)

        if kind == "ping":
            return on_ping(self.state, token, await old_answers())
        if kind == "invalidate":
            return on_invalidate(self.state, token, await old_answers())
        if kind == "reconfigure":
            master = body.get("master")
            if not isinstance(master, str):
                raise ConfigError("a reconfigure without a master")
            current = read_master(self.config.master_file)
            return on_reconfigure(self.state, token, parse_address(master), current)
        if kind == "hold":
            return on_hold(self.state, token)
        raise ConfigError(f"unknown message {kind!r}")

    def describe(self) -> dict[str, Any]:
        master = None
        with contextlib.suppress(ConfigError):
            found = read_master(self.config.master_file)
            master = None if found is None else str(found)
        waiting = self.state.invalidated_in is not None
        return {
            "client": self.config.client_id,
            "master": master,
            "master_file": str(self.config.master_file),
            **self.state.to_json(),
            # Seconds since the round this client waits for last reached it: other servers
            # take over a round that stays quiet (its server died mid-round).
            "quiet": round(time.monotonic() - self._round_heard, 3) if waiting else 0.0,
            "last": self.last,
        }


def build_app(client: ConfigurationClient) -> Starlette:
    """The client's HTTP API. With a token configured every route needs it (Bearer); the
    token is compared in constant time and never logged."""
    token = (client.config.token or "").encode()

    def authorized(request: Request) -> bool:
        if not token:
            return True
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token)

    def route(
        kind: str,
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if not authorized(request):
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            try:
                body = await request.json()
                if not isinstance(body, dict):
                    raise ConfigError("expected a JSON object")
                to = body.get("client")
                if to != client.config.client_id:
                    return JSONResponse(
                        {
                            "error": f"this is client {client.config.client_id!r}, not {to!r}: "
                            "check the server's client list",
                            "client": client.config.client_id,
                        },
                        status_code=409,
                    )
                return JSONResponse(await client.handle(kind, body))
            except (ConfigError, ValueError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)

        return endpoint

    async def state(request: Request) -> Response:
        if not authorized(request):
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        return JSONResponse(client.describe())

    return Starlette(
        routes=[
            Route("/v1/ping", route("ping"), methods=["POST"]),
            Route("/v1/invalidate", route("invalidate"), methods=["POST"]),
            Route("/v1/reconfigure", route("reconfigure"), methods=["POST"]),
            Route("/v1/hold", route("hold"), methods=["POST"]),
            Route("/v1/state", state, methods=["GET"]),
        ]
    )


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: the role's runner stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def bind(listen: Address) -> socket.socket:
    """A listening socket for ``listen``: bound here, so that a port in use is one clear
    error (uvicorn would exit the process)."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((listen.host, listen.port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def http_server(app: Starlette, listen: Address) -> QuietServer:
    return QuietServer(
        uvicorn.Config(
            app,
            host=listen.host,
            port=listen.port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
    )


async def run_client(config: ClientConfig, stop: asyncio.Event) -> None:
    """Run the client role until ``stop`` is set."""
    client = ConfigurationClient(config)
    client.load()
    await client.startup_check()
    sock = bind(config.listen)
    server = http_server(build_app(client), config.listen)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    log.info(
        "configuration client started",
        extra={
            "client": config.client_id,
            "listen": str(config.listen),
            "master_file": str(config.master_file),
        },
    )
    waiting = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([serving, waiting], return_when="FIRST_COMPLETED")
        if serving.done():
            serving.result()
    finally:
        server.should_exit = True
        waiting.cancel()
        with contextlib.suppress(Exception):
            await serving


__all__ = [
    "ConfigurationClient",
    "bind",
    "build_app",
    "http_server",
    "master_answers",
    "role_of",
    "run_client",
]
