"""``baton cascade ...``: build and operate a cascade set (Londiste 3 style) from the command line.

The commands work on the node databases directly: no node agent or worker needs to run, except
that a switchover waits for the new root's worker to apply the switch tick. A set is found
through ``--via LOCATION`` (any member's location, or ``BATON_CASCADE``) because the node list is
the one thing every member holds.

Every command is resumable (running it again after an interruption finishes the job, and running
it again after it finished changes nothing), and bad input is refused as one line on stderr with
exit status 2 before anything is written; a node database that cannot be reached is exit 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import click
from rich.console import Console
from rich.table import Table

from baton.cascade import manage, ops
from baton.cascade.model import ROW_TYPES, NodeState, Role
from baton.cascade.nodedb import CascadeError, NodeDB, open_node_db
from baton.cli.common import EXIT_STORE, EXIT_USAGE, fail
from baton.errors import ConfigError, redact_url

P = ParamSpec("P")
R = TypeVar("R")

#: How often a switchover checks whether the new root has applied the switch tick.
POLL = 0.1


# -- errors ------------------------------------------------------------------------------------


def _is_driver_error(exc: BaseException) -> bool:
    """An error of the operating system or a database driver (psycopg is matched by module so
    that SQLite-only commands never import it)."""
    if isinstance(exc, OSError | sqlite3.Error):
        return True
    return any(k.__module__.split(".")[0] == "psycopg" for k in type(exc).__mro__)


def _unreachable(exc: CascadeError) -> bool:
    """Whether a CascadeError wraps a failure to reach a database (exit 1) rather than bad
    input (exit 2). The node database raises ``from None``, which hides the driver error from
    tracebacks but keeps it as ``__context__``. Only connection-class errors count: a SQLite
    'no such table' (a file that is not a node) is bad input."""
    ctx = exc.__context__
    if isinstance(ctx, OSError):
        return True
    return ctx is not None and any(
        k.__name__ == "OperationalError" and k.__module__.split(".")[0] == "psycopg"
        for k in type(ctx).__mro__
    )


def _handled(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn cascade and driver errors raised by a command into one line on stderr."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except CascadeError as exc:
            fail(str(exc), EXIT_STORE if _unreachable(exc) else EXIT_USAGE)
        except ConfigError as exc:
            fail(str(exc), EXIT_USAGE)
        except Exception as exc:
            if not _is_driver_error(exc):
                raise  # a bug: main() reports it as an internal error
            if isinstance(exc, OSError) and exc.strerror:
                where = f"{exc.filename}: " if exc.filename else ""
                fail(f"{where}{exc.strerror}", EXIT_STORE)
            # Driver messages may quote a URL: never show its password.
            fail(redact_url(f"node database error: {type(exc).__name__}: {exc}"), EXIT_STORE)

    return run


# -- locations and the set -----------------------------------------------------------------------


def _normalise(location: str) -> str:
    """An SQLite location with an absolute path: the location is stored in every node list and
    used by workers started elsewhere, so a path relative to this shell's directory would not
    find the node from anywhere else."""
    path = location.removeprefix("sqlite://")
    if location.startswith("sqlite://") and path and not path.startswith("/"):
        return f"sqlite://{Path(path).absolute()}"
    return location


def _existing(location: str) -> str:
    """``location`` normalised, refusing an SQLite file that does not exist: opening it would
    create an empty database, and a mistyped path must change nothing."""
    location = _normalise(location)
    if location.startswith("sqlite://"):
        path = Path(location.removeprefix("sqlite://"))
        if path.parent.is_dir() and not path.exists():
            raise CascadeError(f"{location}: no such node database (the file does not exist)")
    return location


def _open_set(via: str | None) -> manage.Cascade:
    """The set seen through the node list at ``via``."""
    if not via:
        raise click.UsageError("no set given: use --via LOCATION (any member) or BATON_CASCADE")
    location = _existing(via)
    with open_node_db(location) as db:
        db.state()  # "not a cascade node" before reading a node list that is not there
    return manage.Cascade(location)


def _installed(location: str) -> NodeState | None:
    """The state of the node at ``location``, or None when it is not one yet (without creating
    an SQLite file that does not exist)."""
    if location.startswith("sqlite://") and not Path(location.removeprefix("sqlite://")).exists():
        return None
    with open_node_db(location) as db:
        return db.state() if db.is_installed() else None


def _states(c: manage.Cascade) -> dict[str, NodeState]:
    """The state of every member not tagged dead."""
    out = {}
    for name, (_, dead) in sorted(c.nodes.items()):
        if dead:
            continue
        with c.db(name) as db:
            out[name] = db.state()
    return out


def _subscription_order(states: dict[str, NodeState]) -> list[str]:
    """Roots first, then every node after its provider (breadth first); nodes whose provider is
    not among ``states`` (tagged dead, or a cycle) come last."""
    order = [n for n, st in states.items() if st.role is Role.ROOT]
    i = 0
    while i < len(order):
        order += [n for n, st in states.items() if st.provider == order[i] and n not in order]
        i += 1
    return order + [n for n in states if n not in order]


def _echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))


via_option = click.option(
    "--via",
    envvar="BATON_CASCADE",
    metavar="LOCATION",
    help="Any member's location (finds the set's node list); env BATON_CASCADE.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("cascade")
def cascade() -> None:
    """Build and operate a cascade set: nodes, tables, providers, switchover, failover."""


# -- creating nodes ------------------------------------------------------------------------------


@cascade.command("create-root")
@click.argument("name")
@click.argument("location")
@click.option("--set", "set_name", required=True, metavar="SET", help="Name of the new set.")
@_handled
def create_root(name: str, location: str, set_name: str) -> None:
    """Make the database at LOCATION the root NAME of a new set SET."""
    ops.check_name(name)
    ops.check_name(set_name)  # both before the database is opened (which may create a file)
    location = _normalise(location)
    before = _installed(location)
    ops.create_root(name, location, set_name)
    done = " (already done)" if before is not None else ""
    click.echo(f"{name}: root of set {set_name} at {redact_url(location)}{done}")


def _create_subscriber(
    role: Role, name: str, location: str, provider: str, via: str | None
) -> None:
    ops.check_name(name)
    c = _open_set(via)
    location = _normalise(location)
    before = _installed(location)
    # ops.create_subscriber treats any re-run on the same node as done, and would register a
    # watermark at a provider the node does not receive from (holding its queue back forever):
    # a re-run must name the same role and provider.
    same_node = before is not None and (before.name, before.set_name) == (name, c.set_name)
    if before is not None and same_node and (before.role, before.provider) != (role, provider):
        raise CascadeError(
            f"{location} is already node {name}, a {before.role} of {before.provider}: "
            "use change-provider to move it"
        )
    ops.create_subscriber(role, name, location, provider, c.via)
    with open_node_db(location) as db:
        st = db.state()
    done = " (already done)" if before is not None else ""
    click.echo(
        f"{name}: {role} of {provider} in set {st.set_name} at {redact_url(location)}, "
        f"from tick {st.position}{done}"
    )


_provider_option = click.option(
    "--provider", required=True, metavar="NODE", help="The node it receives events from."
)


@cascade.command("create-branch")
@click.argument("name")
@click.argument("location")
@_provider_option
@via_option
@_handled
def create_branch(name: str, location: str, provider: str, via: str | None) -> None:
    """Add branch NAME at LOCATION (keeps the queue: it can provide others)."""
    _create_subscriber(Role.BRANCH, name, location, provider, via)


@cascade.command("create-leaf")
@click.argument("name")
@click.argument("location")
@_provider_option
@via_option
@_handled
def create_leaf(name: str, location: str, provider: str, via: str | None) -> None:
    """Add leaf NAME at LOCATION (applies tables only; provides no one)."""
    _create_subscriber(Role.LEAF, name, location, provider, via)


# -- tables ------------------------------------------------------------------------------------


def _check_table_everywhere(c: manage.Cascade, states: dict[str, NodeState], table: str) -> None:
    """Refuse ``add-table --all`` before anything is written if any live node lacks ``table``,
    it has no primary key, its columns differ from the root's, or a node's provider is dead."""
    shape: tuple[list[str], list[str]] | None = None
    for name in _subscription_order(states):
        st = states[name]
        if st.provider is not None and st.provider not in states:
            raise CascadeError(
                f"{name}'s provider {st.provider} is tagged dead: change its provider first"
            )
        with c.db(name) as db:
            try:
                cols, pk = db.columns(table)
            except CascadeError as exc:
                raise CascadeError(f"{name}: {exc}") from None
        if not pk:
            raise CascadeError(f"table {table!r} has no primary key on {name}: add one first")
        if shape is None:
            shape = (cols, pk)
        elif (sorted(cols), pk) != (sorted(shape[0]), shape[1]):
            raise CascadeError(
                f"{table}: columns {cols} (key {pk}) on {name} differ from {shape[0]} "
                f"(key {shape[1]}) on the root"
            )


@cascade.command("add-table")
@click.argument("table")
@click.option("--node", metavar="NODE", help="The node to add it on.")
@click.option("--all", "everywhere", is_flag=True, help="Every live node, root first.")
@via_option
@_handled
def add_table(table: str, node: str | None, everywhere: bool, via: str | None) -> None:
    """Replicate TABLE on NODE: the root captures it; elsewhere it is registered as copying and
    the node's worker copies it from the provider with Spark, then catches up."""
    if (node is None) == (not everywhere):
        raise click.UsageError("give either --node NODE or --all")
    c = _open_set(via)
    if node is not None:
        names = [node]
        c.location(node)
    else:
        states = _states(c)
        _check_table_everywhere(c, states, table)
        names = _subscription_order(states)
    for name in names:
        state = ops.add_table(c.location(name), table)
        hint = " (the node's worker copies it with Spark)" if state == "copying" else ""
        click.echo(f"{name}: {table} {state}{hint}")
    if everywhere:
        for name in sorted(n for n in c.nodes if c.dead(n)):
            click.echo(f"{name}: skipped (tagged dead)")


@cascade.command("remove-table")
@click.argument("table")
@click.option("--node", required=True, metavar="NODE", help="The node to remove it from.")
@via_option
@_handled
def remove_table(table: str, node: str, via: str | None) -> None:
    """Stop replicating TABLE on NODE (its rows stay). At the root, stop capturing it: remove
    it from every other node first."""
    c = _open_set(via)
    with c.db(node) as db:
        st = db.state()
        if table not in db.tables():
            db.columns(table)  # a table that does not exist is a typo, not a finished job
            click.echo(f"{node}: {table} is not replicated (nothing to do)")
            return
        if st.role is Role.ROOT:
            # The other nodes would silently stop receiving its changes.
            others = [
                name
                for name in sorted(c.nodes)
                if name != node and not c.dead(name) and table in _tables_of(c, name)
            ]
            if others:
                raise CascadeError(
                    f"{table} is still replicated by {', '.join(others)}: remove it there first "
                    "(the root stops capturing it)"
                )
        with db.transaction() as cur:
            if st.role is Role.ROOT:
                # A table dropped since took its capture triggers with it.
                with contextlib.suppress(CascadeError):
                    db.capture(cur, table, False)
            db.set_table(cur, table, None)
    click.echo(
        f"{node}: {table} removed" + (" (no longer captured)" if st.role is Role.ROOT else "")
    )


def _tables_of(c: manage.Cascade, name: str) -> dict[str, str]:
    with c.db(name) as db:
        return db.tables()


@cascade.command("tables")
@click.option("--node", required=True, metavar="NODE")
@via_option
@json_option
@_handled
def tables(node: str, via: str | None, as_json: bool) -> None:
    """The tables NODE replicates and their state (copying, catching-up, ok)."""
    found = _tables_of(_open_set(via), node)
    if as_json:
        _echo_json(found)
        return
    out = Table("table", "state", title=f"tables of {node}")
    for name, state in found.items():
        out.add_row(name, state)
    Console().print(out)


@cascade.command("missing")
@click.option("--node", required=True, metavar="NODE")
@via_option
@json_option
@_handled
def missing(node: str, via: str | None, as_json: bool) -> None:
    """Tables NODE's provider replicates that NODE does not (candidates for add-table)."""
    c = _open_set(via)
    with c.db(node) as db:
        st = db.state()
        mine = db.tables()
    if st.provider is None:
        names: list[str] = []
        note = f"{node} is the root: it has no provider"
    else:
        names = sorted(set(_tables_of(c, st.provider)) - set(mine))
        note = f"none: {node} replicates every table {st.provider} does"
    if as_json:
        _echo_json(names)
    elif names:
        click.echo("\n".join(names))
    else:
        click.echo(note)


# -- events ------------------------------------------------------------------------------------


@cascade.command("emit")
@click.argument("type_", metavar="TYPE")
@click.option("--data", default="{}", show_default=True, metavar="JSON", help="A JSON object.")
@via_option
@_handled
def emit(type_: str, data: str, via: str | None) -> None:
    """Add a custom event of TYPE at the root; every node carries it in its queue."""
    if not type_ or type_ in ROW_TYPES or type_.startswith("baton."):
        # Row types would be applied as row changes without a table, and baton.* types are
        # the set's own (watermark, ticks).
        raise CascadeError(
            f"bad event type {type_!r}: I, U, D and baton.* are reserved, use your own name"
        )
    try:
        payload = json.loads(data)
    except json.JSONDecodeError as exc:
        raise CascadeError(f"--data is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise CascadeError(f"--data must be a JSON object, not {type(payload).__name__}")
    c = _open_set(via)
    root = manage.live_root(c)
    if root is None:
        raise CascadeError("no live root in the set: use failover")
    ev_id = ops.emit(c.location(root), type_, payload)
    click.echo(f"event {ev_id} ({type_}) added at root {root}; it travels with the next tick")


# -- providers, tags, pause ----------------------------------------------------------------------


@cascade.command("change-provider")
@click.argument("node")
@click.option("--provider", required=True, metavar="NODE", help="The new provider.")
@via_option
@_handled
def change_provider(node: str, provider: str, via: str | None) -> None:
    """Make NODE receive from PROVIDER (see candidates); its worker follows at once."""
    c = _open_set(via)
    manage.change_provider(c, node, provider)
    click.echo(f"{node}: receives from {provider}")


@cascade.command("candidates")
@click.argument("node")
@via_option
@json_option
@_handled
def candidates(node: str, via: str | None, as_json: bool) -> None:
    """The nodes that can be NODE's provider now (no cycle, alive, still have its tick)."""
    c = _open_set(via)
    with c.db(node) as db:
        if db.state().role is Role.ROOT:
            raise CascadeError(f"{node} is the root: it has no provider (use switchover)")
    found = manage.candidates(c, node)
    if as_json:
        _echo_json(found)
    else:
        click.echo("\n".join(found) if found else f"none: no node can provide {node} now")


def _tag(node: str, via: str | None, dead: bool) -> None:
    c = _open_set(via)
    missed = [n for n in manage.tag(c, node, dead) if n != node]
    click.echo(f"{node}: tagged {'dead' if dead else 'alive'}")
    if missed:
        # Tagging is idempotent: running it again later reaches them.
        click.echo(f"not reached: {', '.join(missed)} (run this again when they are back)")


@cascade.command("tag-dead")
@click.argument("node")
@via_option
@_handled
def tag_dead(node: str, via: str | None) -> None:
    """Tag NODE dead: it is no provider candidate and stops holding the queue back."""
    _tag(node, via, True)


@cascade.command("tag-alive")
@click.argument("node")
@via_option
@_handled
def tag_alive(node: str, via: str | None) -> None:
    """Tag NODE alive again."""
    _tag(node, via, False)


@cascade.command("pause")
@click.argument("node")
@via_option
@_handled
def pause(node: str, via: str | None) -> None:
    """Pause NODE's worker: it applies nothing until resume."""
    manage.set_paused(_open_set(via), node, True)
    click.echo(f"{node}: paused")


@cascade.command("resume")
@click.argument("node")
@via_option
@_handled
def resume(node: str, via: str | None) -> None:
    """Resume NODE's worker."""
    manage.set_paused(_open_set(via), node, False)
    click.echo(f"{node}: resumed")


# -- switchover, failover, resurrect ------------------------------------------------------------


class _WaitTimeout(Exception):
    """The switchover's condition did not hold within the timeout."""


def _poll(condition: Callable[[], bool], timeout: float) -> None:
    """Wait for ``condition``, checking it every :data:`POLL` seconds, until ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise _WaitTimeout
        time.sleep(POLL)


@cascade.command("switchover")
@click.argument("new_root")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds to wait for NEW_ROOT to apply the switch tick.",
)
@via_option
@_handled
def switchover(new_root: str, timeout: float, via: str | None) -> None:
    """Planned: branch NEW_ROOT becomes the root, the old root its branch (nothing lost)."""
    c = _open_set(via)
    c.location(new_root)  # unknown names first, with the known ones
    old = manage.live_root(c)
    try:
        tick = manage.switchover(c, new_root, _poll, timeout)
    except _WaitTimeout:
        with c.db(old or new_root) as db:
            switch = db.get_local("switch_tick") or "?"
        fail(
            f"switchover to {new_root} not finished: it did not apply switch tick {switch} "
            f"within {timeout:g}s (is its worker running?); {old} no longer captures changes: "
            "run the same switchover again to finish it",
            EXIT_STORE,
        )
    if old == new_root:
        click.echo(f"{new_root} is already the root (since tick {tick})")
    else:
        click.echo(f"{new_root} is the root from tick {tick}; {old} is its branch")
        click.echo(f"move writers to {new_root}: changes written to {old} are not captured")


def _check_failover(c: manage.Cascade, dead_root: str) -> None:
    """Refuse a failover that would tag a node dead for nothing: ``manage.failover`` tags first
    and asks questions later."""
    location = c.location(dead_root)
    if c.dead(dead_root):
        return  # tagged already: a re-run (or the operator tagged it), failover finishes the job
    try:
        with open_node_db(location) as db:
            role: Role | None = db.state().role
    except CascadeError:
        role = None  # unreachable, as a dead root usually is
    if role is not None and role is not Role.ROOT:
        raise CascadeError(f"{dead_root} is a {role}, not the root: use tag-dead for it")
    other = manage.live_root(c, exclude=dead_root)
    if other is not None:
        raise CascadeError(f"{dead_root} is not the root ({other} is): use tag-dead for it")
    for name, (loc, dead) in sorted(c.nodes.items()):
        if dead or name == dead_root:
            continue
        try:
            with open_node_db(loc) as db:
                if db.state().role.carries_queue and db.last_tick() is not None:
                    return
        except CascadeError:
            continue
    raise CascadeError("no live branch carries the queue: nothing can become the root")


@cascade.command("failover")
@click.argument("dead_root")
@via_option
@_handled
def failover(dead_root: str, via: str | None) -> None:
    """Unplanned: DEAD_ROOT is gone. Promote the live branch with the highest tick."""
    c = _open_set(via)
    _check_failover(c, dead_root)
    new_root, fork, notes = manage.failover(c, dead_root)
    click.echo(f"new root: {new_root}")
    click.echo(f"fork tick: {fork}")
    for note in notes:
        click.echo(f"note: {note}")
    click.echo(
        f"move writers to {new_root}; when {dead_root} is back, run "
        f"'baton cascade resurrect {dead_root} --save FILE'"
    )


@cascade.command("resurrect")
@click.argument("old_root")
@click.option(
    "--save",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="JSON lines file for the events OLD_ROOT had after the fork.",
)
@via_option
@_handled
def resurrect(old_root: str, save: Path, via: str | None) -> None:
    """OLD_ROOT came back after a failover: save its lost events, make it a branch."""
    c = _open_set(via)
    c.location(old_root)
    if not save.parent.is_dir():
        raise CascadeError(f"--save {save}: directory {save.parent} does not exist")
    saved = manage.resurrect(c, old_root, save)
    with c.db(old_root) as db:
        st = db.state()
    click.echo(f"{old_root}: branch of {st.provider} from fork tick {st.position}")
    if saved:
        click.echo(f"{saved} event(s) it had after the fork saved to {save}")
    else:
        click.echo("no events to save (none after the fork, or saved by an earlier run)")


# -- status ------------------------------------------------------------------------------------


def _member_dict(m: manage.Member) -> dict[str, Any]:
    out = dataclasses.asdict(m)
    out["location"] = redact_url(m.location)
    return out


def _print_members(members: Sequence[manage.Member], title: str) -> None:
    out = Table(title=title)
    for col in ("name", "role", "provider", "tick", "lag", "lag s", "paused", "state"):
        out.add_column(col, overflow="fold")
    out.add_column("tables", overflow="fold")  # folded, not cut: every table name is shown
    for m in members:
        state = ", ".join(w for w, on in (("dead", m.dead), ("unreachable", not m.reachable)) if on)
        out.add_row(
            m.name,
            m.role,
            m.provider or "-",
            str(m.position),
            "-" if m.lag_ticks is None else str(m.lag_ticks),
            "-" if m.lag_seconds is None else f"{m.lag_seconds:g}",
            "yes" if m.paused else "no",
            state or "ok",
            ", ".join(t if s == "ok" else f"{t} ({s})" for t, s in m.tables.items()) or "-",
        )
    Console().print(out)


@cascade.command("status")
@via_option
@json_option
@_handled
def status(via: str | None, as_json: bool) -> None:
    """The set: its root, global watermark, and every member with its position and lag."""
    c = _open_set(via)
    members = manage.members(c)
    root = next(
        (m.name for m in members if m.role == Role.ROOT and not m.dead and m.reachable), None
    )
    watermark = None
    if root is not None:
        with c.db(root) as db:
            watermark = db.state().global_watermark
    if as_json:
        _echo_json(
            {
                "set": c.set_name,
                "root": root,
                "global_watermark": watermark,
                "members": [_member_dict(m) for m in members],
            }
        )
        return
    click.echo(f"set {c.set_name}: root {root or 'none (use failover)'}, global watermark "
               f"{'-' if watermark is None else watermark}")  # fmt: skip
    _print_members(members, f"members of {c.set_name}")


@cascade.command("members")
@via_option
@json_option
@_handled
def members_(via: str | None, as_json: bool) -> None:
    """Every member: role, provider, position, lag, paused, dead or unreachable, tables."""
    c = _open_set(via)
    members = manage.members(c)
    if as_json:
        _echo_json([_member_dict(m) for m in members])
    else:
        _print_members(members, f"members of {c.set_name}")


# -- check -------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A value as JSON can carry it the same way from either backend."""
    if isinstance(value, bool):
        return int(value)  # SQLite has no booleans: PostgreSQL's true is SQLite's 1
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    return value


def _digest(db: NodeDB, table: str) -> tuple[int, int]:
    """(rows, checksum) of ``table``: the sum modulo 2**64 of a hash of each row as JSON with
    its column names, so the order of rows and of columns does not matter."""
    cols, _ = db.columns(table)
    total = 0
    rows = db.read_rows(table)
    for row in rows:
        record = {c: _plain(v) for c, v in zip(cols, row, strict=True)}
        text = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
        digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
        total = (total + int.from_bytes(digest, "big")) % 2**64
    return len(rows), total


def _position(db: NodeDB, st: NodeState) -> int:
    """The tick a node's tables reflect: a root's are current up to its last tick."""
    if st.role is Role.ROOT:
        last = db.last_tick()
        return last.tick_id if last else 0
    return st.position


@cascade.command("check")
@click.option("--node", required=True, metavar="NODE", help="The node to compare.")
@click.option("--table", "only", metavar="TABLE", help="Only this table.")
@via_option
@json_option
@_handled
def check(node: str, only: str | None, via: str | None, as_json: bool) -> None:
    """Compare NODE's rows with its provider's (row count and checksum) per table; exit 1 when
    any differs. A node behind its provider differs until it catches up."""
    c = _open_set(via)
    results: dict[str, dict[str, Any]] = {}
    with c.db(node) as db:
        st = db.state()
        if st.provider is None:
            raise CascadeError(f"{node} is the root: it has no provider to compare with")
        mine = db.tables()
        if only is not None and only not in mine:
            raise CascadeError(f"{node} does not replicate {only!r} (see 'tables')")
        names = [only] if only is not None else sorted(mine)
        provider = st.provider
        with c.db(provider) as pdb:
            pst = pdb.state()
            theirs = pdb.tables()
            position, provider_position = _position(db, st), _position(pdb, pst)
            for table in names:
                rows, checksum = _digest(db, table)
                entry: dict[str, Any] = {"state": mine[table], "rows": rows}
                if table in theirs:
                    prows, pchecksum = _digest(pdb, table)
                    entry |= {"provider_rows": prows,
                              "equal": (rows, checksum) == (prows, pchecksum)}  # fmt: skip
                else:
                    entry |= {"provider_rows": None, "equal": False}
                results[table] = entry
    equal = all(r["equal"] for r in results.values())
    if as_json:
        _echo_json(
            {
                "node": node,
                "position": position,
                "provider": provider,
                "provider_position": provider_position,
                "equal": equal,
                "tables": results,
            }
        )
    else:
        click.echo(
            f"{node} at tick {position}; its provider {provider} at tick {provider_position}"
        )
        out = Table("table", "state", f"rows {node}", f"rows {provider}", "result")
        for table, r in results.items():
            if r["provider_rows"] is None:
                verdict = f"different: {provider} does not replicate it"
            else:
                verdict = "equal" if r["equal"] else "different"
            shown = "-" if r["provider_rows"] is None else str(r["provider_rows"])
            out.add_row(table, r["state"], str(r["rows"]), shown, verdict)
        Console().print(out)
        if not equal:
            # Both sides are read while workers may be applying: only a difference that stays
            # once the node is at its provider's tick is real.
            click.echo(
                f"note: a node behind its provider shows differences until it catches up "
                f"({node} at tick {position}, {provider} at tick {provider_position}); "
                "check again once both are at the same tick"
            )
    if not equal:
        sys.exit(1)
