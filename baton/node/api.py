"""The node's HTTP API (FastAPI on uvicorn), with an OpenAPI document at ``/openapi.json``.

Every route except ``/healthz`` and the web dashboard's static files (``/ui``, which hold no
data: :mod:`baton.node.api_ui`) needs the cluster token as a Bearer token, the OpenAPI document
included (``/docs`` and ``/redoc`` are not served). A missing or wrong token gets 401
with no detail; tokens are compared in constant time and never logged. Commands between nodes
carry the sender's role and epoch; a stale one gets 409 and changes nothing. A request that
fails unexpectedly gets 500, is counted in ``baton_http_requests_total`` and logged with what
failed.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, HTTPException, Path, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from baton import __version__
from baton.errors import BatonError, StoreError
from baton.logs import describe
from baton.node.agent import NodeAgent
from baton.node.api_cascade import cascade_router
from baton.node.api_channels import channels_router
from baton.node.api_ui import ui_router
from baton.node.ui_snapshot import Snapshots
from baton.placement.view import placement_view

#: ``object/partition``, as in group records.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
GROUP_KEY = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}/[0-9]{1,5}$"

log = logging.getLogger("baton.api")


class Health(BaseModel):
    ok: bool
    node: str


class Command(BaseModel):
    """A node-to-node command, fenced by the sender's role epoch."""

    model_config = ConfigDict(extra="forbid")
    sender: str = Field(min_length=1, max_length=128)
    role: Literal["controller"]
    # 2**53: the largest integer every JSON implementation keeps exact (epochs are store-clock
    # microseconds, about 1.8e15 today, so this lasts until the year 2255).
    epoch: int = Field(ge=1, le=2**53)
    #: ``sync``: converge the named groups' members on this node to their records in the store.
    command: Literal["noop", "sync"]
    groups: list[Annotated[str, Field(min_length=3, max_length=160, pattern=GROUP_KEY)]] = Field(
        default_factory=list, max_length=100_000
    )


class MemberReport(BaseModel):
    group: str
    role: Literal["leader", "follower", "none"]
    term: int
    leader: str | None
    commit_index: int
    stream_live: bool
    error: str


class GroupsReport(BaseModel):
    node: str
    groups: list[MemberReport]


class CommandResult(BaseModel):
    """A command's outcome. ``failed``: the named groups whose member cannot run on this node
    (its workload could not be created or take its role), with why; the command was carried
    out for every other group."""

    accepted: bool
    detail: str
    failed: dict[str, str] = Field(default_factory=dict)


def build_app(agent: NodeAgent) -> FastAPI:
    token = agent.config.cluster_token.encode()
    app = FastAPI(
        title="baton node API",
        version=__version__,
        # The document describes every route and field: served below, behind the token. The
        # browsable /docs and /redoc pages are off (a browser cannot send the Bearer token).
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )

    def authorize(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token)
        if not ok:
            raise HTTPException(status_code=401, headers={"WWW-Authenticate": "Bearer"})

    auth = [Depends(authorize)]
    app.include_router(cascade_router(auth))
    app.include_router(channels_router(agent.channels, auth))
    app.include_router(ui_router(Snapshots(agent), token, auth))

    @app.middleware("http")
    async def count(request: Request, call_next: Any) -> Response:
        started = time.monotonic()
        failure: Exception | None = None
        try:
            response: Response = await call_next(request)
        except Exception as exc:
            # Unhandled: answer 500 here, so that the failure is counted and logged like any
            # other response (raised on, it would reach neither the metric nor our log).
            failure = exc
            response = JSONResponse({"detail": "internal error"}, status_code=500)
        path = getattr(request.scope.get("route"), "path", "unmatched")
        agent.metrics.requests.labels(request.method, path, str(response.status_code)).inc()
        if failure is not None:
            log.error(
                "request failed",
                extra={"method": request.method, "route": path, "error": describe(failure)},
            )
        response.headers["x-baton-node"] = agent.node_id
        response.headers["server-timing"] = f"app;dur={(time.monotonic() - started) * 1000:.1f}"
        return response

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    async def openapi() -> JSONResponse:
        """The OpenAPI document (it needs the token, as every route but ``/healthz``)."""
        return JSONResponse(app.openapi())

    @app.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        """Liveness: answers without a token."""
        return Health(ok=True, node=agent.node_id)

    @app.get("/v1/status", dependencies=auth)
    async def status() -> dict[str, Any]:
        """This node, the cluster's nodes, the controller and its epoch, our leases."""
        return await agent.status()

    @app.get("/metrics", response_class=Response, dependencies=auth)
    async def metrics() -> Response:
        """Prometheus metrics."""
        # In a thread: the cascade series read node databases (a PostgreSQL one may be slow
        # to answer), and the event loop keeps the node's leases meanwhile.
        text = await asyncio.to_thread(agent.metrics.render)
        return Response(text, media_type="text/plain; version=0.0.4")

    @app.post(
        "/v1/commands",
        response_model=CommandResult,
        responses={
            409: {"model": CommandResult, "description": "stale or wrong epoch: nothing done"},
            422: {
                "model": CommandResult,
                "description": "obeyed, but the members of the groups in `failed` cannot run "
                "here (why, per group); every other group was converged",
            },
            503: {
                "model": CommandResult,
                "description": "the store failed: the command may be partly done; the "
                "controller sends it again",
            },
        },
        dependencies=auth,
    )
    async def command(cmd: Command) -> JSONResponse:
        """Obey a command only if the store says its sender holds the role at that epoch."""
        try:
            ok, detail, failed = await agent.obey(
                cmd.sender, cmd.role, cmd.epoch, cmd.command, cmd.groups
            )
        except StoreError as exc:
            result = CommandResult(accepted=False, detail=str(exc))
            return JSONResponse(result.model_dump(), status_code=503)
        if not ok:
            return JSONResponse(CommandResult(accepted=False, detail=detail).model_dump(), 409)
        if failed:
            shown = sorted(failed.items())[:3]  # the rest are in ``failed``
            detail = f"{len(failed)} group(s) cannot run on {agent.node_id}: " + "; ".join(
                f"{key}: {why}" for key, why in shown
            )
            result = CommandResult(accepted=True, detail=detail, failed=failed)
            return JSONResponse(result.model_dump(), status_code=422)
        return JSONResponse(CommandResult(accepted=True, detail=detail).model_dump())

    @app.get("/v1/groups", response_model=GroupsReport, dependencies=auth)
    async def groups() -> GroupsReport:
        """This node's group members: role, term, leader, commit index, live stream."""
        return GroupsReport.model_validate({"node": agent.node_id, "groups": agent.runner.report()})

    @app.post(
        "/v1/groups/{object_name}/{partition}/fetch",
        responses={409: {"description": "this node does not lead the group at that term"}},
        dependencies=auth,
    )
    async def fetch(
        object_name: Annotated[str, Path(pattern=NAME_PATTERN)],
        partition: Annotated[int, Path(ge=0, le=99_999)],
        request: dict[str, Any],
    ) -> JSONResponse:
        """A follower's fetch from this group's leader (answered by the workload)."""
        try:
            answer = await agent.runner.serve(f"{object_name}/{partition}", request)
        except BatonError as exc:
            return JSONResponse({"detail": str(exc)}, status_code=409)
        return JSONResponse(answer)

    @app.get("/v1/placement", dependencies=auth)
    async def placement() -> dict[str, Any]:
        """Objects per node and type, group leaders and terms, groups in failure."""
        return await placement_view(agent.store)

    return app
