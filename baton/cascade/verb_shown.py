"""What a person reads of each cascade verb's result (:mod:`baton.cascade.verbs`): lines and
tables (:class:`~baton.cascade.verb.Grid`) that the command line prints. ``--json`` and the API
carry the result itself instead. Each function takes the verb's arguments and its result."""

from __future__ import annotations

import time
from typing import Any

from baton.cascade import commands, observe, schema_check
from baton.cascade.beat import Phase, ServiceState
from baton.cascade.ddl import Executed
from baton.cascade.handover import SwitchPlan
from baton.cascade.node_replace import Replaced
from baton.cascade.root import Root, RootState
from baton.cascade.table_diff import Compared, Kind, Repaired, Resynced
from baton.cascade.verb import Grid, OnNode, Shown
from baton.cascade.verb_args import (
    AddSeq,
    AddTable,
    Check,
    Compare,
    Failover,
    OnNodeOption,
    RemoveSeq,
    RemoveTable,
    Repair,
    Resurrect,
    Resync,
    RootOf,
    Switchover,
)
from baton.epochs import epoch_text
from baton.errors import redact_url


def _done(already: bool) -> str:
    return " (already done)" if already else ""


# -- creating nodes, tables ----------------------------------------------------------------------


def created(args: object, r: commands.Created) -> list[Shown]:
    """A node made (create-root, -branch, -leaf, -node)."""
    if r.provider is None:
        return [f"{r.name}: root of set {r.set_name} at {r.location}{_done(r.already)}"]
    return [
        f"{r.name}: {r.role} of {r.provider} in set {r.set_name} at {r.location}, "
        f"from tick {r.position}{_done(r.already)}"
    ]


def added(args: AddTable, r: commands.TableAdded) -> list[Shown]:
    out: list[Shown] = []
    for t in r.nodes:
        hint = " (the node's worker copies it with Spark)" if t.state == "copying" else ""
        out.append(f"{t.node}: {t.table} {t.state}{hint}")
    out += [f"{name}: skipped (tagged dead)" for name in r.skipped]
    out += [f"{name}: skipped ({why})" for name, why in r.held.items()]
    return out


def removed(args: RemoveTable, r: commands.TableRemoved) -> list[Shown]:
    if not r.removed:
        return [f"{args.node}: {args.table} is not replicated (nothing to do)"]
    return [
        f"{args.node}: {args.table} removed" + (" (no longer captured)" if r.uncaptured else "")
    ]


def tables(args: OnNodeOption, r: dict[str, str]) -> list[Shown]:
    return [Grid(("table", "state"), list(r.items()), title=f"tables of {args.node}")]


def missing(args: OnNodeOption, r: commands.Missing) -> list[Shown]:
    if r.tables:
        return list(r.tables)
    if r.provider is None:
        return [f"{args.node} is the root: it has no provider"]
    return [f"none: {args.node} replicates every table {r.provider} does"]


# -- sequences, schema checks, scripts -------------------------------------------------------------


def seq_added(args: AddSeq, r: commands.SeqAdded) -> list[Shown]:
    return [f"{name}: {args.seq} kept{_done(already)}" for name, already in r.nodes]


def seq_removed(args: RemoveSeq, r: commands.SeqRemoved) -> list[Shown]:
    if r.removed:
        return [f"{args.node}: {args.seq} removed"]
    return [f"{args.node}: {args.seq} is not kept (nothing to do)"]


def seqs(args: OnNodeOption, r: dict[str, int | None]) -> list[Shown]:
    rows = [(name, "-" if value is None else str(value)) for name, value in r.items()]
    return [Grid(("sequence", "last value"), rows, title=f"sequences of {args.node}")]


def found(empty: str, r: schema_check.Found[Any]) -> list[Shown]:
    """Foreign keys or triggers found, each with what to do; ``empty`` when none."""
    out: list[Shown] = [r.note] if r.note else []
    if not r.items and r.applies:
        out.append(empty)
    for item in r.items:
        if isinstance(item, schema_check.ForeignKey):
            cols, refs = ", ".join(item.columns), ", ".join(item.ref_columns)
            out.append(f"{item.name}: {item.table} ({cols}) -> {item.references} ({refs})")
            out.append(f"  problem: {item.problem}")
        else:
            out.append(f"{item.name} on {item.table}")
        out.append(f"  what to do: {item.fix}")
    return out


def executed(args: object, r: Executed) -> list[Shown]:
    if r.already:
        return [f"{r.name}: already executed at root {r.root} (nothing to do)"]
    return [f"{r.name}: executed at root {r.root}; event {r.ev_id} runs it on every node"]


# -- providers, tags ---------------------------------------------------------------------------


def candidates(args: OnNode, r: list[commands.Candidate]) -> list[Shown]:
    if not r:
        return [f"none: no node can provide {args.node} now"]
    return [f"{f.name} ({f.note})" if f.note else f.name for f in r]


def tagged(args: OnNode, r: commands.Tagged) -> list[Shown]:
    out: list[Shown] = [f"{r.node}: tagged {'dead' if r.dead else 'alive'}"]
    if r.not_reached:
        # Tagging is idempotent: running it again later reaches them.
        out.append(f"not reached: {', '.join(r.not_reached)} (run this again when they are back)")
    return out


# -- switchover, failover, resurrect, replacing a branch -----------------------------------------


def switched(args: Switchover, r: commands.Switched | SwitchPlan) -> list[Shown]:
    if isinstance(r, SwitchPlan):  # --dry-run
        out: list[Shown] = []
        if r.service is not None:
            out.append(
                f"checked: {r.new_root}'s worker applies on {r.service.holder} at epoch "
                f"{epoch_text(r.service.epoch)}, {r.behind} tick(s) behind {r.root}"
            )
        out += [f"{n}. {step}" for n, step in enumerate(r.steps, 1)]
        return [*out, "nothing was changed (--dry-run)"]
    if r.already:
        return [f"{r.new_root} is already the root (since tick {r.tick})"]
    return [
        f"{r.new_root} is the root from tick {r.tick}; {r.old_root} is its branch",
        f"move writers to {r.new_root}: {r.old_root} refuses writes from now on",
    ]


def failed_over(args: Failover, r: commands.FailedOver) -> list[Shown]:
    return [
        f"new root: {r.new_root}",
        f"fork tick: {r.fork}",
        *(f"note: {note}" for note in r.notes),
        f"move writers to {r.new_root}; when {args.dead_root} is back, run "
        f"'baton cascade resurrect {args.dead_root} --save FILE'",
    ]


def resurrected(args: Resurrect, r: commands.Resurrected) -> list[Shown]:
    out: list[Shown] = [f"{r.node}: branch of {r.provider} from fork tick {r.fork}"]
    if r.saved:
        out.append(f"{r.saved} event(s) it had after the fork saved to {args.save}")
    else:
        out.append("no events to save (none after the fork, or saved by an earlier run)")
    return out


def replaced(args: object, r: Replaced) -> list[Shown]:
    if r.already:
        return [f"{r.new} has already replaced {r.old} (nothing to do)"]
    return [
        f"{r.new}: receives from {r.provider}, in {r.old}'s place",
        *(f"{name}: receives from {r.new}" for name in r.moved),
        f"{r.old}: tagged dead" if r.failover else f"{r.old}: receives from {r.new}",
    ]


# -- status, members, check ----------------------------------------------------------------------


def _role(m: observe.Member) -> str:
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


def _service(m: observe.Member) -> str:
    """What serves the node: ``running on HOST at epoch E``, or ``not running`` and since
    when."""
    b = m.service
    if b is None:
        return "not running"
    state = b.state(time.time())
    if state is ServiceState.RUNNING:
        doing = {Phase.STARTING: " (starting Spark)", Phase.WAITING: f" (waits: {b.error})"}
        return f"running on {b.holder} at epoch {epoch_text(b.epoch)}{doing.get(b.phase, '')}"
    return f"not running (last seen {_age(b.at)})"


def _served(m: observe.Member) -> bool:
    return m.service is not None and m.service.state(time.time()) is ServiceState.RUNNING


def _paused(m: observe.Member) -> str:
    if not m.paused:
        return "no"
    return "yes" if m.paused_by is None else f"yes, by {m.paused_by}"


_MEMBER_COLUMNS = ("name", "role", "provider", "tick", "made", "lag", "lag s", "paused", "state",
                   "service", "tables")  # fmt: skip


def members_grid(members: list[observe.Member], title: str) -> Grid:
    rows = []
    for m in members:
        state = ", ".join(w for w, on in (("dead", m.dead), ("unreachable", not m.reachable)) if on)
        if m.switching_to is not None:
            state = f"switching to {m.switching_to} since tick {m.switch_tick}"
        rows.append((
            m.name,
            _role(m),
            m.provider or "-",
            str(m.position),
            _age(m.tick_time),
            "-" if m.lag_ticks is None else str(m.lag_ticks),
            "-" if m.lag_seconds is None else f"{m.lag_seconds:g}",
            _paused(m),
            state or "ok",
            _service(m),
            ", ".join(_table_state(m, t, s) for t, s in m.tables.items()) or "-",
        ))  # fmt: skip
    # Folded, not cut: every table name is shown.
    return Grid(_MEMBER_COLUMNS, rows, title=title, fold=True)


def _table_state(m: observe.Member, table: str, state: str) -> str:
    """``items``, ``items (catching-up)``, or a copy with its progress: ``items (copying
    3/8 tasks)``."""
    if state == "ok":
        return table
    if table in m.copies:
        done, total = m.copies[table]
        return f"{table} ({state} {done}/{total} tasks)"
    return f"{table} ({state})"


def members(args: object, r: tuple[str, list[observe.Member]]) -> list[Shown]:
    set_name, found = r
    return [members_grid(found, f"members of {set_name}")]


def status(args: object, r: commands.SetStatus) -> list[Shown]:
    watermark = "-" if r.global_watermark is None else r.global_watermark
    out: list[Shown] = [
        f"set {r.set_name}: root {r.root or 'none (use failover)'}, global watermark {watermark}",
        f"automatic failover: {'on' if r.auto_failover else 'off'}",
        f"sync: {_sync_words(r.sync)}",
    ]
    idle = [m for m in r.members if not m.dead and m.reachable and not _served(m)]
    if idle:
        names = ", ".join(m.name for m in idle)
        out.append(
            f"not running: {names}: nothing is ticked or applied there (start `baton cascade "
            "run LOCATION` for each, or its cascade-worker object)"
        )
    out += [
        f"{m.name} is switching to {m.switching_to} since tick {m.switch_tick}: it captures "
        "nothing now; run the same switchover again to finish it"
        for m in r.members
        if m.switching_to is not None
    ]
    return [*out, members_grid(r.members, f"members of {r.set_name}")]


def root_of(args: RootOf, r: Root) -> list[Shown]:
    """The set's root for writers: one line (its password masked), or why there is none."""
    if r.state in (RootState.NONE, RootState.NO_SET):
        return [r.reason]
    assert r.location is not None
    tick = "no tick yet" if r.tick is None else f"tick {r.tick}"
    line = f"set {r.set_name}: root {r.node} at {redact_url(r.location)}, {tick}"
    if r.writable:
        return [f"{line}, writable"]
    return [f"{line}, not writable now", r.reason]


def checked(args: Check, r: dict[str, Any]) -> list[Shown]:
    node, provider = args.node, r["provider"]
    position, provider_position = r["position"], r["provider_position"]
    out: list[Shown] = [
        f"{node} at tick {position}; its provider {provider} at tick {provider_position}"
    ]
    rows = []
    for table, t in r["tables"].items():
        if t["provider_rows"] is None:
            verdict = f"different: {provider} does not replicate it"
        else:
            verdict = "equal" if t["equal"] else "different"
        shown = "-" if t["provider_rows"] is None else str(t["provider_rows"])
        rows.append((table, t["state"], str(t["rows"]), shown, verdict))
    out.append(Grid(("table", "state", f"rows {node}", f"rows {provider}", "result"), rows))
    if not r["equal"] and position != provider_position:
        # Both sides are read while workers may be applying: only a difference that stays once
        # the node is at its provider's tick is real.
        out.append(
            f"note: a node behind its provider shows differences until it catches up "
            f"({node} at tick {position}, {provider} at tick {provider_position}); "
            "check again once both are at the same tick"
        )
    elif not r["equal"]:
        out.append(
            f"note: {node} and {provider} are both at tick {position}, so the difference is "
            f"real: copy the table again (remove-table, then add-table on {node})"
        )
    return out


__all__ = [
    "added",
    "auto_failover",
    "candidates",
    "checked",
    "created",
    "executed",
    "failed_over",
    "found",
    "members",
    "members_grid",
    "missing",
    "removed",
    "replaced",
    "resurrected",
    "root_of",
    "seq_added",
    "seq_removed",
    "seqs",
    "status",
    "switched",
    "sync_set",
    "tables",
    "tagged",
]


def auto_failover(args: object, r: commands.AutoFailover) -> list[Shown]:
    out: list[Shown] = [f"set {r.set}: automatic failover {'on' if r.on else 'off'}"]
    if r.missed:
        out.append(
            f"not reached: {', '.join(r.missed)} (they keep their old setting, which this "
            "newer one outweighs)"
        )
    return out


def _sync_words(k: int) -> str:
    if k == 0:
        return "0 (asynchronous)"
    held = "1 branch holds it" if k == 1 else f"{k} branches hold it"
    return f"{k} (a commit returns once {held})"


def sync_set(args: object, r: commands.SyncSet) -> list[Shown]:
    out: list[Shown] = [f"set {r.set}: sync {_sync_words(r.sync)}"]
    if r.missed:
        out.append(
            f"not reached: {', '.join(r.missed)} (they keep their old setting, which this "
            "newer one outweighs)"
        )
    return out


def _keys(kind: Kind, keys: list[dict[str, Any]], total: int) -> str:
    shown = ", ".join(" ".join(f"{k}={v}" for k, v in key.items()) for key in keys)
    more = f" (and {total - len(keys)} more: --json lists all)" if total > len(keys) else ""
    return f"  {kind.value}: {shown}{more}"


def compared(args: Compare, r: Compared) -> list[Shown]:
    out: list[Shown] = [
        f"{r.node} against its provider {r.provider}, both as of tick {r.position} "
        f"({r.node} paused meanwhile, now resumed)"
    ]
    rows = []
    for table, t in r.tables.items():
        d = t.as_dict(args.keys)
        verdict = "equal" if t.equal else "different"
        rows.append((table, *(str(d[k.value]) for k in Kind), str(t.in_flight), verdict))
    out.append(Grid(("table", "missing", "extra", "different", "in flight", "result"), rows))
    for table, t in r.tables.items():
        d = t.as_dict(args.keys)
        lines = [_keys(k, d[f"{k.value}_keys"], d[k.value]) for k in Kind if d[k.value]]
        if lines and args.keys:
            out += [f"{table}:", *lines]
    if any(t.in_flight for t in r.tables.values()):
        out.append(
            "in flight: keys the provider changed after that tick; the queue sets them at "
            f"{r.node} (not compared)"
        )
    if not r.equal:
        out.append(f"repair with: baton cascade repair {r.node} TABLE")
    return out


def repaired(args: Repair, r: Repaired) -> list[Shown]:
    out: list[Shown] = [
        f"{r.table} at {r.node} repaired as of tick {r.position}: {r.written} row(s) written, "
        f"{r.deleted} deleted"
    ]
    out.append(
        "compared again: equal" if r.equal_after else "compared again: still different (run again)"
    )
    return out


def resynced(args: Resync, r: Resynced) -> list[Shown]:
    again = " (a copy was under way already)" if r.already else ""
    if r.state == "ok":
        return [f"{r.table} at {r.node} copied again from its provider and caught up: ok{again}"]
    return [
        f"{r.table} at {r.node} is {r.state}{again}: {r.node}'s worker copies it; "
        f"'baton cascade tables --node {r.node}' shows when it is ok"
    ]
