"""The ``cascade-worker`` workload type: a cascade node's service as a placed object.

``baton object create cascade-worker s2 --replicas 2 --spec '{"location": "sqlite:///d/s2.db"}'``
makes the controller run node s2's service (its Spark worker, or its ticker at the root) on
exactly one agent, with a standby on another; when that agent dies the controller moves the
leadership and the standby starts the service. The group's term is the worker epoch, so the
node database refuses anything the old leader may still try to apply.

The commit index is the node's applied position (in its database, the same for every member);
a follower's stream is live while the leader answers its fetches for the current term.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from baton.cascade.db import open_node_db
from baton.errors import (
    BatonError,
    CascadeError,
    CascadeInputError,
    ConfigError,
    FencedOut,
    NotLeader,
    redact_url,
)
from baton.logs import describe
from baton.placement.workload import Workload, WorkloadContext
from baton.service.mode import DEFAULT_MODE
from baton.service.node import NodeService
from baton.store import sqlite_path

log = logging.getLogger("baton.cascade")

#: A follower polls the leader this often; its stream is live for LIVE_WINDOW after a success.
FOLLOW_INTERVAL = 0.5
LIVE_WINDOW = 2.0


class CascadeWorkerSpec(BaseModel):
    """The ``cascade-worker`` type's spec: the node database its service runs on, as
    :func:`~baton.cascade.db.open_node_db` opens it. An SQLite location is read by the one
    parser of SQLite URLs (:func:`baton.store.sqlite_path`), so it takes every spelling the
    store takes and refuses the rest (a directory, no file, query options) when the object is
    created, not when a member starts."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    location: str = Field(
        description="the node database, like sqlite:///data/s2.db or postgresql://user@host/db",
    )
    mode: Literal["auto", "micro-batch", "low-latency"] = Field(
        default="auto",
        description="how the worker applies: one long-running Spark task (low lag; one Spark "
        "task slot per worker), Structured Streaming micro-batches, or auto: low-latency while "
        "the session has a slot to spare beside one for copies, else micro-batches",
    )
    standby: Literal["warm", "cold"] = Field(
        default="warm",
        description="warm: a standby member builds its agent's Spark session and runs one "
        "throwaway worker in it, so a takeover applies within about a second; cold: it holds "
        "no Spark until it leads (no JVM or Python workers while it stands by)",
    )

    @field_validator("location")
    @classmethod
    def _openable(cls, location: str) -> str:
        scheme, _, rest = location.partition(":")
        if scheme == "sqlite":
            try:
                sqlite_path(location)
                return location
            except ConfigError as exc:
                problem = str(exc)
        elif scheme in ("postgresql", "postgres") and rest:
            return location
        else:  # redacted: a URL may hold a password
            problem = f"{redact_url(location)!r} is not a node database URL"
        raise PydanticCustomError("node_location", "{problem}", {"problem": problem})


class CascadeWorker(Workload):
    type_name = "cascade-worker"
    spec_model = CascadeWorkerSpec

    def __init__(self, ctx: WorkloadContext) -> None:
        super().__init__(ctx)
        location = ctx.obj.spec.get("location")
        if not isinstance(location, str):
            raise CascadeInputError(
                f"object {ctx.obj.name}: spec.location (the node database) is required"
            )
        self.location = location
        self.mode = ctx.obj.spec.get("mode", DEFAULT_MODE.value)
        self.warm = ctx.obj.spec.get("standby", "warm") == "warm"
        self._warming = threading.Event()  # set: the warm-up under way should stop
        self.term: int | None = None
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._follow: asyncio.Task[None] | None = None
        self._last_copy = 0.0
        self._service: NodeService | None = None

    # -- leader ------------------------------------------------------------------------------

    def _run(self, term: int, halt: threading.Event) -> None:
        self._service = NodeService(self.location, term, self.ctx.spark, mode=self.mode)
        try:
            self._service.run(halt)
        except FencedOut as exc:
            # A newer term applied to the node: this leadership is over (the controller's
            # next pass finds the group's leader not leading and acts on it).
            log.warning("cascade service fenced", extra={"error": describe(exc)})

    async def start_leader(self, term: int) -> None:
        await self.stop_follower()
        await self.stop_leader()
        self.term = term
        # A flag per leadership, never cleared: a thread whose stop was cancelled before it
        # ended (its join given up) still ends, and a later start cannot revive it. One flag
        # shared and cleared by each start let such a thread run on beside the next one, two
        # workers of one node at one epoch (the fault campaign's defect 15).
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(term, self._halt), daemon=True, name=f"cascade-{self.ctx.group}"
        )
        self._thread.start()

    async def stop_leader(self) -> None:
        self._halt.set()
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join)
        self._thread = None  # only once joined: a cancelled stop is joined again by the next
        self.term = None

    # -- follower ----------------------------------------------------------------------------

    async def start_follower(self, leader: str, term: int) -> None:
        await self.stop_leader()
        await self.stop_follower()
        self._follow = asyncio.create_task(self._watch(leader, term))
        spark = self.ctx.spark
        if self.warm and spark is not None:
            # Hot standby: the agent's session is made ready to apply while this member
            # stands by (once per session and mode; see baton.service.warm). Not awaited: a
            # takeover meanwhile stops it and starts at once.
            self._warming = halt = threading.Event()
            threading.Thread(
                target=self._warm, args=(spark, halt), daemon=True, name=f"warm-{self.ctx.group}"
            ).start()

    def _warm(self, spark: Callable[[], Any], halt: threading.Event) -> None:
        from baton.service.warm import warm_up

        try:
            with open_node_db(self.location) as db:
                if db.state().provider is None:
                    return  # a root's service runs no Spark: nothing to warm (no JVM either)
        except CascadeError as exc:  # unreachable for now: warm at the next standby
            log.info("spark warm-up skipped", extra={"error": describe(exc)})
            return
        try:
            session = spark()
        except BatonError as exc:  # no Spark now: the leader's start says so again
            log.warning("spark warm-up: no session", extra={"error": describe(exc)})
            return
        if not halt.is_set():
            warm_up(session, self.mode, halt=halt)

    async def _watch(self, leader: str, term: int) -> None:
        while True:
            with contextlib.suppress(BatonError, OSError, ValueError):
                answer = await self.ctx.fetch(leader, self.ctx.group, {"term": term})
                if answer.get("term") == term:
                    self._last_copy = time.monotonic()
            await asyncio.sleep(FOLLOW_INTERVAL)

    async def stop_follower(self) -> None:
        self._warming.set()
        task, self._follow = self._follow, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def stream_live(self) -> bool:
        return self._follow is not None and time.monotonic() - self._last_copy < LIVE_WINDOW

    async def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.term is None or request.get("term") != self.term:
            raise NotLeader(f"not the leader of {self.ctx.group} at term {request.get('term')}")
        error = self._service.error if self._service is not None else ""
        return {"term": self.term, "error": error}

    def commit_index(self) -> int:
        try:
            with open_node_db(self.location) as db:
                return db.state().position
        except CascadeError:
            return 0

    async def close(self) -> None:
        await self.stop_follower()
        await self.stop_leader()
