"""The placement controller: runs on the node that holds the controller lease.

Each pass observes (objects, groups, nodes, drains from the store; each live node's member
report over its API), decides (:func:`baton.placement.decide.decide`), takes every new term from
the group's epoch counter in the store (:func:`take_terms`), writes the group records that
changed (one transaction per chunk, each conditioned on the controller's lease at its epoch and
on the records' versions), and sends a ``sync`` command, carrying the controller's epoch,
to every node whose members do not yet match. Passes run on every relevant store change and at
least every ``reconcile_interval``; a pass is idempotent, so an interrupted one (a crash, a lost
leadership) is simply done again by whoever controls next.

A controller that lost its lease changes nothing: its ``leadership()`` body is cancelled at once,
a write that races the loss fails its ``LeaseHeld`` condition, and nodes refuse its commands.

The controller is given what it uses (the store, the controller
:class:`~baton.lease.election.Election` that fences it, a way to call other nodes, somewhere to
count, how often to pass) and knows nothing of the node agent that runs it: :class:`Peers` and
:class:`PlacementMetrics` are the small protocols the agent's parts satisfy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import prometheus_client as prom

from baton.errors import Deposed, LeaseLost, PeerError, StoreError
from baton.keys import GROUPS, MEMBERS, NODES, group_record, group_terms
from baton.lease.election import Election, Term
from baton.lease.role import Role
from baton.logs import describe
from baton.placement.decide import Decision, NodeView, Observed, decide
from baton.placement.model import GroupRecord, dump
from baton.placement.records import read_drains, read_groups, read_objects
from baton.store import Condition, Delete, Lease, LeaseHeld, Op, Put, Store, VersionIs

log = logging.getLogger("baton.placement")

#: Group writes per transaction (bounded so one pass over 10k groups is not one huge write).
CHUNK = 64


class Peers(Protocol):
    """Calls to other nodes' APIs, authenticated (a node agent's ``Peers``)."""

    async def call(
        self, address: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``method path`` on the node at ``address``; its JSON answer. Raises
        :class:`PeerError` (with the HTTP ``status`` when the node answered) on any failure."""
        ...


class PlacementMetrics(Protocol):
    """What the controller counts (a node agent's ``NodeMetrics`` has all of it)."""

    store_errors: prom.Counter
    reconcile_seconds: prom.Histogram
    moves: prom.Counter
    leader_transfers: prom.Counter
    suspects: prom.Gauge
    failure_groups: prom.Gauge
    error_groups: prom.Gauge

    def set_placement(self, per: Mapping[tuple[str, str], int]) -> None:
        """Replace the member counts per (node, workload type)."""
        ...


async def take_terms(store: Store, before: Mapping[str, GroupRecord], decision: Decision) -> None:
    """Replace every term :func:`decide` changed by the next epoch of the group's counter.

    :func:`decide` only knows the record it read, and a group deleted and created again has no
    record: its ``max(term + 1, controller epoch)`` would hand out a term an earlier
    incarnation already had (a paused leader of that incarnation, holding a higher term, would
    then win fenced writes). The counter's next epoch is above every term ever taken from it,
    the store clock and the term decided, so terms strictly increase per group name whatever
    happens to the records. Terms taken for a write that then fails are simply skipped.
    """
    floors: dict[str, int] = {}
    for key, group in decision.groups.items():
        old = before.get(key)
        if group is None or group.term == (old.term if old else 0):
            continue
        # Above the record's own term too: records written before the counter existed.
        floors[group_terms(key)] = max(group.term, old.term + 1 if old else 0)
    if not floors:
        return
    terms = await store.next_epochs(floors)
    for key, group in list(decision.groups.items()):
        name = group_terms(key)
        if group is not None and name in terms:
            decision.groups[key] = group.model_copy(update={"term": terms[name]})


async def write_groups(
    store: Store,
    lease: Lease,
    changed: Mapping[str, GroupRecord | None],
    versions: Mapping[str, int],
) -> None:
    """Write the changed group records (``None``: delete), chunk by chunk, each transaction
    conditioned on ``lease`` at its epoch and on the records' ``versions``. Raises
    :class:`Deposed` when the lease is no longer held; stops quietly when a record moved (the
    next pass starts from the new state)."""
    fence = LeaseHeld(lease.name, lease.holder, lease.epoch)
    items = sorted(changed.items())
    for i in range(0, len(items), CHUNK):
        ops: list[Op] = []
        conditions: list[Condition] = [fence]
        for key, group in items[i : i + CHUNK]:
            name = group_record(key)
            ops.append(Put(name, dump(group)) if group else Delete(name))
            conditions.append(VersionIs(name, versions.get(key, 0)))
        res = await store.txn(ops, conditions)
        if not res.ok:
            if fence in res.failed:
                raise Deposed(f"controller lease at epoch {lease.epoch} no longer held")
            return  # a record moved under us: the next pass starts from the new state


async def settle(
    store: Store, lease: Lease, obs: Observed, versions: Mapping[str, int]
) -> tuple[Decision, dict[str, GroupRecord | None]]:
    """Decide from ``obs``, take the new terms from the store, and write what changed
    (fenced by ``lease``). Returns the decision and the records that changed."""
    decision = decide(obs)
    await take_terms(store, obs.groups, decision)
    changed = {k: g for k, g in decision.groups.items() if g != obs.groups.get(k)}
    await write_groups(store, lease, changed, versions)
    return decision, changed


class PlacementController:
    """Reconciles placement while ``election`` (the controller role, whose candidate is this
    node) is won: every pass is fenced by its term, and ``peers`` carries its commands."""

    def __init__(
        self,
        store: Store,
        election: Election,
        peers: Peers,
        metrics: PlacementMetrics,
        *,
        interval: float,
    ) -> None:
        self.store = store
        self.election = election
        self.peers = peers
        self.metrics = metrics
        #: Longest time between two passes (``placement.reconcile_interval``).
        self.interval = interval
        self._wake = asyncio.Event()
        #: The last pass's decision and observation (for status and tests).
        self.last: Decision | None = None
        self.passes = 0
        self._versions: dict[str, int] = {}

    async def run(self) -> None:
        """Forever: wait to be controller, reconcile while it lasts."""
        while True:
            try:
                async with self.election.leadership() as term:
                    await self._lead(term)
            except LeaseLost as exc:
                log.warning(
                    "placement stopped: controller role lost", extra={"reason": describe(exc)}
                )
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # Our own cancellation (the node is stopping) arrived together with the
                    # lease loss and was absorbed by it: honour it.
                    raise asyncio.CancelledError from None
            except Deposed:
                log.warning("placement stopped: a fenced write was refused")
                await asyncio.sleep(self.interval)

    async def _lead(self, term: Term) -> None:
        log.info("placement controller started", extra={"epoch": term.epoch})
        watcher = asyncio.create_task(self._watch(), name="placement-watch")
        try:
            while True:
                self._wake.clear()
                started = time.monotonic()
                try:
                    await self.reconcile(term)
                except StoreError as exc:
                    self.metrics.store_errors.labels(operation="reconcile").inc()
                    log.warning("reconcile failed", extra={"error": describe(exc)})
                self.metrics.reconcile_seconds.observe(time.monotonic() - started)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch(self) -> None:
        """Wake a pass on any change but the controller's own group writes."""
        while True:
            try:
                async for change in self.store.watch(""):
                    if not change.key.startswith(GROUPS):
                        self._wake.set()
            except StoreError:
                await asyncio.sleep(self.interval)

    async def observe(self, epoch: int) -> Observed:
        store = self.store
        objects = await read_objects(store)
        groups = await read_groups(store)
        self._versions = {k: v for k, (_, v) in groups.items()}
        drains = await read_drains(store)
        live = {x.holder for x in await store.list_leases(MEMBERS)}
        records, _ = await store.list(NODES)
        infos = [json.loads(r.value) for r in records]
        reports: dict[str, dict[str, dict[str, Any]]] = {}

        async def poll(info: dict[str, Any]) -> None:
            try:
                answer = await self.peers.call(info["address"], "GET", "/v1/groups")
            except PeerError:
                return
            reports[info["id"]] = {g["group"]: g for g in answer.get("groups", [])}

        await asyncio.gather(*(poll(i) for i in infos if i["id"] in live))
        nodes = {
            i["id"]: NodeView(
                id=i["id"],
                address=i["address"],
                capacity=int(i.get("capacity", 0)),
                labels=i.get("labels", {}),
                types=frozenset(i.get("types", [])),
                live=i["id"] in live,
                reachable=i["id"] in reports,
                draining=i["id"] in drains,
            )
            for i in infos
        }
        return Observed(
            objects=objects,
            groups={k: g for k, (g, _) in groups.items()},
            nodes=nodes,
            reports=reports,
            controller_epoch=epoch,
            now=await store.now(),
        )

    async def reconcile(self, term: Term) -> Decision:
        """One pass: observe, decide, write (fenced), tell the nodes."""
        obs = await self.observe(term.epoch)
        decision, changed = await settle(self.store, term.lease, obs, self._versions)
        await self._command(term, obs, decision)
        self._account(obs, decision, changed)
        self.last = decision
        self.passes += 1
        return decision

    async def _command(self, term: Term, obs: Observed, decision: Decision) -> None:
        """Send ``sync`` to every reachable node whose members differ from the records."""
        todo: dict[str, set[str]] = {}
        for key, group in decision.groups.items():
            old = obs.groups.get(key)
            nodes = set(group.members if group else ()) | set(old.members if old else ())
            for node in nodes:
                rep = obs.reports.get(node, {}).get(key)
                if group is None or node not in group.members:
                    if rep is not None:
                        todo.setdefault(node, set()).add(key)
                    continue
                want = Role.LEADER if node == group.leader else Role.FOLLOWER
                if (
                    rep is None
                    or rep.get("term") != group.term
                    or rep.get("role") != want
                    or (want == Role.FOLLOWER and rep.get("leader") != group.leader)
                ):
                    todo.setdefault(node, set()).add(key)
        for node, reports in obs.reports.items():
            for key in reports:
                if key not in decision.groups:  # a group whose record is already gone
                    todo.setdefault(node, set()).add(key)

        async def send(node: str, keys: Sequence[str]) -> None:
            view = obs.nodes.get(node)
            if view is None or not view.live or not view.reachable:
                return
            body = {
                "sender": self.election.node_id,
                "role": "controller",
                "epoch": term.epoch,
                "command": "sync",
                "groups": list(keys),
            }
            try:
                await self.peers.call(view.address, "POST", "/v1/commands", body)
            except PeerError as exc:
                if exc.status == 409:
                    raise Deposed(f"{node} refused epoch {term.epoch}: {exc}") from None
                if exc.status == 422:
                    # Members that cannot run there: their groups show it (state "error"), and
                    # every pass retries them, so a line per pass would only repeat it.
                    log.debug(
                        "sync: members cannot run", extra={"to": node, "error": describe(exc)}
                    )
                    return
                log.info("sync command failed", extra={"to": node, "error": describe(exc)})

        await asyncio.gather(*(send(n, sorted(k)) for n, k in sorted(todo.items())))

    def _account(
        self, obs: Observed, decision: Decision, changed: dict[str, GroupRecord | None]
    ) -> None:
        m = self.metrics
        per: Counter[tuple[str, str]] = Counter()
        for group in decision.groups.values():
            if group is not None:
                for node in group.members:
                    per[(node, group.type)] += 1
        m.set_placement(per)
        if decision.placement is not None and decision.placement.moves:
            m.moves.inc(decision.placement.moves)
        m.leader_transfers.inc(len(decision.transfers))
        m.suspects.set(sum(1 for v in obs.nodes.values() if not v.live or not v.reachable))
        m.failure_groups.set(len(decision.failures))
        m.error_groups.set(len(decision.errors))
        for key in decision.transfers:
            group = decision.groups.get(key)
            if group is not None and key in changed:
                t = group.transfer
                log.warning(
                    "group leader transferred",
                    extra={
                        "group": key,
                        "to": group.leader,
                        "from": t.previous if t else None,
                        "term": group.term,
                        "reason": t.reason if t else "",
                    },
                )
        for key in decision.failures:
            group = decision.groups.get(key)
            if group is not None and key in changed:
                log.warning(
                    "group in failure reconciliation", extra={"group": key, "detail": group.detail}
                )
        for key in decision.behind:
            group = decision.groups.get(key)
            if group is not None and key in changed:
                log.warning(
                    "group record behind its members (the store lost recent writes): new term",
                    extra={"group": key, "term": group.term, "leader": group.leader},
                )
        for key in decision.errors:
            group = decision.groups.get(key)
            if group is not None and key in changed:
                log.warning("group member cannot run", extra={"group": key, "detail": group.detail})
