"""The node side of placement: runs this node's group members as the group records say.

The runner acts only when told, by a controller command the node has verified against the
store (see :meth:`NodeAgent.check_command`), and then reads the group records from the store
itself: a command names groups, it does not carry their state, so a delayed or replayed command
can only make the node converge to what the store says now. It also stops every leader role the
moment the node loses its membership lease: a node cut off from the store stops acting before
the controller may nominate someone else (invariant 2).

A member whose workload cannot be created (its spec refused by the type, its constructor
failing, its type not run here) or cannot take its role is isolated: it is kept with its error,
which ``/v1/groups`` reports (the controller shows the group in state ``error`` with it), it is
tried again at the next command, and the other groups of the same command are converged
regardless.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from baton import logs
from baton.errors import BatonError, StoreError
from baton.keys import GROUPS, group_record, object_record
from baton.lease.role import Role
from baton.placement.model import GroupRecord, parse_group, parse_object
from baton.placement.workload import Fetch, NotLeader, Workload, WorkloadContext
from baton.store import Store
from baton.validation import first_problem

log = logging.getLogger("baton.placement")


#: The longest member error kept and reported (a workload's exception text can be long).
ERROR_LIMIT = 300


def describe(exc: BaseException) -> str:
    """One bounded line for a member error: baton errors say it all, others get their type."""
    if isinstance(exc, ValidationError):
        p = first_problem(exc)
        text = f"{exc.title} is not valid: {p.where}: {p.message}"
    elif isinstance(exc, BatonError) and str(exc).strip():
        text = str(exc)
    else:
        text = logs.describe(exc)  # the type name at least (str(TimeoutError()) is "")
    text = " ".join(text.split())
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT - 3] + "..."


@dataclass(slots=True)
class Member:
    """This node's member of one group."""

    #: None when the workload could not be created (``error`` says why; tried again on the
    #: next command).
    workload: Workload | None
    role: Role = Role.NONE
    term: int = 0
    leader: str | None = None
    error: str = ""


class Runner:
    """Converges this node's members to the group records, on command."""

    def __init__(
        self,
        node_id: str,
        store: Store,
        *,
        data_dir: Path,
        types: dict[str, type[Workload]],
        fetch: Fetch,
        may_lead: Callable[[], bool],
        spark: Callable[[str], Any] | None = None,
    ) -> None:
        self.node_id = node_id
        self.store = store
        self.data_dir = data_dir
        self.types = types
        self.fetch = fetch
        #: Whether this node holds its membership lease (no leader role starts without it).
        self.may_lead = may_lead
        self.spark = spark
        self.members: dict[str, Member] = {}
        #: One lock per group, held from reading its record to the end of its convergence (and
        #: by every demotion): one group's member is created, started, stopped and removed by
        #: one operation at a time. A lock kept on the member instead let two syncs that found
        #: no member each create one, and the one left out of ``members`` led on, unstopped,
        #: beside the other (the fault campaign's defect 15: two workers of one node, at one
        #: epoch, in one agent).
        self._locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Future[Any]] = set()

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _keep(self, task: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """Hold ``task`` until it ends (the event loop keeps only weak references)."""

        def done(t: asyncio.Future[Any]) -> None:
            self._background.discard(t)
            exc = None if t.cancelled() else t.exception()
            if exc is not None:
                # Its caller gets it too; a caller that was cancelled has only this line.
                log.info("group operation failed", extra={"error": describe(exc)})

        self._background.add(task)
        task.add_done_callback(done)
        return task

    async def sync(self, keys: Iterable[str]) -> dict[str, str]:
        """Make the members of ``keys`` match their group records in the store. Returns the
        groups whose member on this node cannot run, with why; one such group never keeps the
        others from converging. Raises :class:`~baton.errors.StoreError` when the store fails
        (the groups not reached yet are converged by the next command)."""
        failed: dict[str, str] = {}
        for key in sorted(set(keys)):
            problem = await self._sync_one(key)
            if problem:
                failed[key] = problem
        return failed

    async def _sync_one(self, key: str) -> str:
        """Converge one group; returns why its member cannot run here, or "". The convergence
        runs to its end even when the caller is cancelled (a command whose request the
        controller gave up on): one cut half-way could leave a role running that the member
        does not record, which nothing would then stop."""
        task = self._keep(asyncio.ensure_future(self._sync_locked(key)))
        return await asyncio.shield(task)

    async def _sync_locked(self, key: str) -> str:
        async with self._lock(key):
            return await self._converge_group(key)

    async def _converge_group(self, key: str) -> str:
        # The record is read under the group's lock: of two syncs, the later reader converges
        # last, so a slow sync never replays an older record over a newer one.
        rec = await self.store.get(group_record(key))
        try:
            group = parse_group(rec.value) if rec is not None else None
        except ValidationError as exc:
            # Not one the controller wrote (another version, a hand edit): leave this node's
            # member as it is rather than guess.
            return describe(exc)
        if group is not None and self.node_id not in group.members:
            group = None
        member = self.members.get(key)
        if group is None:
            if member is not None:
                try:
                    await self._stop(member)
                    if member.workload is not None:
                        await member.workload.close()
                finally:
                    self.members.pop(key, None)
            return ""
        if member is None or member.workload is None:
            member = await self._create(group, member)
            if member is None:
                return ""
            if member.workload is None:
                return member.error
        await self._converge(member, group)
        return member.error

    async def _create(self, group: GroupRecord, failed: Member | None) -> Member | None:
        """This node's member of ``group``: its workload, or the error that kept it from being
        created (``failed`` is the previous attempt's, to log a repeated error only once).
        None when the object is gone (the group record goes next)."""
        obj_rec = await self.store.get(object_record(group.object))
        if obj_rec is None:
            return None
        cls = self.types.get(group.type)
        try:
            if cls is None:
                raise BatonError(
                    f"this node does not run workload type {group.type!r} (see its "
                    "[workloads] config)"
                )
            obj = parse_object(obj_rec.value)
            obj = obj.model_copy(update={"spec": cls.validate_spec(obj.spec)})
            path = self.data_dir / "groups" / group.object / str(group.partition)
            path.mkdir(parents=True, exist_ok=True)
            # A Spark session named after the group (over Spark Connect the server keeps one
            # per name): whichever node leads the group next reattaches to it and stops the
            # queries its predecessor left running there.
            spark = None if self.spark is None else functools.partial(self.spark, group.key)
            ctx = WorkloadContext(
                obj, group.partition, group.key, self.node_id, path, self.fetch, spark
            )
            member = Member(cls(ctx))
        except Exception as exc:  # the type's code or its input: isolate it, never the node
            member = Member(None, error=describe(exc))
            if failed is None or failed.error != member.error:
                log.warning(
                    "group member cannot start", extra={"group": group.key, "error": member.error}
                )
        self.members[group.key] = member
        return member

    async def _converge(self, member: Member, group: GroupRecord) -> None:
        want_leader = group.leader == self.node_id
        if want_leader and not self.may_lead():
            want_leader = False  # without membership this node leads nothing
        if group.leader is None:
            role, leader = Role.NONE, None
        elif want_leader:
            role, leader = Role.LEADER, self.node_id
        elif group.leader == self.node_id:
            role, leader = Role.NONE, None
        else:
            role, leader = Role.FOLLOWER, group.leader
        if (member.role, member.term, member.leader) == (role, group.term, leader):
            return
        # A term only moves forward: a record older than what this member runs is ignored.
        if group.term < member.term:
            return
        assert member.workload is not None  # the caller creates it first
        try:
            await self._stop(member)
            if role == Role.LEADER:
                await member.workload.start_leader(group.term)
            elif role == Role.FOLLOWER and leader is not None:
                await member.workload.start_follower(leader, group.term)
            member.role, member.term, member.leader, member.error = role, group.term, leader, ""
            log.info(
                "group role",
                extra={
                    "group": group.key,
                    "group_role": role,
                    "term": group.term,
                    "leader": leader,
                },
            )
        except Exception as exc:  # a workload's bug must not take the node down
            member.error = describe(exc)
            log.warning("group role failed", extra={"group": group.key, "error": member.error})

    async def _stop(self, member: Member) -> None:
        try:
            if member.workload is None:
                pass
            elif member.role == Role.LEADER:
                await member.workload.stop_leader()
            elif member.role == Role.FOLLOWER:
                await member.workload.stop_follower()
        finally:
            member.role, member.leader = Role.NONE, None

    async def watch_demotions(self) -> None:
        """Stop a leader role the moment the store shows this node was deposed (another leader
        or a higher term), even when no command can reach the node: a node that still sees the
        store but that the controller and its peers cannot reach stops acting at once instead
        of leading on at a stale term. Only demotions happen here; a node starts a role only
        when the controller tells it to."""
        since = None
        while True:
            try:
                since = since or await self.store.head()
                async for change in self.store.watch(GROUPS, since=since):
                    since = change.position
                    key = change.key.removeprefix(GROUPS)
                    member = self.members.get(key)
                    if member is None or member.role != Role.LEADER:
                        continue
                    group = parse_group(change.value) if change.value else None
                    if self._deposed(member, group):
                        # Not awaited here: one group's slow stop (a Spark query finishing its
                        # micro-batch) must not hold back the demotions of the others. The
                        # group's lock keeps one group's demotions in order.
                        self._keep(asyncio.ensure_future(self._demote(key, group)))
            except asyncio.CancelledError:
                raise
            except StoreError:
                since = None  # resume from now; the membership lease covers the gap
                await asyncio.sleep(0.5)

    def _deposed(self, member: Member, group: GroupRecord | None) -> bool:
        return group is None or group.leader != self.node_id or group.term > member.term

    async def _demote(self, key: str, group: GroupRecord | None) -> None:
        async with self._lock(key):
            member = self.members.get(key)  # a sync may have moved it on meanwhile
            if member is not None and member.role == Role.LEADER and self._deposed(member, group):
                await self._stop(member)
                log.warning("group leader role stopped: deposed in the store", extra={"group": key})

    def drop_leaders(self) -> None:
        """Membership lost: stop every leader role now (scheduled before any await returns)."""
        for key, member in self.members.items():
            if member.role == Role.LEADER:
                self._keep(asyncio.ensure_future(self._drop(key)))

    async def _drop(self, key: str) -> None:
        async with self._lock(key):
            # Whatever member the group has by now (a sync may have replaced or removed the
            # one seen when this was scheduled).
            member = self.members.get(key)
            if member is not None and member.role == Role.LEADER:
                await self._stop(member)
                log.warning("group leader role stopped: membership lost", extra={"group": key})

    async def resync_all(self) -> None:
        """Converge every group this node is a member of (after regaining membership)."""
        try:
            records, _ = await self.store.list(GROUPS)
        except StoreError:
            return
        mine = set(self.members)
        for rec in records:
            try:
                group = parse_group(rec.value)
            except ValidationError:
                continue  # not a record the controller wrote: nothing to run from it
            if self.node_id in group.members:
                mine.add(group.key)
        try:
            await self.sync(mine)
        except StoreError:
            return  # the controller's next commands converge the rest

    def report(self) -> list[dict[str, Any]]:
        """What the controller polls: role, term, leader, commit index, stream liveness."""
        out = []
        for key, m in sorted(self.members.items()):
            try:
                if m.workload is None:
                    index, live = -1, False
                else:
                    index = m.workload.commit_index()
                    live = m.workload.stream_live() if m.role == Role.FOLLOWER else False
            except Exception as exc:
                index, live, m.error = -1, False, describe(exc)
            out.append(
                {
                    "group": key,
                    "role": m.role,
                    "term": m.term,
                    "leader": m.leader,
                    "commit_index": index,
                    "stream_live": live,
                    "error": m.error,
                }
            )
        return out

    async def serve(self, key: str, request: dict[str, Any]) -> dict[str, Any]:
        """A follower's fetch for group ``key``; only this group's leader answers."""
        member = self.members.get(key)
        if member is None or member.role != Role.LEADER or member.workload is None:
            raise NotLeader(f"{self.node_id} does not lead {key}")
        return await member.workload.serve(request)

    async def close(self) -> None:
        # Convergences under way finish first (each may be starting a role), then every member
        # stops; a sync arriving meanwhile waits for its group's lock and finds it gone.
        await asyncio.gather(*self._background, return_exceptions=True)
        for key in list(self.members):
            async with self._lock(key):
                member = self.members.pop(key, None)
                if member is None:
                    continue
                try:
                    await self._stop(member)
                    if member.workload is not None:
                        await member.workload.close()
                except BatonError as exc:
                    log.warning("closing a member failed", extra={"error": describe(exc)})
