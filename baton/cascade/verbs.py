"""The cascade's verbs, each declared once: its arguments (a model of
:mod:`~baton.cascade.verb_args`), what it runs (:mod:`baton.cascade.commands`), its result and
what a person reads of it (:mod:`~baton.cascade.verb_shown`). The ``baton cascade`` commands
(:mod:`baton.cli.cascade_verbs`) and the node's ``/v1/cascade`` routes
(:mod:`baton.node.api_cascade`) are both generated from :data:`VERBS`, so a verb's name,
arguments, checks, errors and result are the same however it is called. What a verb is, and how
its fields become arguments and options, is said in :mod:`baton.cascade.verb`. A new verb is
one more entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from baton.cascade import commands, ddl
from baton.cascade import verb_args as a_
from baton.cascade import verb_shown as show
from baton.cascade.model import Role
from baton.cascade.root import RootState
from baton.cascade.verb import Args, CommandLine, OnNode, OnSet, Shown, Verb


def _added_json(args: a_.AddTable, r: commands.TableAdded) -> dict[str, Any]:
    out = dataclasses.asdict(r)
    if not out["held"]:
        del out["held"]  # the nodes skipped as queue-only (or below one): only when any
    return out


def _switch(a: a_.Switchover) -> commands.Switched | commands.SwitchPlan:
    if a.dry_run:
        return commands.switch_plan(a.via, a.new_root, a.max_behind)
    return commands.switchover(a.via, a.new_root, a.timeout, a.max_behind)


def _switch_json(args: a_.Switchover, r: commands.Switched | commands.SwitchPlan) -> Any:
    out = dataclasses.asdict(r)
    if isinstance(r, commands.SwitchPlan):
        out["dry_run"] = True
    return out


def _compared_json(args: a_.Compare, r: commands.Compared) -> dict[str, Any]:
    """Every key of every kind (``--keys`` only limits what a person reads)."""
    return {
        "node": r.node,
        "provider": r.provider,
        "position": r.position,
        "equal": r.equal,
        "tables": {name: t.as_dict() for name, t in r.tables.items()},
    }


def _script(a: a_.ExecuteFile) -> dict[str, Any]:
    """``execute FILE``: the file of the caller's host read into the script's name and text
    (an empty one refused with the line commands.execute would say)."""
    name, text = commands.read_script(Path(a.file))
    ddl.check_script(name, text)
    return {"via": a.via, "name": name, "sql": text}


def _read(
    name: str,
    help: str,
    args: type[Args],
    run: Callable[[Any], Any],
    show: Callable[[Any, Any], Sequence[Shown]],
    **more: Any,
) -> Verb[Any, Any]:
    """A read: a GET over HTTP, and ``--json`` on the command line."""
    return Verb(name, help, args, run, show, read=True, **more)


VERBS: list[Verb[Any, Any]] = [
    # -- creating nodes ----------------------------------------------------------------------
    Verb(
        "create-root",
        "Make the database at LOCATION the root NAME of a new set SET.",
        a_.CreateRoot,
        lambda a: commands.create_root(a.name, a.location, a.set),
        show.created,
    ),
    Verb(
        "create-branch",
        "Add branch NAME at LOCATION (keeps the queue: it can provide others).",
        a_.CreateBranch,
        lambda a: commands.create_subscriber(
            Role.BRANCH, a.name, a.location, a.provider, a.via, queue_only=a.queue_only
        ),
        show.created,
    ),
    Verb(
        "create-leaf",
        "Add leaf NAME at LOCATION (applies tables only; provides no one).",
        a_.CreateSubscriber,
        lambda a: commands.create_subscriber(Role.LEAF, a.name, a.location, a.provider, a.via),
        show.created,
    ),
    Verb(
        "create-node",
        "Add node NAME of TYPE at LOCATION: root (--set), branch, leaf or queue-only "
        "(--provider, --via), merge-leaf (--provider, --via, --host).",
        a_.CreateNode,
        lambda a: commands.create_node(
            a.type,
            a.name,
            a.location,
            provider=a.provider,
            set_name=a.set,
            via=a.via,
            host=a.host,
        ),
        show.created,
    ),
    # -- tables ------------------------------------------------------------------------------
    Verb(
        "add-table",
        "Replicate TABLE on NODE: the root captures it; elsewhere it is registered as copying "
        "and the node's worker copies it from the provider with Spark, then catches up.",
        a_.AddTable,
        lambda a: commands.add_table(a.via, a.table, a.node, a.all),
        show.added,
        shape=_added_json,
    ),
    Verb(
        "remove-table",
        "Stop replicating TABLE on NODE (its rows stay). At the root, stop capturing it: "
        "remove it from every other node first.",
        a_.RemoveTable,
        lambda a: commands.remove_table(a.via, a.table, a.node),
        show.removed,
    ),
    _read(
        "tables",
        "The tables NODE replicates and their state (copying, catching-up, ok).",
        a_.OnNodeOption,
        lambda a: commands.tables(a.via, a.node),
        show.tables,
        returns=dict[str, str],
    ),
    _read(
        "missing",
        "Tables NODE's provider replicates that NODE does not (candidates for add-table).",
        a_.OnNodeOption,
        lambda a: commands.missing(a.via, a.node),
        show.missing,
        cli_json=lambda a, r: r.tables,
    ),
    # -- sequences, schema checks, scripts ----------------------------------------------------
    Verb(
        "add-seq",
        "Keep sequence SEQ on NODE at least as high as the root's (PostgreSQL nodes only).",
        a_.AddSeq,
        lambda a: commands.add_seq(a.via, a.seq, a.node, a.all),
        show.seq_added,
    ),
    Verb(
        "remove-seq",
        "Stop keeping SEQ on NODE (the sequence stays). At the root: remove it elsewhere first.",
        a_.RemoveSeq,
        lambda a: commands.remove_seq(a.via, a.seq, a.node),
        show.seq_removed,
    ),
    _read(
        "seqs",
        "The sequences NODE keeps and their last values there.",
        a_.OnNodeOption,
        lambda a: commands.list_seqs(a.via, a.node),
        show.seqs,
        returns=dict[str, int | None],
    ),
    Verb(
        "fkeys",
        "Foreign keys on NODE that applying batches can break, with what to do.",
        a_.OnNodeOption,
        lambda a: commands.fkeys(a.via, a.node),
        lambda a, r: show.found(f"none: no foreign key on {a.node} gets in the way of applying", r),
        read=True,
    ),
    Verb(
        "triggers",
        "User triggers on NODE's replicated tables that fire for every row applied.",
        a_.OnNodeOption,
        lambda a: commands.triggers(a.via, a.node),
        lambda a, r: show.found(
            f"none: no trigger of yours fires when {a.node} applies a batch", r
        ),
        read=True,
    ),
    Verb(
        "execute",
        "Run the SQL in FILE at the root and, through the queue, on every node in order with "
        "the events (DDL: a column added at the root reaches each node before the rows that use "
        "it).",
        a_.Execute,
        lambda a: commands.execute(a.via, a.name, a.sql),
        show.executed,
        cli=CommandLine(a_.ExecuteFile, _script),
    ),
    # -- events, providers, tags, pause -------------------------------------------------------
    Verb(
        "emit",
        "Add a custom event of TYPE at the root; every node carries it in its queue.",
        a_.Emit,
        lambda a: commands.emit(a.via, a.type, a.data),
        lambda a, r: [
            f"event {r.ev_id} ({r.type}) added at root {r.root}; it travels with the next tick"
        ],
    ),
    Verb(
        "change-provider",
        "Make NODE receive from PROVIDER (see candidates); its worker follows at once.",
        a_.ChangeProvider,
        lambda a: commands.change_provider(a.via, a.node, a.provider),
        lambda a, r: [f"{a.node}: receives from {a.provider}"],
    ),
    _read(
        "candidates",
        "The nodes that can be NODE's provider now (no cycle, alive, still have its tick). A "
        "queue-only candidate is marked: it cannot give NODE an initial copy of a table.",
        a_.Candidates,
        lambda a: commands.candidates_detail(a.via, a.node),
        show.candidates,
        shape=lambda a, r: [dataclasses.asdict(f) if a.detail else f.name for f in r],
        returns=list[str] | list[dict[str, Any]],
    ),
    Verb(
        "tag-dead",
        "Tag NODE dead: it is no provider candidate and stops holding the queue back.\n\n"
        "Refused while a service runs at NODE (its heartbeat is fresh).",
        OnNode,
        lambda a: commands.tag(a.via, a.node, True),
        show.tagged,
    ),
    Verb(
        "tag-alive",
        "Tag NODE alive again.",
        OnNode,
        lambda a: commands.tag(a.via, a.node, False),
        show.tagged,
    ),
    Verb(
        "pause",
        "Pause NODE's worker: it applies nothing until resume.",
        OnNode,
        lambda a: commands.set_paused(a.via, a.node, True),
        lambda a, r: [f"{a.node}: paused"],
    ),
    Verb(
        "resume",
        "Resume NODE's worker.",
        OnNode,
        lambda a: commands.set_paused(a.via, a.node, False),
        lambda a, r: [f"{a.node}: resumed"],
    ),
    # -- switchover, failover, resurrect, replacing a branch ---------------------------------
    Verb(
        "switchover",
        "Planned: branch NEW_ROOT becomes the root, the old root its branch (nothing lost).\n\n"
        "Refused, changing nothing, unless NEW_ROOT's worker runs and applies and NEW_ROOT is "
        "at most --max-behind ticks behind. Waits up to --timeout seconds for its worker to "
        "apply the switch tick; if it did not, run the same switchover again.",
        a_.Switchover,
        _switch,
        show.switched,
        shape=_switch_json,
    ),
    Verb(
        "failover",
        "Unplanned: DEAD_ROOT is gone. Promote the live branch with the highest tick.\n\n"
        "In sync mode, refused when no live branch holds every acknowledged transaction "
        "(--accept-loss promotes it anyway).",
        a_.Failover,
        lambda a: commands.failover(a.via, a.dead_root, a.accept_loss),
        show.failed_over,
    ),
    Verb(
        "auto-failover",
        "Turn automatic failover of SET on or off (off unless turned on).\n\n"
        "When on, the elected actor of the node agents fails the root over as 'failover' "
        "does once the root's node lost its membership, its worker group has no leader and "
        "the other members agree they cannot reach it. Refused, changing nothing, for a set "
        "with no branch to promote.",
        a_.AutoFailover,
        lambda a: commands.auto_failover(a.via, a.set, a.state is a_.OnOff.ON),
        show.auto_failover,
    ),
    Verb(
        "sync",
        "Set synchronous mode of SET: K branches must hold a transaction before a writer's "
        "commit returns (0: asynchronous, the default).\n\n"
        "The writer helper (RootWriter) waits, after committing at the root, until K branches "
        "applied the first root tick that includes the transaction; a failover then promotes "
        "only a branch holding every acknowledged transaction. Refused, changing nothing, for "
        "K larger than the set's branches.",
        a_.Sync,
        lambda a: commands.sync(a.via, a.set, a.k),
        show.sync_set,
    ),
    Verb(
        "resurrect",
        "OLD_ROOT came back after a failover: save its lost events, make it a branch.",
        a_.Resurrect,
        lambda a: commands.resurrect(a.via, a.old_root, Path(a.save)),
        show.resurrected,
    ),
    Verb(
        "node-switchover",
        "Planned: NEW takes branch OLD's place; OLD's subscribers move to NEW and OLD becomes "
        "a subscriber of NEW.",
        a_.ReplaceNode,
        lambda a: commands.replace_node(a.via, a.new, a.old, failover=False, timeout=a.timeout),
        show.replaced,
    ),
    Verb(
        "node-failover",
        "Unplanned: branch OLD is gone. NEW takes its place, its subscribers move to NEW, and "
        "OLD is tagged dead.",
        a_.ReplaceNode,
        lambda a: commands.replace_node(a.via, a.new, a.old, failover=True, timeout=a.timeout),
        show.replaced,
    ),
    # -- status, members, check ----------------------------------------------------------------
    _read(
        "status",
        "The set: its root, global watermark, and every member with its position and lag.",
        OnSet,
        lambda a: commands.status(a.via),
        show.status,
        shape=lambda a, r: r.as_dict(),
    ),
    _read(
        "root",
        "Where writers of SET write now: its root, location and tick, and whether it takes "
        "writes. Exit 1 when the set has no live root (a failover is due or under way) or the "
        "member at --via is of another set.",
        a_.RootOf,
        lambda a: commands.root(a.via, a.set),
        show.root_of,
        shape=lambda a, r: r.as_dict(),
        fails=lambda r: r.state in (RootState.NONE, RootState.NO_SET),
    ),
    _read(
        "members",
        "Every member: role, provider, position, lag, paused, dead or unreachable, tables.",
        OnSet,
        lambda a: commands.members(a.via),
        show.members,
        shape=lambda a, r: [commands.member_dict(m) for m in r[1]],
        returns=list[dict[str, Any]],
    ),
    Verb(
        "compare",
        "Compare NODE's tables (every one, or TABLE...) with its provider's row by row on "
        "Spark, both as of NODE's tick (NODE is paused meanwhile; writes go on at the root): "
        "missing, extra and different rows. Exit 1 when any differs.",
        a_.Compare,
        lambda a: commands.compare(a.via, a.node, a.tables),
        show.compared,
        shape=_compared_json,
        fails=lambda r: not r.equal,
    ),
    Verb(
        "repair",
        "Make NODE's TABLE equal to its provider's as of NODE's tick, changing only the rows "
        "that differ, in one transaction; then NODE resumes. Safe to run again.",
        a_.Repair,
        lambda a: commands.repair(a.via, a.node, a.table),
        show.repaired,
    ),
    Verb(
        "resync",
        "Copy NODE's TABLE again from its provider with the worker's Spark copy (its rows "
        "replaced in one transaction, never emptied first), then catch up; waits for ok.",
        a_.Resync,
        lambda a: commands.resync(a.via, a.node, a.table, a.timeout),
        show.resynced,
    ),
    _read(
        "check",
        "Compare NODE's rows with its provider's (row count and checksum) per table; exit 1 "
        "when any differs. A node behind its provider differs until it catches up.",
        a_.Check,
        lambda a: commands.check(a.via, a.node, a.table),
        show.checked,
        fails=lambda r: not r["equal"],
    ),
]

#: The verbs by name.
BY_NAME = {v.name: v for v in VERBS}

__all__ = ["BY_NAME", "VERBS"]
