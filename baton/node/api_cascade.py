"""The cascade operations in the node's HTTP API, under ``/v1/cascade``: one route per
``baton cascade`` command, generated, as the command is, from the verb's declaration
(:mod:`baton.cascade.verbs`), running the same code (:mod:`baton.cascade.commands`).

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
from typing import Annotated, Any, ParamSpec, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request, Response, params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from baton.cascade import commands, table_diff
from baton.cascade.verb import Args, Verb
from baton.cascade.verbs import VERBS
from baton.spark.diff import session_differ

# compare and repair run on the agent's Spark session (the one its workers use).
table_diff.use_differ(session_differ)

P = ParamSpec("P")
R = TypeVar("R")

#: The status code of each kind of error (see :func:`baton.cascade.commands.classify`).
STATUS = {"input": 400, "refused": 409, "unfinished": 409, "unreachable": 503}


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

    # Every verb, generated from its declaration (baton.cascade.verbs).
    for verb in VERBS:
        _route(router, verb)
    return router


def _route(router: APIRouter, verb: Verb[Any, Any]) -> None:
    """``verb`` as a route: a GET with query parameters for a read, else a POST with a JSON
    body; the verb's help as its description, its result type as the response's schema."""
    summary, _, rest = verb.help.partition("\n")

    async def run(args: Args) -> Any:
        return verb.result(args, await _run(verb.run, args))

    handler: Callable[..., Coroutine[Any, Any, Any]]
    if verb.read:

        async def read(q: Any) -> Any:
            return await run(q)

        read.__annotations__ = {"q": Annotated[verb.args, Query()], "return": verb.returns}
        handler = read
    else:

        async def change(body: Any) -> Any:
            return await run(body)

        change.__annotations__ = {"body": verb.args, "return": verb.returns}
        handler = change
    handler.__name__ = verb.name.replace("-", "_")
    add = router.get if verb.read else router.post
    add(f"/{verb.name}", summary=summary.rstrip("."), description=rest.strip() or None)(handler)


__all__ = ["STATUS", "cascade_router"]
