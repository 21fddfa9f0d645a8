"""Set-level operations on the members: add-table (on a node or on all), remove-table, tables,
missing, emit, change-provider, candidates, tag-dead/tag-alive, pause/resume; and the set as
the others see it (:class:`CascadeSet`, found through any member's node list). A status is in
:mod:`~baton.cascade.observe`, a switchover in :mod:`~baton.cascade.handover`, a failover and
resurrect in :mod:`~baton.cascade.takeover`; what they decide, in :mod:`~baton.cascade.decide`.

Every operation is resumable: it checks each step's effect before doing it, so running it again
after an interruption finishes the job. Bad input (an unknown node, a dead provider, a cycle, a
provider without the ticks a node needs) is refused before anything is written.

A node is found by name through the node list of any member (``via``: a location), because the
node list is the only data every node holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from baton.cascade import decide, node_ops
from baton.cascade.db import NodeDB, open_node_db
from baton.cascade.model import PAUSE_MARK, NodeState, Role
from baton.cascade.ticker import TickerConfig
from baton.errors import (
    CascadeError,
    CascadeInputError,
    NodeDatabaseError,
    NotFinished,
    Refused,
    StaleEpoch,
)


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
        return decide.chain(name, States(self))

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


class States(Mapping[str, NodeState]):
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
    root = find_root(c)
    return node_ops.emit(c.location(root), type_, data), root


# -- provider changes --------------------------------------------------------------------


def candidates(c: CascadeSet, node: str) -> list[str]:
    """The nodes that can be ``node``'s provider now: they carry the queue, are not dead, are
    not ``node`` or below it (no cycle), and still have the tick ``node`` is at. Refused for
    the root."""
    st = c.state(node)
    _not_root(node, st)
    seen = {name: seen_of(c, name, st.position) for name in c.nodes}
    return decide.candidates(node, seen)


def seen_of(c: CascadeSet, name: str, position: int | None = None) -> decide.Seen:
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
    seen = seen_of(c, provider, position)
    problem = decide.provider_problem(node, seen, States(c))
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
        release_dead(c, old)


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


def prune_subscribers(c: CascadeSet, node: str) -> None:
    """Drop ``node``'s watermark entries for nodes that no longer receive from it (an old root
    keeps its former subscribers' entries, which would pin the watermark for ever)."""
    current = set(_subscribers_of(c, node))
    with c.db(node) as db:
        stale = [name for name in db.watermarks() if name not in current]
        if stale:
            with db.transaction() as cur:
                for name in stale:
                    db.drop_subscriber(cur, name)


def release_dead(c: CascadeSet, node: str) -> None:
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
        release_dead(c, node)
    return missed


def set_paused(c: CascadeSet, node: str, paused: bool) -> None:
    """Pause (or resume) ``node``'s worker: it applies nothing while paused. An operator's
    pause or resume takes the node over from a compare or repair that paused it (a later run
    then refuses rather than resuming a pause that is no longer its own)."""
    with c.db(node) as db, db.transaction() as cur:
        db.set_local(cur, "paused", "1" if paused else "0")
        db.set_local(cur, PAUSE_MARK, None)


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


def find_root(c: CascadeSet, exclude: str | None = None) -> str:
    root = live_root(c, exclude)
    if root is None:
        raise Refused("no live root in the set: use failover")
    return root


def root_since(c: CascadeSet, root: str) -> int:
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
    "CascadeSet",
    "States",
    "TickerConfig",
    "add_table",
    "candidates",
    "change_provider",
    "emit",
    "find_root",
    "live_root",
    "live_states",
    "missing",
    "refusing",
    "release_dead",
    "remove_table",
    "root_since",
    "seen_of",
    "set_paused",
    "subscription_order",
    "tables",
    "tag",
    "without_tables",
]
