"""What a configuration server shows: its picture of the master and the last round
(:class:`Observed`), its Prometheus metrics, and the small HTTP app that serves both
(``GET /v1/status``, ``GET /metrics``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baton.failover.decide import Token
from baton.store.master_file import Address


class Metrics:
    """What the server exposes on ``/metrics``."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.rounds = Counter(
            "baton_failover_rounds_total", "Failover rounds by outcome", ["outcome"], registry=r
        )
        self.held_back = Gauge(
            "baton_failover_held_back",
            "1 while a switch is held back because a client did not confirm",
            registry=r,
        )
        self.master_up = Gauge(
            "baton_failover_master_up", "1 while the master answers the server", registry=r
        )
        self.confirming = Gauge(
            "baton_failover_clients_confirming",
            "Clients that answered the last message of a round",
            registry=r,
        )


@dataclass
class Observed:
    """The server's picture, for ``status`` and ``/v1/status``."""

    master: Address | None = None
    master_token: Token | None = None
    last_round: dict[str, Any] | None = None
    alerts: list[str] = field(default_factory=list)


class Shown(Protocol):
    """What the status app serves (a :class:`~baton.failover.server.ConfigurationServer`)."""

    metrics: Metrics

    def status(self) -> dict[str, Any]: ...


def build_app(server: Shown) -> Starlette:
    """``GET /v1/status`` (JSON) and ``GET /metrics`` (Prometheus)."""

    async def status(request: Request) -> Response:
        return JSONResponse(server.status())

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(server.metrics.registry), media_type="text/plain")

    return Starlette(
        routes=[
            Route("/v1/status", status, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


__all__ = ["Metrics", "Observed", "Shown", "build_app"]
