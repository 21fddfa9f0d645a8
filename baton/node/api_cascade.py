"""The cascade operations in the node's HTTP API, under ``/v1/cascade``: one route per
``baton cascade`` command, running the same code (:mod:`baton.cascade.commands`).

Changes are POSTs with a JSON body, reads are GETs with query parameters; both refuse unknown
fields (422). A set is found through ``via``: the location of any of its members, as the CLI's
``--via``. Locations are read on the node's host: SQLite paths are files of that host (a
relative one is taken from the agent's working directory; give absolute paths).

Errors are ``{"detail": "<one line>"}``: 400 for bad input, 409 when the set's state refuses
the operation (a cycle, a dead provider, no live root, a switchover not finished within its
timeout: run it again), 503 when a node database cannot be reached. Both 400 and 409 change
nothing. Passwords in locations are never shown, in these errors or in 422 validation errors.
Every operation is resumable, as the CLI's: send the same request again to finish it.

Node databases are synchronous code: each operation runs in a thread. An operation goes on to
its end even if the client disconnects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, ParamSpec, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request, Response, params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import Field, field_validator

from baton.cascade import commands
from baton.cascade.verbs import VERBS, Args, Location, NodeName, OnSet, TableName, Verb

P = ParamSpec("P")
R = TypeVar("R")

#: The status code of each kind of error (see :func:`baton.cascade.commands.classify`).
STATUS = {"input": 400, "refused": 409, "unfinished": 409, "unreachable": 503}


class CreateNode(Args):
    type: str = Field(description="root, branch, leaf, queue-only or merge-leaf")
    name: NodeName
    location: Location
    provider: NodeName | None = None
    set: NodeName | None = Field(None, description="A root: the name of the new set.")
    host: Location | None = Field(None, description="A merge-leaf: the combined set's node.")
    via: Location | None = Field(None, description="The location of any member of the set.")


class AddSeq(OnSet):
    """Give ``node`` or ``all`` (every live node with tables, the root first)."""

    seq: TableName
    node: NodeName | None = None
    all: bool = False


class RemoveSeq(OnSet):
    seq: TableName
    node: NodeName


class Execute(OnSet):
    name: str = Field(min_length=1, max_length=200, description="The script's name (a file's).")
    sql: str = Field(min_length=1, max_length=10_000_000, description="The SQL script.")


class Switchover(OnSet):
    new_root: NodeName
    timeout: float = Field(
        60.0, gt=0, le=3600, description="Seconds to wait for new_root to apply the switch tick."
    )
    max_behind: int = Field(
        commands.MAX_BEHIND, ge=0, description="Refuse when new_root is more ticks behind."
    )
    dry_run: bool = Field(False, description="Check and return the steps; change nothing.")


class Resurrect(OnSet):
    old_root: NodeName
    save: str = Field(
        min_length=2,
        max_length=4096,
        description="Absolute path of a file ON THE NODE'S HOST for the old root's events "
        "after the fork (JSON lines); its directory must exist.",
    )

    @field_validator("save")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not PurePosixPath(value).is_absolute() or "\x00" in value:
            raise ValueError("give an absolute path on the node's host")
        return value


class SetQuery(Args):
    via: Location


class NodeQuery(SetQuery):
    node: NodeName


class CheckQuery(NodeQuery):
    table: TableName | None = None


class CandidatesQuery(NodeQuery):
    detail: bool = False


class _RedactedValidation(APIRoute):
    """422s without the rejected input (FastAPI echoes it, and a location may hold a
    password): each error's place, message and type only."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                errors = [
                    {
                        "loc": list(e.get("loc", ())),
                        "msg": commands.one_line(str(e.get("msg", ""))),
                        "type": e.get("type", ""),
                    }
                    for e in exc.errors()
                ]
                return JSONResponse({"detail": errors}, status_code=422)

        return handle


async def _run(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn`` in a thread; its errors as ``{"detail": "<one line>"}`` with 400, 409 or 503."""
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except Exception as exc:
        found = commands.classify(exc)
        if found is None:
            raise  # a bug: a 500 without detail
        kind, message = found
        raise HTTPException(STATUS[kind], message) from None


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "bad input: nothing was changed"},
    409: {
        "description": "the set's state refuses it (nothing was changed), or a switchover "
        "did not finish within its timeout (send it again)"
    },
    503: {"description": "a node database cannot be reached"},
}


def cascade_router(auth: Sequence[params.Depends]) -> APIRouter:
    """The ``/v1/cascade`` routes, each behind ``auth`` (the cluster token)."""
    router = APIRouter(
        prefix="/v1/cascade",
        tags=["cascade"],
        dependencies=list(auth),
        responses=_ERRORS,
        route_class=_RedactedValidation,
    )

    # -- creating nodes ----------------------------------------------------------------------

    @router.post("/create-node")
    async def create_node(body: CreateNode) -> dict[str, Any]:
        """Add a node of ``type``: root (``set``), branch, leaf, queue-only (``provider``,
        ``via``) or merge-leaf (``provider``, ``via``, ``host``)."""
        r = await _run(commands.create_node, body.type, body.name, body.location,
                       provider=body.provider, set_name=body.set, via=body.via,
                       host=body.host)  # fmt: skip
        return asdict(r)

    # -- tables ------------------------------------------------------------------------------

    @router.get("/tables")
    async def tables(q: Annotated[NodeQuery, Query()]) -> dict[str, str]:
        """The tables ``node`` replicates and their state (copying, catching-up, ok)."""
        return await _run(commands.tables, q.via, q.node)

    @router.get("/missing")
    async def missing(q: Annotated[NodeQuery, Query()]) -> dict[str, Any]:
        """The tables ``node``'s provider replicates and ``node`` does not."""
        return asdict(await _run(commands.missing, q.via, q.node))

    # -- events ------------------------------------------------------------------------------

    # -- providers, tags, pause --------------------------------------------------------------

    @router.get("/candidates")
    async def candidates(
        q: Annotated[CandidatesQuery, Query()],
    ) -> list[str] | list[dict[str, Any]]:
        """The nodes that can be ``node``'s provider now: names, or with ``detail`` objects
        ``{name, queue_only, note}`` (a queue-only one cannot give an initial table copy)."""
        found = await _run(commands.candidates_detail, q.via, q.node)
        return [asdict(f) for f in found] if q.detail else [f.name for f in found]

    # -- switchover, failover, resurrect -----------------------------------------------------

    @router.post("/switchover")
    async def switchover(body: Switchover) -> dict[str, Any]:
        """Planned: the branch ``new_root`` becomes the root. Refused (409, nothing changed)
        unless its worker runs, applies and is at most ``max_behind`` ticks behind. Waits up
        to ``timeout`` seconds for its worker; 409 if it did not finish (send the same request
        again). ``dry_run``: the checks and the steps only."""
        if body.dry_run:
            plan = await _run(commands.switch_plan, body.via, body.new_root, body.max_behind)
            out = asdict(plan)
            out["dry_run"] = True
            return out
        return asdict(
            await _run(commands.switchover, body.via, body.new_root, body.timeout, body.max_behind)
        )

    @router.post("/resurrect")
    async def resurrect(body: Resurrect) -> dict[str, Any]:
        """``old_root`` came back after a failover: save the events it had after the fork to
        ``save``, a file on the node's host (not the client's), and make it a branch."""
        return asdict(await _run(commands.resurrect, body.via, body.old_root, Path(body.save)))

    # -- status ------------------------------------------------------------------------------

    @router.get("/status")
    async def status(q: Annotated[SetQuery, Query()]) -> dict[str, Any]:
        """The set's name, live root, global watermark and members (as ``members``)."""
        return (await _run(commands.status, q.via)).as_dict()

    @router.get("/members")
    async def members(q: Annotated[SetQuery, Query()]) -> list[dict[str, Any]]:
        """Every member: name, location, role, provider, position, lag_ticks, lag_seconds,
        paused, dead, reachable, tables."""
        _, found = await _run(commands.members, q.via)
        return [commands.member_dict(m) for m in found]

    @router.get("/check")
    async def check(q: Annotated[CheckQuery, Query()]) -> dict[str, Any]:
        """Compare ``node``'s rows with its provider's, per table (or only ``table``)."""
        return await _run(commands.check, q.via, q.node, q.table)

    # -- sequences, schema checks, scripts ---------------------------------------------------

    @router.post("/add-seq")
    async def add_seq(body: AddSeq) -> dict[str, Any]:
        """Keep sequence ``seq`` on ``node`` (or ``all``) at least as high as the root's
        (PostgreSQL only; 400 on SQLite)."""
        return asdict(await _run(commands.add_seq, body.via, body.seq, body.node, body.all))

    @router.post("/remove-seq")
    async def remove_seq(body: RemoveSeq) -> dict[str, Any]:
        """Stop keeping ``seq`` on ``node`` (the sequence stays); the root last."""
        return asdict(await _run(commands.remove_seq, body.via, body.seq, body.node))

    @router.get("/seqs")
    async def seqs(q: Annotated[NodeQuery, Query()]) -> dict[str, int | None]:
        """The sequences ``node`` keeps and their last values there."""
        return await _run(commands.list_seqs, q.via, q.node)

    @router.get("/fkeys")
    async def fkeys(q: Annotated[NodeQuery, Query()]) -> dict[str, Any]:
        """Foreign keys on ``node`` that applying batches can break, with what to do."""
        return asdict(await _run(commands.fkeys, q.via, q.node))

    @router.get("/triggers")
    async def triggers(q: Annotated[NodeQuery, Query()]) -> dict[str, Any]:
        """User triggers that fire for the rows applying batches writes on ``node``."""
        return asdict(await _run(commands.triggers, q.via, q.node))

    @router.post("/execute")
    async def execute(body: Execute) -> dict[str, Any]:
        """Run the SQL script at the root and, through the queue, on every node in order."""
        return asdict(await _run(commands.execute, body.via, body.name, body.sql))

    # -- replacing a branch ------------------------------------------------------------------

    # -- the verbs declared once (baton.cascade.verbs) ----------------------------------------
    for verb in VERBS:
        _route(router, verb)
    return router


def _route(router: APIRouter, verb: Verb[Any, Any]) -> None:
    """``verb`` as a route: a GET with query parameters for a read, else a POST with a JSON
    body; the verb's help as its description."""
    summary, _, rest = verb.help.partition("\n")

    async def run(args: Args) -> Any:
        return verb.result(await _run(verb.run, args))

    handler: Callable[..., Coroutine[Any, Any, Any]]
    if verb.read:

        async def read(q: Any) -> Any:
            return await run(q)

        read.__annotations__ = {"q": Annotated[verb.args, Query()], "return": Any}
        handler = read
    else:

        async def change(body: Any) -> Any:
            return await run(body)

        change.__annotations__ = {"body": verb.args, "return": Any}
        handler = change
    handler.__name__ = verb.name.replace("-", "_")
    add = router.get if verb.read else router.post
    add(f"/{verb.name}", summary=summary.rstrip("."), description=rest.strip() or None)(handler)


__all__ = ["STATUS", "cascade_router"]
