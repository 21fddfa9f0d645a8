"""``baton cascade ...``: build and operate a cascade set (Londiste 3 style) from the command line.

The commands work on the node databases directly: no node agent or worker needs to run, except
that a switchover waits for the new root's worker to apply the switch tick. A set is found
through ``--via LOCATION`` (any member's location, or ``BATON_CASCADE``) because the node list is
the one thing every member holds.

The commands run through :mod:`baton.cascade.commands` (shared with the node's HTTP API; the
operations and their rules are in :mod:`baton.cascade.set_ops` and
:mod:`baton.cascade.node_ops`); this module parses arguments and prints. Every command is
resumable (running it again after an interruption finishes the job, and running it again after
it finished changes nothing), and bad input is refused as one line on stderr with exit status 2
before anything is written; a node database that cannot be reached is exit 1.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

import click
from rich.table import Table

from baton.cascade import commands, observe
from baton.cascade.beat import Phase, ServiceState
from baton.cascade.verbs import VERBS, created_lines
from baton.cli import cascade_verbs
from baton.cli.common import EXIT_STORE, EXIT_USAGE, console, fail

P = ParamSpec("P")
R = TypeVar("R")

#: The exit status of each kind of error (see :func:`baton.cascade.commands.classify`).
EXIT = {"input": EXIT_USAGE, "refused": EXIT_USAGE, "unreachable": EXIT_STORE,
        "unfinished": EXIT_STORE}  # fmt: skip


def _handled(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn cascade and driver errors raised by a command into one line on stderr."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            found = commands.classify(exc)
            if found is None:
                raise  # a bug: main() reports it as an internal error
            kind, message = found
            fail(message, EXIT[kind])

    return run


def _via(via: str | None) -> str:
    if not via:
        raise click.UsageError("no set given: use --via LOCATION (any member) or BATON_CASCADE")
    return via


def _echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))


def _print_pairs(
    found: Mapping[str, object],
    shown: Mapping[str, str],
    as_json: bool,
    headers: tuple[str, str],
    title: str,
) -> None:
    """``found`` as JSON, or ``shown`` (the same keys, as text) as a two-column table."""
    if as_json:
        _echo_json(found)
        return
    out = Table(*headers, title=title)
    for name, value in shown.items():
        out.add_row(name, value)
    console().print(out)


_VIA = {
    "envvar": "BATON_CASCADE",
    "metavar": "LOCATION",
    "help": "Any member's location (finds the set's node list); env BATON_CASCADE.",
}
via_option = click.option("--via", **_VIA)  # type: ignore[arg-type]
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("cascade")
def cascade() -> None:
    """Build and operate a cascade set: nodes, tables, providers, switchover, failover."""


# -- creating nodes ------------------------------------------------------------------------------


def _done(already: bool) -> str:
    return " (already done)" if already else ""


def _print_created(r: commands.Created) -> None:
    for line in created_lines(r):
        click.echo(line)


@cascade.command("create-node")
@click.argument("type_", metavar="TYPE", type=click.Choice(commands.NODE_TYPES))
@click.argument("name")
@click.argument("location")
@click.option("--provider", metavar="NODE", help="The node it receives events from (not a root).")
@click.option("--set", "set_name", metavar="SET", help="A root: the name of the new set.")
@click.option(
    "--host",
    metavar="LOCATION",
    help="A merge-leaf: the combined set's node hosting it (the same as LOCATION).",
)
@via_option
@_handled
def create_node(
    type_: str,
    name: str,
    location: str,
    *,
    provider: str | None,
    set_name: str | None,
    host: str | None,
    via: str | None,
) -> None:
    """Add node NAME of TYPE at LOCATION: root (--set), branch, leaf or queue-only (--provider,
    --via), merge-leaf (--provider, --via, --host)."""
    r = commands.create_node(
        type_, name, location, provider=provider, set_name=set_name, via=via, host=host
    )
    _print_created(r)


# -- tables ------------------------------------------------------------------------------------


@cascade.command("tables")
@click.option("--node", required=True, metavar="NODE")
@via_option
@json_option
@_handled
def tables(node: str, via: str | None, as_json: bool) -> None:
    """The tables NODE replicates and their state (copying, catching-up, ok)."""
    found = commands.tables(_via(via), node)
    _print_pairs(found, found, as_json, ("table", "state"), f"tables of {node}")


@cascade.command("missing")
@click.option("--node", required=True, metavar="NODE")
@via_option
@json_option
@_handled
def missing(node: str, via: str | None, as_json: bool) -> None:
    """Tables NODE's provider replicates that NODE does not (candidates for add-table)."""
    r = commands.missing(_via(via), node)
    if as_json:
        _echo_json(r.tables)
    elif r.tables:
        click.echo("\n".join(r.tables))
    elif r.provider is None:
        click.echo(f"{node} is the root: it has no provider")
    else:
        click.echo(f"none: {node} replicates every table {r.provider} does")


# -- events ------------------------------------------------------------------------------------


# -- providers, tags, pause ----------------------------------------------------------------------


@cascade.command("candidates")
@click.argument("node")
@via_option
@json_option
@click.option(
    "--detail",
    is_flag=True,
    help="With --json: objects with name, queue_only and note instead of names.",
)
@_handled
def candidates(node: str, via: str | None, as_json: bool, detail: bool) -> None:
    """The nodes that can be NODE's provider now (no cycle, alive, still have its tick). A
    queue-only candidate is marked: it cannot give NODE an initial copy of a table."""
    found = commands.candidates_detail(_via(via), node)
    if as_json:
        _echo_json([dataclasses.asdict(f) for f in found] if detail else [f.name for f in found])
    elif not found:
        click.echo(f"none: no node can provide {node} now")
    else:
        for f in found:
            click.echo(f"{f.name} ({f.note})" if f.note else f.name)


# -- switchover, failover, resurrect ------------------------------------------------------------


@cascade.command("switchover")
@click.argument("new_root")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds to wait for NEW_ROOT to apply the switch tick.",
)
@click.option(
    "--max-behind",
    type=click.IntRange(min=0),
    default=commands.MAX_BEHIND,
    show_default=True,
    metavar="TICKS",
    help="Refuse when NEW_ROOT is more ticks than this behind the root.",
)
@click.option("--dry-run", is_flag=True, help="Check and print the steps; change nothing.")
@via_option
@_handled
def switchover(
    new_root: str, timeout: float, max_behind: int, dry_run: bool, via: str | None
) -> None:
    """Planned: branch NEW_ROOT becomes the root, the old root its branch (nothing lost).

    Refused, changing nothing, unless NEW_ROOT's worker runs and applies and NEW_ROOT is at
    most --max-behind ticks behind."""
    if dry_run:
        plan = commands.switch_plan(_via(via), new_root, max_behind)
        if plan.service is not None:
            click.echo(
                f"checked: {new_root}'s worker applies on {plan.service.holder} at epoch "
                f"{plan.service.epoch}, {plan.behind} tick(s) behind {plan.root}"
            )
        for n, step in enumerate(plan.steps, 1):
            click.echo(f"{n}. {step}")
        click.echo("nothing was changed (--dry-run)")
        return
    r = commands.switchover(_via(via), new_root, timeout, max_behind)
    if r.already:
        click.echo(f"{new_root} is already the root (since tick {r.tick})")
    else:
        click.echo(f"{new_root} is the root from tick {r.tick}; {r.old_root} is its branch")
        click.echo(f"move writers to {new_root}: {r.old_root} refuses writes from now on")


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
    r = commands.resurrect(_via(via), old_root, save)
    click.echo(f"{old_root}: branch of {r.provider} from fork tick {r.fork}")
    if r.saved:
        click.echo(f"{r.saved} event(s) it had after the fork saved to {save}")
    else:
        click.echo("no events to save (none after the fork, or saved by an earlier run)")


# -- status ------------------------------------------------------------------------------------


def _role_text(m: observe.Member) -> str:
    """The role, with what a node of a combined set does there."""
    if m.queue_only:
        return f"{m.role} (queue-only)"
    if m.combined:
        return f"{m.role} (merge-leaf into set {m.combined})"
    if m.merges:
        return f"{m.role} (merges {', '.join(sorted(m.merges))})"
    return m.role


def _age(when: float | None) -> str:
    """How long ago ``when`` was, for a person: the tick a node is at, made N s ago."""
    if when is None:
        return "-"
    seconds = max(0.0, time.time() - when)
    return f"{seconds:.1f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def _service_text(m: observe.Member) -> str:
    """What serves the node: ``running on HOST at epoch E``, or ``not running`` and since
    when."""
    b = m.service
    if b is None:
        return "not running"
    state = b.state(time.time())
    if state is ServiceState.RUNNING:
        doing = {Phase.STARTING: " (starting Spark)", Phase.WAITING: f" (waits: {b.error})"}
        return f"running on {b.holder} at epoch {b.epoch}{doing.get(b.phase, '')}"
    return f"not running (last seen {_age(b.at)})"


def _served(m: observe.Member) -> bool:
    return m.service is not None and m.service.state(time.time()) is ServiceState.RUNNING


def _print_members(members: Sequence[observe.Member], title: str) -> None:
    out = Table(title=title)
    for col in ("name", "role", "provider", "tick", "made", "lag", "lag s", "paused", "state"):
        out.add_column(col, overflow="fold")
    out.add_column("service", overflow="fold")
    out.add_column("tables", overflow="fold")  # folded, not cut: every table name is shown
    for m in members:
        state = ", ".join(w for w, on in (("dead", m.dead), ("unreachable", not m.reachable)) if on)
        if m.switching_to is not None:
            state = f"switching to {m.switching_to} since tick {m.switch_tick}"
        out.add_row(
            m.name,
            _role_text(m),
            m.provider or "-",
            str(m.position),
            _age(m.tick_time),
            "-" if m.lag_ticks is None else str(m.lag_ticks),
            "-" if m.lag_seconds is None else f"{m.lag_seconds:g}",
            "yes" if m.paused else "no",
            state or "ok",
            _service_text(m),
            ", ".join(t if s == "ok" else f"{t} ({s})" for t, s in m.tables.items()) or "-",
        )
    console().print(out)


@cascade.command("status")
@via_option
@json_option
@_handled
def status(via: str | None, as_json: bool) -> None:
    """The set: its root, global watermark, and every member with its position and lag."""
    r = commands.status(_via(via))
    if as_json:
        _echo_json(r.as_dict())
        return
    watermark = "-" if r.global_watermark is None else r.global_watermark
    click.echo(f"set {r.set_name}: root {r.root or 'none (use failover)'}, global watermark "
               f"{watermark}")  # fmt: skip
    idle = [m for m in r.members if not m.dead and m.reachable and not _served(m)]
    if idle:
        names = ", ".join(m.name for m in idle)
        click.echo(
            f"not running: {names}: nothing is ticked or applied there (start `baton cascade "
            "run LOCATION` for each, or its cascade-worker object)"
        )
    for m in r.members:
        if m.switching_to is not None:
            click.echo(
                f"{m.name} is switching to {m.switching_to} since tick {m.switch_tick}: it "
                "captures nothing now; run the same switchover again to finish it"
            )
    _print_members(r.members, f"members of {r.set_name}")


@cascade.command("members")
@via_option
@json_option
@_handled
def members_(via: str | None, as_json: bool) -> None:
    """Every member: role, provider, position, lag, paused, dead or unreachable, tables."""
    set_name, members = commands.members(_via(via))
    if as_json:
        _echo_json([commands.member_dict(m) for m in members])
    else:
        _print_members(members, f"members of {set_name}")


# -- check -------------------------------------------------------------------------------------


@cascade.command("check")
@click.option("--node", required=True, metavar="NODE", help="The node to compare.")
@click.option("--table", "only", metavar="TABLE", help="Only this table.")
@via_option
@json_option
@_handled
def check(node: str, only: str | None, via: str | None, as_json: bool) -> None:
    """Compare NODE's rows with its provider's (row count and checksum) per table; exit 1 when
    any differs. A node behind its provider differs until it catches up."""
    r = commands.check(_via(via), node, only)
    provider, position, provider_position = r["provider"], r["position"], r["provider_position"]
    if as_json:
        _echo_json(r)
    else:
        click.echo(
            f"{node} at tick {position}; its provider {provider} at tick {provider_position}"
        )
        out = Table("table", "state", f"rows {node}", f"rows {provider}", "result")
        for table, t in r["tables"].items():
            if t["provider_rows"] is None:
                verdict = f"different: {provider} does not replicate it"
            else:
                verdict = "equal" if t["equal"] else "different"
            shown = "-" if t["provider_rows"] is None else str(t["provider_rows"])
            out.add_row(table, t["state"], str(t["rows"]), shown, verdict)
        console().print(out)
        if not r["equal"] and position != provider_position:
            # Both sides are read while workers may be applying: only a difference that stays
            # once the node is at its provider's tick is real.
            click.echo(
                f"note: a node behind its provider shows differences until it catches up "
                f"({node} at tick {position}, {provider} at tick {provider_position}); "
                "check again once both are at the same tick"
            )
        elif not r["equal"]:
            click.echo(
                f"note: {node} and {provider} are both at tick {position}, so the difference is "
                f"real: copy the table again (remove-table, then add-table on {node})"
            )
    if not r["equal"]:
        sys.exit(1)


# -- sequences -------------------------------------------------------------------------------


@cascade.command("add-seq")
@click.argument("seq")
@click.option("--node", metavar="NODE", help="The node to keep it on.")
@click.option("--all", "everywhere", is_flag=True, help="Every live node with tables, root first.")
@via_option
@_handled
def add_seq(seq: str, node: str | None, everywhere: bool, via: str | None) -> None:
    """Keep sequence SEQ on NODE at least as high as the root's (PostgreSQL nodes only)."""
    if (node is None) == (not everywhere):
        raise click.UsageError("give either --node NODE or --all")
    r = commands.add_seq(_via(via), seq, node, everywhere)
    for name, already in r.nodes:
        click.echo(f"{name}: {seq} kept{_done(already)}")


@cascade.command("remove-seq")
@click.argument("seq")
@click.option("--node", required=True, metavar="NODE", help="The node to stop keeping it on.")
@via_option
@_handled
def remove_seq(seq: str, node: str, via: str | None) -> None:
    """Stop keeping SEQ on NODE (the sequence stays). At the root: remove it elsewhere first."""
    r = commands.remove_seq(_via(via), seq, node)
    click.echo(
        f"{node}: {seq} removed" if r.removed else f"{node}: {seq} is not kept (nothing to do)"
    )


@cascade.command("seqs")
@click.option("--node", required=True, metavar="NODE")
@via_option
@json_option
@_handled
def seqs_(node: str, via: str | None, as_json: bool) -> None:
    """The sequences NODE keeps and their last values there."""
    found = commands.list_seqs(_via(via), node)
    shown = {name: "-" if value is None else str(value) for name, value in found.items()}
    _print_pairs(found, shown, as_json, ("sequence", "last value"), f"sequences of {node}")


# -- foreign keys and triggers ---------------------------------------------------------------


def _print_found(r: object, as_json: bool, empty: str) -> None:
    assert dataclasses.is_dataclass(r) and not isinstance(r, type)
    data = dataclasses.asdict(r)
    if as_json:
        _echo_json(data)
        return
    if data["note"]:
        click.echo(data["note"])
    if not data["items"] and data["applies"]:
        click.echo(empty)
    for item in data["items"]:
        if "references" in item:
            cols, refs = ", ".join(item["columns"]), ", ".join(item["ref_columns"])
            click.echo(f"{item['name']}: {item['table']} ({cols}) -> {item['references']} ({refs})")
            click.echo(f"  problem: {item['problem']}")
        else:
            click.echo(f"{item['name']} on {item['table']}")
        click.echo(f"  what to do: {item['fix']}")


@cascade.command("fkeys")
@click.option("--node", required=True, metavar="NODE")
@via_option
@json_option
@_handled
def fkeys(node: str, via: str | None, as_json: bool) -> None:
    """Foreign keys on NODE that applying batches can break, with what to do."""
    r = commands.fkeys(_via(via), node)
    _print_found(r, as_json, f"none: no foreign key on {node} gets in the way of applying")


@cascade.command("triggers")
@click.option("--node", required=True, metavar="NODE")
@via_option
@json_option
@_handled
def triggers(node: str, via: str | None, as_json: bool) -> None:
    """User triggers on NODE's replicated tables that fire for every row applied."""
    r = commands.triggers(_via(via), node)
    _print_found(r, as_json, f"none: no trigger of yours fires when {node} applies a batch")


# -- scripts ---------------------------------------------------------------------------------


@cascade.command("execute")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@via_option
@_handled
def execute(file: Path, via: str | None) -> None:
    """Run the SQL in FILE at the root and, through the queue, on every node in order with the
    events (DDL: a column added at the root reaches each node before the rows that use it)."""
    name, text = commands.read_script(file)
    r = commands.execute(_via(via), name, text)
    if r.already:
        click.echo(f"{name}: already executed at root {r.root} (nothing to do)")
    else:
        click.echo(f"{name}: executed at root {r.root}; event {r.ev_id} runs it on every node")


# -- replacing a branch ----------------------------------------------------------------------


# -- the verbs declared once (baton.cascade.verbs), as commands ---------------------------------

for _verb in VERBS:
    cascade.add_command(
        cascade_verbs.command(_verb, click.Option(["--via"], **_VIA), _via, _handled)  # type: ignore[arg-type]
    )


__all__ = ["cascade"]
