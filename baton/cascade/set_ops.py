"""Set-level operations: add-table (on a node or on all), remove-table, tables, missing, emit,
change-provider, candidates, tag-dead/tag-alive, pause/resume, members and status, check,
switchover, failover, resurrect.

Every operation is resumable: it checks each step's effect before doing it, so running it again
after an interruption finishes the job. Bad input (an unknown node, a dead provider, a cycle, a
provider without the ticks a node needs) is refused before anything is written.

A node is found by name through the node list of any member (``via``: a location), because the
node list is the only data every node holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baton.cascade import beat, compare, decide, node_ops
from baton.cascade.beat import Beat, Phase, ServiceState
from baton.cascade.codec import decode
from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.db.base import split_location
from baton.cascade.model import WATERMARK, NodeState, Role
from baton.cascade.ticker import TickerConfig
from baton.errors import (
    CascadeError,
    CascadeInputError,
    NodeDatabaseError,
    NotFinished,
    Refused,
    StaleEpoch,
    redact_url,
)

#: How often :func:`poll` (a switchover's default wait) checks its condition, in seconds.
POLL = 0.1


class CascadeSet:
    """The set, seen through the node list at ``via``."""

    def __init__(self, via: str) -> None:
        self.via = via
        with open_node_db(via) as db:
            self.set_name = db.state().set_name  # refuses a database that is not a node
            self.nodes = db.nodes()

    def location(self, name: str) -> str:
        if name not in self.nodes:
            raise CascadeInputError(f"unknown node {name!r}: the set has {sorted(self.nodes)}")
        return self.nodes[name][0]

    @contextmanager
    def db(self, name: str) -> Iterator[NodeDB]:
        with open_node_db(self.location(name)) as db:
            yield db

    def dead(self, name: str) -> bool:
        return self.nodes[name][1]

    def state(self, name: str) -> NodeState:
        """The state of node ``name`` (its role, provider, position, ...)."""
        with self.db(name) as db:
            return db.state()

    def providers_chain(self, name: str) -> list[str]:
        """``name``'s provider, its provider, ... up to the root (cycle-safe)."""
        return decide.chain(name, _States(self))

    def _for_each_live(self, fn: Callable[[NodeDB], None]) -> list[str]:
        """Run ``fn`` on every reachable node not tagged dead; the names that failed."""
        failed = []
        for name, (loc, dead) in sorted(self.nodes.items()):
            if dead:
                continue
            try:
                with open_node_db(loc) as db:
                    fn(db)
            except (CascadeError, OSError):
                failed.append(name)
        return failed


class _States(Mapping[str, NodeState]):
    """The members' states, each read when asked (a chain up the providers reads only what it
    walks); a member that cannot be read is not there."""

    def __init__(self, c: CascadeSet) -> None:
        self._c = c
        self._read: dict[str, NodeState | None] = {}

    def __getitem__(self, name: str) -> NodeState:
        if name not in self._read:
            try:
                self._read[name] = self._c.state(name) if name in self._c.nodes else None
            except (CascadeError, OSError):
                self._read[name] = None
        found = self._read[name]
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._c.nodes)

    def __len__(self) -> int:
        return len(self._c.nodes)


@contextmanager
def refusing() -> Iterator[None]:
    """Inside: the input has been checked, so a CascadeError is the set's state refusing the
    operation (:class:`Refused`), unless a database failed or could not be reached, a
    switchover did not finish, or a newer epoch applied."""
    try:
        yield
    except CascadeError as exc:
        if isinstance(exc, Refused | NodeDatabaseError | NotFinished | StaleEpoch):
            raise
        raise Refused(str(exc)) from exc


def _not_root(node: str, st: NodeState) -> None:
    if st.role is Role.ROOT:
        raise Refused(f"{node} is the root: it has no provider (use switchover)")


def live_states(c: CascadeSet) -> dict[str, NodeState]:
    """The state of every member not tagged dead."""
    return {name: c.state(name) for name, (_, dead) in sorted(c.nodes.items()) if not dead}


subscription_order = decide.subscription_order


# -- tables ----------------------------------------------------------------------------------


def tables(c: CascadeSet, node: str) -> dict[str, str]:
    """The tables ``node`` replicates, with their state (copying, catching-up, ok)."""
    with c.db(node) as db:
        return db.tables()


def _check_table_everywhere(c: CascadeSet, states: dict[str, NodeState], table: str) -> None:
    """Refuse ``add-table --all`` before anything is written if any live node lacks ``table``,
    it has no primary key, its columns differ from the root's, or a node's provider is dead."""
    shape: tuple[list[str], list[str]] | None = None
    for name in subscription_order(states):
        st = states[name]
        if st.provider is not None and st.provider not in states:
            raise Refused(
                f"{name}'s provider {st.provider} is tagged dead: change its provider first"
            )
        with c.db(name) as db:
            try:
                cols, pk = node_ops.table_shape(db, table, name)
            except CascadeInputError as exc:
                raise CascadeInputError(f"{name}: {exc}") from None
        if shape is None:
            shape = (cols, pk)
        elif not node_ops.same_shape((cols, pk), shape):
            raise CascadeInputError(
                f"{table}: columns {cols} (key {pk}) on {name} differ from {shape[0]} "
                f"(key {shape[1]}) on the root"
            )


def add_table(c: CascadeSet, table: str, node: str | None = None) -> list[tuple[str, str]]:
    """Replicate ``table`` on ``node``, or (None) on every live node, root first, then each node
    after its provider: (node, the table's state there) for each. The input is checked on every
    one of them before anything is written (:class:`CascadeInputError`); what the set's state
    refuses after that is :class:`Refused`. See :func:`baton.cascade.node_ops.add_table`."""
    if node is not None:
        names = [node]
        with c.db(node) as db:
            db.state()
            node_ops.table_shape(db, table, node)
    else:
        states = live_states(c)
        held = without_tables(c, states)
        states = {n: st for n, st in states.items() if n not in held}
        _check_table_everywhere(c, states, table)
        names = subscription_order(states)
    with refusing():
        return [(name, node_ops.add_table(c.location(name), table)) for name in names]


def remove_table(c: CascadeSet, table: str, node: str) -> tuple[bool, bool]:
    """Stop replicating ``table`` on ``node`` (its rows stay); at the root, stop capturing it,
    which is refused while another live node replicates it (it would silently stop receiving
    its changes). (removed: False when it was not replicated, uncaptured: ``node`` is the
    root)."""
    with c.db(node) as db:
        root = db.state().role is Role.ROOT
        if table not in db.tables():
            db.columns(table)  # a table that does not exist is a typo, not a finished job
            return False, False
        if root:
            others = [
                name
                for name in sorted(c.nodes)
                if name != node and not c.dead(name) and table in tables(c, name)
            ]
            if others:
                raise Refused(
                    f"{table} is still replicated by {', '.join(others)}: remove it there first "
                    "(the root stops capturing it)"
                )
        with db.transaction() as cur:
            if root:
                # A table dropped since took its capture triggers with it.
                with suppress(CascadeInputError):
                    db.capture(cur, table, False)
            db.set_table(cur, table, None)
    return True, root


def missing(c: CascadeSet, node: str) -> tuple[str | None, list[str]]:
    """(``node``'s provider, the tables it replicates that ``node`` does not); (None, []) for
    the root."""
    with c.db(node) as db:
        provider = db.state().provider
        mine = db.tables()
    if provider is None:
        return None, []
    return provider, sorted(set(tables(c, provider)) - set(mine))


# -- events ----------------------------------------------------------------------------------


def emit(c: CascadeSet, type_: str, data: dict[str, Any]) -> tuple[int, str]:
    """Add a custom event at the set's live root (it travels with the next tick): (its id, the
    root)."""
    root = _find_root(c)
    return node_ops.emit(c.location(root), type_, data), root


# -- provider changes --------------------------------------------------------------------


def candidates(c: CascadeSet, node: str) -> list[str]:
    """The nodes that can be ``node``'s provider now: they carry the queue, are not dead, are
    not ``node`` or below it (no cycle), and still have the tick ``node`` is at. Refused for
    the root."""
    st = c.state(node)
    _not_root(node, st)
    seen = {name: _seen(c, name, st.position) for name in c.nodes}
    return decide.candidates(node, seen)


def _seen(c: CascadeSet, name: str, position: int | None = None) -> decide.Seen:
    """What an operation knows of ``name`` (its state None when it cannot be read); with
    ``position``, whether it holds that tick."""
    loc, dead = c.nodes[name]
    try:
        with open_node_db(loc) as db:
            st = db.state()
            last = db.last_tick()
            holds = None if position is None else not position or db.get_tick(position) is not None
            merging = bool(db.merge_leaves()) if st.role.carries_queue else False
    except (CascadeError, OSError):
        return decide.Seen(name, dead, None)
    return decide.Seen(name, dead, st, last.tick_id if last else None, holds, merging)


def _check_provider(c: CascadeSet, node: str, provider: str, position: int) -> None:
    if provider == node:
        raise CascadeInputError(f"{node} cannot be its own provider")
    c.location(provider)  # an unknown name is refused here, with the known ones
    if c.dead(provider):
        raise Refused(f"{provider} is tagged dead: pick another provider (see candidates)")
    c.state(provider)  # an unreachable provider: its error, as it is
    seen = _seen(c, provider, position)
    problem = decide.provider_problem(node, seen, _States(c))
    if problem is decide.Problem.LEAF:
        raise Refused(f"{provider} is a leaf: it has no queue to provide")
    if problem is decide.Problem.CYCLE:
        raise Refused(f"{provider} receives from {node}: that would make a cycle")
    if problem is decide.Problem.LACKS_TICK:
        have = seen.last_tick or 0
        why = "is behind" if have < position else "no longer has it"
        raise Refused(
            f"{provider} cannot provide {node}: {node} is at tick {position} and {provider} "
            f"{why} (last tick {have}); see 'candidates'"
        )
    if problem is not None:  # read just above: it went away meanwhile
        raise Refused(f"{provider} cannot provide {node} now ({problem}): try again")


def change_provider(c: CascadeSet, node: str, provider: str) -> None:
    """Point ``node`` at ``provider``; its worker follows within one micro-batch."""
    with c.db(node) as db:
        st = db.state()
        _not_root(node, st)
        old = st.provider
        if old == provider:
            return
        _check_provider(c, node, provider, st.position)
        with c.db(provider) as pdb, pdb.transaction() as cur:
            pdb.set_watermark(cur, node, st.position)
        _hold_upwards(c, provider, st.position)
        with db.transaction() as cur:
            db.set_local(cur, "provider", provider)
    if old is not None and not c.dead(old):
        try:
            with c.db(old) as odb, odb.transaction() as cur:
                odb.drop_subscriber(cur, node)
        except (CascadeError, OSError):
            pass  # the old provider is gone: nothing of ours to clean there
    if old is not None and c.dead(old):
        _release_dead(c, old)


def _hold_upwards(c: CascadeSet, node: str, position: int) -> None:
    """Lower the watermark ``node`` has reported up its chain to ``position`` at once, so the
    root cannot trim ticks a newly attached subscriber still needs before ``node`` reports again
    (its next report includes the new subscriber)."""
    child = node
    for parent in c.providers_chain(node):
        with c.db(parent) as db:
            current = db.watermarks().get(child)
            if current is None or current > position:
                with db.transaction() as cur:
                    db.set_watermark(cur, child, position)
        child = parent


def _subscribers_of(c: CascadeSet, node: str) -> list[str]:
    """Live nodes whose provider is ``node``."""
    out = []
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == node:
            continue
        try:
            with open_node_db(loc) as db:
                if db.state().provider == node:
                    out.append(name)
        except (CascadeError, OSError):
            continue
    return out


def _prune_subscribers(c: CascadeSet, node: str) -> None:
    """Drop ``node``'s watermark entries for nodes that no longer receive from it (an old root
    keeps its former subscribers' entries, which would pin the watermark for ever)."""
    current = set(_subscribers_of(c, node))
    with c.db(node) as db:
        stale = [name for name in db.watermarks() if name not in current]
        if stale:
            with db.transaction() as cur:
                for name in stale:
                    db.drop_subscriber(cur, name)


def _release_dead(c: CascadeSet, node: str) -> None:
    """Drop a dead node's watermark registration once no live node receives from it. Until
    then its last report keeps holding the queue back for the nodes below it (they still need
    those ticks to move to another provider)."""
    if _subscribers_of(c, node):
        return

    def drop(db: NodeDB) -> None:
        if node in db.watermarks():
            with db.transaction() as cur:
                db.drop_subscriber(cur, node)

    c._for_each_live(drop)


# -- dead and alive ------------------------------------------------------------------------


def tag(c: CascadeSet, node: str, dead: bool) -> list[str]:
    """Tag ``node`` dead (or alive) in every reachable node list; the nodes not reached. A dead
    node is no provider candidate; it stops holding back the watermark once no live node
    receives from it."""
    location = c.location(node)

    def mark(db: NodeDB) -> None:
        with db.transaction() as cur:
            db.put_node(cur, node, location, dead)

    if not dead:
        c.nodes[node] = (location, False)  # so the node's own list is updated too
    missed = c._for_each_live(mark)
    c.nodes[node] = (location, dead)
    if dead:
        _release_dead(c, node)
    return missed


def set_paused(c: CascadeSet, node: str, paused: bool) -> None:
    """Pause (or resume) ``node``'s worker: it applies nothing while paused."""
    with c.db(node) as db, db.transaction() as cur:
        db.set_local(cur, "paused", "1" if paused else "0")


# -- status ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    location: str
    role: str
    provider: str | None
    position: int
    lag_ticks: int | None
    lag_seconds: float | None
    paused: bool
    dead: bool
    reachable: bool
    tables: dict[str, str]
    #: A branch that keeps only the queue (set by :func:`baton.cascade.commands.members`).
    queue_only: bool = False
    #: Partition set -> the merge-leaf this node hosts for it (a combined root or failover).
    merges: dict[str, str] = field(default_factory=dict)
    #: A merge-leaf: the combined set it feeds.
    combined: str | None = None
    #: When the tick at ``position`` was made (the root's clock; None: not known): a root's
    #: last tick long ago says its ticker is not running, a member's, with lag, its worker.
    tick_time: float | None = None
    #: The root, while a switchover is under way: the branch it switches to, and the switch
    #: tick (the root captures nothing from then on; the same switchover finishes it).
    switching_to: str | None = None
    switch_tick: int | None = None
    #: The last heartbeat of the process serving the node (None: never served).
    service: Beat | None = None


def members(c: CascadeSet) -> list[Member]:
    """Every node with its position and lag behind the root (in ticks and seconds)."""
    root_last = None
    root_db_loc = None
    for loc, dead in c.nodes.values():
        if dead:
            continue
        try:
            with open_node_db(loc) as db:
                if db.state().role is Role.ROOT:
                    root_last = db.last_tick()
                    root_db_loc = loc
        except (CascadeError, OSError):
            continue
    out = []
    for name, (loc, dead) in sorted(c.nodes.items()):
        try:
            with open_node_db(loc) as db:
                st = db.state()
                tables = db.tables()
                merges = db.merge_leaves() if st.role.carries_queue else {}
                switch = db.get_local("switch_tick") if st.role is Role.ROOT else None
                switch_to = db.get_local("switch_to") if switch is not None else None
                served = beat.read(db)
        except (CascadeError, OSError):
            out.append(Member(name, loc, "?", None, 0, None, None, False, dead, False, {}))
            continue
        position = root_last.tick_id if st.role is Role.ROOT and root_last else st.position
        lag_t = lag_s = None
        tick_time = None
        if root_last is not None:
            lag_t = max(0, root_last.tick_id - position)
            lag_s = 0.0
            if root_db_loc is not None:
                with open_node_db(root_db_loc) as rdb:
                    at = rdb.get_tick(position + 1) if lag_t else None
                    mine = rdb.get_tick(position)
                if lag_t:
                    lag_s = round(time.time() - at.time, 3) if at else None
                tick_time = None if mine is None else round(mine.time, 3)
        out.append(
            Member(
                name,
                loc,
                st.role.value,
                st.provider,
                position,
                lag_t,
                lag_s,
                st.paused,
                dead,
                True,
                tables,
                merges=merges,
                combined=st.combined,
                tick_time=tick_time,
                switching_to=switch_to,
                switch_tick=None if switch is None else int(switch),
                service=served,
            )
        )
    return out


def status(c: CascadeSet) -> tuple[str | None, int | None, list[Member]]:
    """(the live root, reachable and not tagged dead, or None; its global watermark; every
    member, as :func:`members`)."""
    found = members(c)
    root = next((m.name for m in found if m.role == Role.ROOT and not m.dead and m.reachable), None)
    watermark = None
    if root is not None:
        watermark = c.state(root).global_watermark
    return root, watermark, found


def check(c: CascadeSet, node: str, table: str | None = None) -> dict[str, Any]:
    """Compare ``node``'s rows with its provider's (row count and checksum, see
    :mod:`baton.cascade.compare`) for each table it replicates, or only ``table``: ``{"node",
    "position", "provider", "provider_position", "equal", "tables"}``. A node behind its
    provider differs until it catches up."""
    results: dict[str, dict[str, Any]] = {}
    with c.db(node) as db:
        st = db.state()
        if st.provider is None:
            raise Refused(f"{node} is the root: it has no provider to compare with")
        if st.merge_leaf:
            raise Refused(
                f"{node} is a merge-leaf: its tables hold every partition's rows, not only its "
                f"provider's; run check on the nodes of the combined set {st.combined} instead"
            )
        mine = db.tables()
        if table is not None and table not in mine:
            raise CascadeInputError(f"{node} does not replicate {table!r} (see 'tables')")
        names = [table] if table is not None else sorted(mine)
        provider = st.provider
        with c.db(provider) as pdb:
            pst = pdb.state()
            theirs = pdb.tables()
            position, provider_position = compare.position(db, st), compare.position(pdb, pst)
            for name in names:
                rows, checksum = compare.digest(db, name)
                entry: dict[str, Any] = {"state": mine[name], "rows": rows}
                if name in theirs:
                    prows, pchecksum = compare.digest(pdb, name)
                    entry |= {"provider_rows": prows,
                              "equal": (rows, checksum) == (prows, pchecksum)}  # fmt: skip
                else:
                    entry |= {"provider_rows": None, "equal": False}
                results[name] = entry
    return {
        "node": node,
        "position": position,
        "provider": provider,
        "provider_position": provider_position,
        "equal": all(r["equal"] for r in results.values()),
        "tables": results,
    }


# -- switchover and failover ------------------------------------------------------------------


def poll(condition: Callable[[], bool], timeout: float) -> None:
    """Wait for ``condition``, checking it every :data:`POLL` seconds; :class:`NotFinished`
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise NotFinished(f"the condition did not hold within {timeout:g}s")
        time.sleep(POLL)


def _promote(db: NodeDB) -> int:
    """Make ``db``'s node the root: capture its tables, no provider. Its tick id sequence goes
    on from the last tick it has; returns that tick (the fork point)."""
    last = db.last_tick()
    fork = last.tick_id if last else 0
    with db.transaction() as cur:
        db.bump_event_ids(cur, last.ev_high if last else 0)
        # The root first: the tables below are captured here from now on, not guarded.
        db.set_local(cur, "role", Role.ROOT.value)
        for table, state in db.tables().items():
            if state in ("ok", "catching-up"):
                db.guard(cur, table, False)
                db.capture(cur, table, True)
                db.set_table(cur, table, "ok", 0)
            # A root applies no batch: nothing of a copy's is left to skip.
            db.set_reflected(cur, table, 0, ())
        db.set_local(cur, "provider", None)
        db.set_local(cur, "root_since", str(fork))
        db.set_local(cur, "position", str(fork))
    return fork


def _demote(db: NodeDB, provider: str, position: int, root: str | None = None) -> None:
    with db.transaction() as cur:
        for table in db.tables():
            db.capture(cur, table, False)
        db.set_local(cur, "role", Role.BRANCH.value)
        db.set_local(cur, "provider", provider)
        for table in db.tables():
            db.guard(cur, table, True, db.guard_message(table, root or provider))
        db.set_local(cur, "position", str(position))


def require_applying(
    c: CascadeSet, node: str, served: Beat | None, then: str, unchanged: str
) -> None:
    """Refuse (:class:`Refused`, one line: what to start, ``then`` what to do, and
    ``unchanged``, what the refusal left as it was) unless ``node``'s worker runs and applies,
    by its last heartbeat ``served``: an operation that waits for it would wait in vain."""
    now = time.time()
    if served is None or served.state(now) is not ServiceState.RUNNING:
        seen = "" if served is None else f", last seen {now - served.at:.0f}s ago"
        raise Refused(
            f"{node}'s worker is not running{seen}: start `baton cascade run "
            f"{redact_url(c.location(node))}` (or its cascade-worker object) and {then}; "
            f"{unchanged}"
        )
    if served.phase is not Phase.APPLYING:
        doing = served.error if served.phase is Phase.WAITING else "starting Spark"
        raise Refused(
            f"{node}'s worker is not applying yet ({doing}): {then} once `baton cascade "
            f"status` shows it applying; {unchanged}"
        )


def served_by(c: CascadeSet, node: str) -> Beat | None:
    """``node``'s last heartbeat (:mod:`baton.cascade.beat`)."""
    with c.db(node) as db:
        return beat.read(db)


#: How many ticks a switchover's target may be behind the root (the old root captures nothing
#: while the target catches up, so writes wait that long).
MAX_BEHIND = 1000


@dataclass(frozen=True, slots=True)
class SwitchPlan:
    """What a switchover to ``new_root`` would do, checked (:func:`switch_plan`)."""

    root: str
    new_root: str
    #: The switch tick of a switchover under way (None: none begun).
    under_way: int | None
    #: Ticks ``new_root`` has to apply before it can take over.
    behind: int
    #: What serves ``new_root`` (None: nothing, and nothing is needed: it applied the switch).
    service: Beat | None
    steps: list[str]


def switch_plan(c: CascadeSet, new_root: str, max_behind: int = MAX_BEHIND) -> SwitchPlan:
    """Check that a switchover to ``new_root`` can finish, before anything changes: it is a
    branch, its worker runs and applies (its heartbeat, :mod:`baton.cascade.beat`), and it is
    at most ``max_behind`` ticks behind the root. :class:`Refused` says what to do when not.
    The plan lists the steps the switchover takes."""
    root = _find_root(c)
    if root == new_root:
        return SwitchPlan(root, new_root, None, 0, None, [f"{new_root} is already the root"])
    with c.db(new_root) as ndb:
        nst = ndb.state()
        served = beat.read(ndb)
    if nst.role is not Role.BRANCH:
        raise Refused(f"{new_root} is a {nst.role}: only a branch can become the root")
    with c.db(root) as rdb:
        under_way = rdb.get_local("switch_tick")
        last = rdb.last_tick()
        tables = sorted(rdb.tables())
    goal = int(under_way) if under_way is not None else (last.tick_id if last else 0)
    behind = max(0, goal - nst.position)
    if under_way is None or behind:
        # Something has to apply the ticks that remain and the switch tick: a live worker,
        # applying now (a switch under way whose tick it applied only has to be finished).
        require_applying(
            c,
            new_root,
            served,
            "run the switchover again",
            "nothing was changed"
            if under_way is None
            else f"the switchover begun at tick {under_way} is still under way ({root} "
            "refuses writes until it finishes)",
        )
        if under_way is None and behind > max_behind:
            raise Refused(
                f"{new_root} is {behind} ticks behind {root} (at most {max_behind}): wait "
                "until it catches up, or give a larger --max-behind; nothing was changed"
            )
    steps = []
    if under_way is None:
        steps.append(
            f"{root} stops capturing {', '.join(tables) or 'its tables'} and makes the switch "
            f"tick; from then on writes at {root} are refused (move writers to {new_root})"
        )
    else:
        steps.append(f"the switchover to {new_root} begun at tick {under_way} goes on")
    steps += [
        f"{new_root} applies the {behind} tick(s) it lacks, then the switch tick"
        if under_way is None
        else f"{new_root} applies the {behind} tick(s) it lacks up to the switch tick",
        f"{new_root} becomes the root; {root} becomes its branch",
    ]
    return SwitchPlan(root, new_root, None if under_way is None else int(under_way), behind,
                      served, steps)  # fmt: skip


def switchover(
    c: CascadeSet,
    new_root: str,
    wait: Callable[[Callable[[], bool], float], None] = poll,
    timeout: float = 60.0,
    max_behind: int = MAX_BEHIND,
) -> int:
    """Planned: ``new_root`` (a branch) becomes the root and the old root its branch, with no
    event lost or applied twice. The old root stops capturing and makes a last tick in one
    transaction; once ``new_root`` has applied that tick it is promoted. Writers must move to the
    new root: the old root refuses direct writes from the switch on (they would not be
    captured). Returns the
    switch tick. ``wait(condition, timeout)`` waits for ``new_root`` to apply the switch tick;
    when it raises :class:`NotFinished` (as :func:`poll` does), so does this, saying what to do
    (the old root no longer captures: run it again)."""
    root = _find_root(c)
    if root == new_root:
        return _root_since(c, new_root)
    switch_plan(c, new_root, max_behind)  # refuses, changing nothing, a switch that would stall
    with c.db(root) as rdb:
        last_t = rdb.get_local("switch_tick")
        if last_t is None:
            with rdb.transaction() as cur:
                for table in rdb.tables():
                    rdb.capture(cur, table, False)
                    # Not captured from here on: a write here would be lost (issue 28).
                    rdb.guard(
                        cur, table, True,
                        f"baton: {table} at {root} is no longer captured: a switchover to "
                        f"{new_root} is under way; write it at {new_root}",
                    )  # fmt: skip
                tick = rdb.make_tick(cur)
                assert tick is not None
                rdb.set_local(cur, "switch_tick", str(tick.tick_id))
                rdb.set_local(cur, "switch_to", new_root)
            last_t = str(tick.tick_id)
    switch = int(last_t)

    def applied() -> bool:
        return c.state(new_root).position >= switch

    try:
        wait(applied, timeout)
    except NotFinished:
        raise NotFinished(
            f"switchover to {new_root} not finished: it did not apply switch tick {switch} "
            f"within {timeout:g}s (is its worker running?); {root} no longer captures changes: "
            "run the same switchover again to finish it"
        ) from None
    with c.db(root) as rdb:
        # What the old root's subtree still needs (its subscribers' marks include theirs; a
        # slow leaf below may be far behind the switch tick).
        below = min([switch, *(m for n, m in rdb.watermarks().items() if n != new_root)])
        stray = list(rdb.events_after(switch))
        if any(e.type != WATERMARK for e in stray):
            raise Refused(
                f"{root} has {len(stray)} events after the switch tick {switch}: capture did "
                "not stop; nothing was switched"
            )
        with rdb.transaction() as cur:
            rdb.discard_after(cur, switch)  # only our own watermark events, never data
    with c.db(new_root) as ndb:
        if ndb.state().role is not Role.ROOT:
            # Hold the queue for the old root first: the moment the new root ticks it may
            # publish a watermark, and it must not run ahead of the nodes below the old root.
            with ndb.transaction() as cur:
                ndb.set_watermark(cur, root, below)
            _promote(ndb)
    with c.db(root) as rdb:
        _demote(rdb, new_root, switch)
        with rdb.transaction() as cur:
            rdb.set_local(cur, "switch_tick", None)
            rdb.set_local(cur, "switch_to", None)
    with c.db(new_root) as ndb, ndb.transaction() as cur:
        # The new root pulls the old root's real mark from now on; until then, hold the queue
        # down to what the old root's subtree needed.
        ndb.set_watermark(cur, root, below)
        ndb.drop_subscriber(cur, new_root)
    with c.db(root) as rdb, rdb.transaction() as cur:
        rdb.drop_subscriber(cur, new_root)
    return switch


def failover(c: CascadeSet, dead_root: str) -> tuple[str, int, list[str]]:
    """Unplanned: ``dead_root`` is gone. Tag it dead, promote the live queue-carrying node with
    the highest tick, and redirect every node that received from the dead root to the new root.
    Returns (new root, fork tick, notes about nodes that need attention).

    Refused, before anything is tagged, when no live branch carries the queue; and while
    ``dead_root`` is not tagged dead yet (a failover tags first), when it is reachable and not
    the root or another live root exists: use tag-dead for a node that is not the root. Once it
    is tagged, a re-run finishes the failover (or returns the new root if it is done)."""
    c.location(dead_root)  # an unknown name is refused before anything changes
    try:
        role: Role | None = c.state(dead_root).role
    except CascadeError:
        role = None  # unreachable, as a dead root usually is, or not a node any more
    if not c.dead(dead_root):
        if role is not None and role is not Role.ROOT:
            raise Refused(f"{dead_root} is a {role}, not the root: use tag-dead for it")
        other = live_root(c, exclude=dead_root)
        if other is not None:
            raise Refused(f"{dead_root} is not the root ({other} is): use tag-dead for it")
    elif role is not None and role is not Role.ROOT:
        raise Refused(f"{dead_root} is not the root: failover replaces a root")
    notes: list[str] = []
    done = live_root(c, exclude=dead_root)
    if done is not None:
        return done, _root_since(c, done), notes  # already failed over
    new_root = decide.new_root(_carriers(c, dead_root), dead_root)
    if new_root is None:
        raise Refused("no live branch carries the queue: nothing can become the root")
    tag(c, dead_root, True)
    was_under = c.state(new_root).provider
    # Fence first: from here no node applies another batch of the dead root (whose database
    # may still be readable, or come back). apply_batch refuses a batch from a provider that
    # is no longer the node's, in the transaction that would apply it.
    _fence_from(c, dead_root, new_root)
    ahead = decide.furthest(_carriers(c, dead_root), dead_root)
    if ahead is not None and ahead != new_root:
        # Another node got further from the dead root: bring the new root up to it first, so
        # no node has ticks the new root lacks (nothing rewound, nothing applied twice).
        catch_up(c, new_root, ahead)
    with c.db(new_root) as db:
        fork = _promote(db)
    if was_under not in (None, dead_root) and not c.dead(was_under):
        # The new root received from another branch: that one no longer holds its queue for
        # it (it receives from the new root now, or will).
        with suppress(CascadeError, OSError), c.db(was_under) as pdb, pdb.transaction() as cur:
            pdb.drop_subscriber(cur, new_root)
    _bury_merge_leaves(c, new_root, dead_root)
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == new_root:
            continue
        try:
            with open_node_db(loc) as db:
                st = db.state()
        except (CascadeError, OSError):
            notes.append(f"{name}: unreachable, redirect it later with change-provider")
            continue
        if st.position > fork:
            # It applied ticks the set lost with the root (a leaf, which has no queue to
            # catch the new root up from): its tables may differ from the new root's for the
            # keys those ticks changed. Continue from the fork (dropping the lost ticks from
            # its queue: the new root's ticks after the fork are other ones).
            with open_node_db(loc) as db, db.transaction() as cur:
                if st.role.carries_queue:
                    db.discard_after(cur, fork)
                db.set_local(cur, "position", str(fork))
                db.set_local(cur, "provider", new_root)
            with c.db(new_root) as ndb, ndb.transaction() as cur:
                ndb.set_watermark(cur, name, fork)
            notes.append(
                f"{name}: had applied up to tick {st.position} (> {fork}); rewound to {fork}, "
                "run 'check' and repair the differences"
            )
        elif st.provider == new_root:
            # Fenced onto the new root above: hold the new root's queue for it.
            with c.db(new_root) as ndb, ndb.transaction() as cur:
                ndb.set_watermark(cur, name, st.position)
    _release_dead(c, dead_root)
    return new_root, fork, notes


def _carriers(c: CascadeSet, dead_root: str) -> dict[str, decide.Seen]:
    """Every live member but ``dead_root``, as a failover reads it."""
    return {name: _seen(c, name) for name, (_, dead) in sorted(c.nodes.items()) if not dead}


def _fence_from(c: CascadeSet, dead_root: str, new_root: str) -> None:
    """Every reachable node receiving from ``dead_root`` now receives from ``new_root``, and
    ``new_root`` from no one (it is promoted next): their workers stop applying the dead
    root's batches at once, so the failover sees positions that no longer move."""
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == dead_root:
            continue
        try:
            with open_node_db(loc) as db:
                st = db.state()
                if st.provider != dead_root:
                    continue
                with db.transaction() as cur:
                    db.set_local(cur, "provider", None if name == new_root else new_root)
        except (CascadeError, OSError):
            continue  # unreachable: the failover's notes say so


def catch_up(c: CascadeSet, node: str, source: str) -> int:
    """Apply to branch ``node``, in one batch, every tick ``source`` (a node that carries the
    same queue further) has after ``node``'s position, as its worker would; the new position.
    A failover uses it before promoting ``node``."""
    # Imported here: the apply step's queue-event handlers use the set operations.
    from baton.cascade.apply import apply_batch
    from baton.cascade.batches import reduce_events

    with c.db(node) as db:
        st = db.state()
        with open_node_db(c.location(source), readonly=True) as src:
            last = src.last_tick()
            if last is None or last.tick_id <= st.position:
                return st.position
            ticks = src.ticks(st.position, last.tick_id)
            events = list(src.batch_events(st.position, last.tick_id))
        result = apply_batch(db, ticks, reduce_events(events), events, st.epoch)
    return result.position


def _bury_merge_leaves(c: CascadeSet, new_root: str, dead_root: str) -> None:
    """The dead combined root's merge-leaves, tagged dead in their partition sets (found
    through the new root's merge-leaves): they no longer hold their partitions' queues."""
    dead_base = split_location(c.location(dead_root))[0]
    with c.db(new_root) as db:
        parts = sorted(db.merge_leaves())
    for part in parts:
        pc = CascadeSet(f"{c.location(new_root)}#{part}")
        for name, (loc, dead) in sorted(pc.nodes.items()):
            if not dead and split_location(loc)[0] == dead_base:
                tag(pc, name, True)


def resurrect(c: CascadeSet, old_root: str, out: Path) -> int:
    """An old root came back after a failover. Its events after the fork point never reached
    the set: write them to ``out`` (JSON lines), drop its ticks after the fork, and make it a
    branch of the current root. The keys those events touched are copied again from the new
    root as the node catches up (full row images). Returns the number of events saved."""
    new_root = _find_root(c, exclude=old_root)
    fork = _root_since(c, new_root)
    location = c.location(old_root)
    with open_node_db(location) as db:
        st = db.state()
        if st.role is not Role.ROOT:
            if st.provider == new_root:
                return 0  # done before
            raise Refused(f"{old_root} is a {st.role}, not an old root")
        # Stop capturing first: every event to save is then in the queue, and the repair
        # below is not captured as new events.
        with db.transaction() as cur:
            for table in db.tables():
                db.capture(cur, table, False)
                db.guard(cur, table, True, db.guard_message(table, new_root))
        # The old root's own watermark events are bookkeeping, not changes: nothing is lost
        # with them (the set's watermark moves on without them).
        lost = [e for e in db.events_after(fork) if e.type != WATERMARK]
        if lost:  # a re-run after the discard finds none and keeps the file
            with out.open("w") as f:
                for e in lost:
                    f.write(json.dumps(_event_dict(e)) + "\n")
        touched: dict[str, set[str]] = {}
        for e in lost:
            if e.table is not None and e.key is not None and e.table in db.tables():
                touched.setdefault(e.table, set()).add(e.key)
        with open_node_db(c.location(new_root)) as ndb:
            # Hold the set's queue at the fork first, so it cannot be trimmed while we work.
            base = ndb.get_tick(fork) or ndb.last_tick()
            with ndb.transaction() as cur:
                ndb.set_watermark(cur, old_root, base.tick_id if base else fork)
            if ndb.get_tick(fork) is None:
                # The set trimmed its queue past the fork meanwhile: rejoin with a full copy
                # of the tables instead of a catch-up.
                _rejoin_by_copy(db, ndb, new_root)
                resumed = True
            else:
                fresh = {t: _current_rows(ndb, t, keys) for t, keys in touched.items()}
                resumed = False
        if not resumed:
            with db.transaction() as cur:
                db.discard_after(cur, fork)
                db.set_local(cur, "switch_tick", None)
                db.set_local(cur, "switch_to", None)
                # Undo what the lost events did: those keys get the set's current rows (the
                # catch-up from the fork then replays the set's own changes to them in order).
                for table, (cols, pk, keys, rows) in fresh.items():
                    db.delete_keys(cur, table, pk, keys)
                    db.upsert(cur, table, cols, rows)
            _demote(db, new_root, fork)
    tag(c, old_root, False)
    _prune_subscribers(c, old_root)
    with open_node_db(location) as db:
        position = db.state().position
    with open_node_db(c.location(new_root)) as ndb, ndb.transaction() as cur:
        ndb.set_watermark(cur, old_root, position)
    return len(lost)


def _rejoin_by_copy(db: NodeDB, root: NodeDB, root_name: str) -> None:
    """Make ``db`` a branch of ``root`` from ``root``'s latest tick T: every replicated table
    copied (rows read after T was noted, so they are at T or later, with the events after T
    they already show, which the catch-up from T skips as after
    :func:`~baton.cascade.node_ops.copy_table`), the queue restarted at T."""
    base = root.last_tick()
    assert base is not None
    copies = {}
    whole = {t for t, state in root.tables().items() if state == "ok"}
    for table in db.tables():
        if table in whole:  # else copied by the node's worker once the root has it whole
            copies[table] = root.read_copy(table, base.tick_id)
    with db.transaction() as cur:
        db.discard_after(cur, 0)
        db.copy_batch(cur, [], [base])
        db.set_local(cur, "switch_tick", None)
        db.set_local(cur, "switch_to", None)
        for table, copy in copies.items():
            _, pk = db.columns(table)
            old = db.read_rows(table)
            mine, _ = db.columns(table)
            db.delete_keys(cur, table, pk, [[r[mine.index(k)] for k in pk] for r in old])
            db.upsert(cur, table, copy.columns, copy.rows)
            db.set_reflected(cur, table, copy.upto, copy.reflected)
            # Position T: caught up once past the events the copy shows.
            db.set_table(cur, table, "catching-up" if copy.reflected else "ok", base.tick_id)
        for table in set(db.tables()) - set(copies):
            db.set_table(cur, table, "copying", 0)
    _demote(db, root_name, base.tick_id)


def _current_rows(
    db: NodeDB, table: str, keys: set[str]
) -> tuple[list[str], list[str], list[list[object]], list[tuple[object, ...]]]:
    cols, pk = db.columns(table)
    key_values = [[decode(k)[c] for c in pk] for k in sorted(keys)]
    return cols, pk, key_values, db.read_keys(table, pk, key_values)


def _event_dict(e: object) -> dict[str, object]:
    fields = ("ev_id", "time", "type", "table", "key", "data", "txid", "tick")
    return {f: getattr(e, f) for f in fields}


def live_root(c: CascadeSet, exclude: str | None = None) -> str | None:
    """The reachable member, not tagged dead (nor ``exclude``), that is a root, if any."""
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == exclude:
            continue
        try:
            with open_node_db(loc) as db:
                if db.state().role is Role.ROOT:
                    return name
        except (CascadeError, OSError):
            continue  # unreachable: it cannot be the live root we are looking for
    return None


def _find_root(c: CascadeSet, exclude: str | None = None) -> str:
    root = live_root(c, exclude)
    if root is None:
        raise Refused("no live root in the set: use failover")
    return root


def _root_since(c: CascadeSet, root: str) -> int:
    with c.db(root) as db:
        return int(db.get_local("root_since") or 0)


# -- queue-only nodes (issue 16) -------------------------------------------------------------


def without_tables(c: CascadeSet, states: dict[str, NodeState]) -> dict[str, str]:
    """The nodes of ``states`` that cannot replicate a table now, with why: queue-only nodes
    (they keep only the queue) and the nodes below one (their provider has no table to give
    them an initial copy of: move them with change-provider first)."""
    held: dict[str, str] = {}
    for name in subscription_order(states):
        with c.db(name) as db:
            if node_ops.is_queue_only(db):
                held[name] = "queue-only: it keeps only the queue"
                continue
        provider = states[name].provider
        if provider is not None and provider in held:
            held[name] = (
                f"its provider {provider} replicates no tables: move it with change-provider"
            )
    return held


__all__ = [
    "POLL",
    "CascadeSet",
    "Member",
    "TickerConfig",
    "add_table",
    "candidates",
    "change_provider",
    "check",
    "emit",
    "failover",
    "live_root",
    "live_states",
    "members",
    "missing",
    "poll",
    "refusing",
    "remove_table",
    "resurrect",
    "set_paused",
    "status",
    "subscription_order",
    "switchover",
    "tables",
    "tag",
    "without_tables",
]
