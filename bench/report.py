"""The results as markdown: the tables printed at the end of a run and ``docs/benchmarks.md``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baton.lease.timings import Timings
from bench import cascade_report, groups, placement
from bench.common import Summary, ms, ratio, secs
from bench.failover import FailoverResult
from bench.groups import GroupRecoveryResult
from bench.handover import HandoverResult
from bench.nodes import IdleResult, TakeoverResult
from bench.placement import PlacementResult
from bench.renewal import RenewRow

#: The random election wait every benchmark here runs with (ttl 2 s), said in the text.
_T2 = Timings.for_ttl(2.0)
_WAIT = f"{_T2.election_timeout_min * 1000:g}-{_T2.election_timeout_max * 1000:g} ms"

#: Failover target: a new leader acts within ttl + this many seconds (p99).
FAILOVER_SLACK = 0.5
#: Planned handover target (p99), seconds.
HANDOVER_TARGET = 0.050
#: The etcd backend's own targets (its issue): tighter, as etcd's primitives allow.
ETCD_FAILOVER_SLACK = 0.2
ETCD_HANDOVER_TARGET = 0.010


def failover_slack(system: str) -> float:
    """The failover target's slack over the ttl for ``system`` (``baton/<backend>``)."""
    return ETCD_FAILOVER_SLACK if system == "baton/etcd" else FAILOVER_SLACK


def handover_target(backend: str) -> float:
    """The planned handover target (p99, seconds) on ``backend``."""
    return ETCD_HANDOVER_TARGET if backend == "etcd" else HANDOVER_TARGET


#: Renewal target for 100k leases on the networked backends, seconds.
RENEW_100K_TARGET = 1.0


@dataclass
class Results:
    """Everything one run measured, plus what describes it."""

    mode: str
    date: str
    command: str
    commit: str
    machine: dict[str, str]
    duration: float = 0.0
    load: list[float] = field(default_factory=list)
    failover: list[FailoverResult] = field(default_factory=list)
    handover: list[HandoverResult] = field(default_factory=list)
    renewal: list[RenewRow] = field(default_factory=list)
    takeover: list[TakeoverResult] = field(default_factory=list)
    idle: list[IdleResult] = field(default_factory=list)
    placement: list[PlacementResult] = field(default_factory=list)
    groups: list[GroupRecoveryResult] = field(default_factory=list)
    #: bench.cascade.cascade_bench and bench.londiste.londiste_bench output (JSON-able).
    cascade: dict[str, Any] | None = None
    londiste: dict[str, Any] | None = None
    #: bench.channels.channels_bench output (JSON-able).
    channels: dict[str, Any] | None = None
    #: bench.store_failover.store_failover_bench output (JSON-able).
    store_failover: dict[str, Any] | None = None
    #: bench.compare.suite output (JSON-able).
    compare: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Plots written beside the report, by kind (``failover``, ``cascade_lag``) -> file name;
    #: the report links each from its section.
    plots: dict[str, str] = field(default_factory=dict)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out.extend("| " + " | ".join(row) + " |" for row in rows)
    return out


def _mark(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def _load(pair: tuple[float, float]) -> str:
    return f"{pair[0]:.2f} / {pair[1]:.2f}"


# -- sections ---------------------------------------------------------------------------------


def failover_table(results: Sequence[FailoverResult]) -> list[str]:
    etcd = next((r for r in results if r.system == "etcd"), None)
    ref = etcd.summary if etcd is not None else Summary.of([])
    rows = []
    for r in results:
        s = r.summary
        target = r.ttl + failover_slack(r.system)
        rows.append(
            [
                f"`{r.system}`",
                str(s.n),
                secs(s.p50),
                secs(s.p90),
                secs(s.p99),
                secs(s.maximum),
                secs(s.minimum),
                ratio(s.p50, ref.p50) if r is not etcd else "1.00x",
                ratio(s.p99, ref.p99) if r is not etcd else "1.00x",
                f"{_mark(s.p99 <= target)} (<= {target:g} s)",
            ]
        )
    header = [
        "system", "trials", "p50", "p90", "p99", "max", "min",
        "p50 vs etcd", "p99 vs etcd", "p99 on target",
    ]  # fmt: skip
    return _table(header, rows)


def failover_details(results: Sequence[FailoverResult]) -> list[str]:
    rows = [
        [
            f"`{r.system}`",
            f"{r.setup:.2f} s",
            str(r.entries),
            str(r.refused),
            r.safety,
            str(r.discarded),
            _load(r.load),
        ]
        for r in results
    ]
    header = [
        "system", "3 participants ready", "log entries", "refused (stale epoch)",
        "fenced-log check", "trials discarded", "load before / after",
    ]  # fmt: skip
    out = _table(header, rows)
    out.append("")
    out.append("Every sample, in seconds from the SIGKILL to the new leader's first write:")
    out.append("")
    for r in results:
        out.append(f"- `{r.system}`: " + ", ".join(f"{x:.3f}" for x in r.samples))
    return out


def failover_svg(results: Sequence[FailoverResult]) -> str:
    """Every failover sample of every system as a strip plot (SVG text), its p99 marked."""
    from bench.plot import Strip, strip_svg

    return strip_svg(
        [Strip(r.system, r.samples, {"p99": r.summary.p99}) for r in results],
        title="Unplanned failover: every trial, p99 marked",
        xlabel="seconds from the SIGKILL of the leader to the new leader's first write "
        f"(ttl {results[0].ttl:g} s)"
        if results
        else "seconds",
    )


#: The plots :mod:`bench.run` writes beside docs/benchmarks.md: kind -> file name.
PLOTS = {"failover": "failover.svg", "cascade_lag": "cascade_lag.svg"}


def plots(res: Results) -> dict[str, str]:
    """The plots of ``res``'s results as SVG text, by kind (a key of :data:`PLOTS`): only those
    it has results for."""
    out: dict[str, str] = {}
    if res.failover:
        out["failover"] = failover_svg(res.failover)
    if res.cascade and any(key in res.cascade for key, _ in cascade_report.BATON_RUNS):
        out["cascade_lag"] = cascade_report.lag_svg(res.cascade, res.londiste)
    return out


def handover_table(
    results: Sequence[HandoverResult], failover: Sequence[FailoverResult]
) -> list[str]:
    rows = []
    for r in results:
        e, rs = r.elect_summary, r.resign_summary
        call = Summary.of(r.elect_call)
        fo = next((f for f in failover if f.system == f"baton/{r.backend}"), None)
        fo_p50 = fo.summary.p50 if fo is not None else math.nan
        rows.append(
            [
                f"`{r.backend}`",
                str(e.n),
                ms(e.p50),
                ms(e.p99),
                ms(e.maximum),
                ms(call.p50),
                f"{_mark(e.p99 < handover_target(r.backend))}"
                f" (< {handover_target(r.backend) * 1000:.0f} ms)",
                ms(rs.p50),
                ms(rs.p99),
                ms(rs.maximum),
                ratio(fo_p50, e.p50),
            ]
        )
    header = [
        "backend", "trials", "elect p50", "elect p99", "elect max", "elect() call p50",
        "elect p99 on target", "resign p50", "resign p99", "resign max",
        "unplanned failover p50 / elect p50",
    ]  # fmt: skip
    return _table(header, rows)


def renewal_table(rows_in: Sequence[RenewRow]) -> list[str]:
    rows = []
    base: dict[str, RenewRow] = {}
    for r in rows_in:
        small = base.setdefault(r.backend, r)
        per_lease = r.median / r.n * 1e6
        trips = sorted(set(r.round_trips))
        if r.backend == "sqlite":
            trips_text = "1 transaction (by construction; embedded, no network)"
        elif trips:
            trips_text = "/".join(str(t) for t in trips) + f" ({r.commands})"
        else:
            trips_text = "-"
        target = ""
        if r.n == 100_000:
            target = (
                f"{_mark(r.median < RENEW_100K_TARGET)} (< {RENEW_100K_TARGET:g} s)"
                if r.backend != "sqlite"
                else "(no target)"
            )
        rows.append(
            [
                f"`{r.backend}`",
                f"{r.n:,}",
                f"{r.setup:.1f} s",
                ms(r.median),
                ms(min(r.times)) if r.times else "-",
                ms(max(r.times)) if r.times else "-",
                f"{per_lease:.2f} us",
                ratio(r.median, small.median) if r is not small else "1.00x",
                trips_text,
                ms(r.server_median) if r.server else "-",
                ms(r.median - r.server_median) if r.server else "-",
                str(r.lost + r.warmup_lost),
                target,
            ]
        )
    header = [
        "backend", "N", "acquire N (setup)", "renew median", "min", "max", "per lease",
        "median vs N=1", "round trips per renew", "server-side time (median)",
        "client + network (median - server)", "lost",
        "100k target",
    ]  # fmt: skip
    return _table(header, rows)


def takeover_table(results: Sequence[TakeoverResult]) -> list[str]:
    rows = []
    for r in results:
        s = r.summary
        polls = Summary.of(r.polls)
        rows.append(
            [
                f"`{r.backend}`",
                str(r.nodes),
                "SIGKILL" if r.kind == "kill" else "SIGTERM (graceful)",
                str(s.n),
                secs(s.p50),
                secs(s.p99),
                secs(s.maximum),
                secs(s.minimum),
                secs(Summary.of(r.recover).p50),
                ms(polls.p50),
                _load(r.load),
            ]
        )
    header = [
        "backend", "nodes", "controller stopped by", "trials", "p50", "p99", "max", "min",
        "restart to all live (p50)", "status poll (p50)", "load before / after",
    ]  # fmt: skip
    return _table(header, rows)


def takeover_samples(results: Sequence[TakeoverResult]) -> list[str]:
    return [
        f"- `{r.backend}`, {r.nodes} nodes, {r.kind}: " + ", ".join(f"{x:.3f}" for x in r.samples)
        for r in results
    ]


def idle_table(results: Sequence[IdleResult]) -> list[str]:
    rows = [
        [
            r.what,
            f"{r.leases:,}",
            f"{r.window:.1f} s",
            f"{r.cpu_percent:.2f} %",
            f"{r.rss_mib:.1f} MiB",
            f"{r.rss_max_mib:.1f} MiB",
            _load(r.load),
        ]
        for r in results
    ]
    header = [
        "process", "leases held", "window", "CPU (% of one core)", "RSS (end)", "RSS (max)",
        "load before / after",
    ]  # fmt: skip
    return _table(header, rows)


def takeover_section(res: Results) -> list[str]:
    return [
        "## 5. Controller takeover between node agents",
        "",
        f"Measured {res.date} by `{res.command}` on baton {res.commit}, on the machine above.",
        "",
        "A `LocalCluster` of real `baton node` processes (ttl 2 s) on one store. A trial waits "
        "until a controller is elected and every node is live in `/v1/status`, waits a random "
        "0-1 s (a random point of the controller's 0.4 s renewal cycle), then stops the "
        "controller: **SIGKILL** (its controller lease must expire) or **SIGTERM** (a graceful "
        "stop: the agent resigns and releases its leases). Measured from the signal until a "
        "surviving node's `/v1/status` reports a controller with a higher epoch, polled every "
        "20 ms (each poll is one authenticated HTTP request that reads the store, so the "
        "resolution is 20 ms plus the poll time in the table). The stopped node is then "
        "restarted and the next trial waits until every node is live again; kills and graceful "
        "stops alternate. Each backend and cluster size gets a fresh store.",
        "",
        "The takeover is the controller's `Election`: after a SIGKILL a node campaigns once the "
        "lease expires (1.6-2.0 s after the kill, depending on when the last renewal landed) "
        f"plus its random {_WAIT} election timeout, as in section 1; after a SIGTERM the lease "
        "is released at once and only the election timeout remains.",
        "",
        *takeover_table(res.takeover),
        "",
        "Every sample, in seconds from the signal to a survivor reporting the new controller:",
        "",
        *takeover_samples(res.takeover),
        "",
    ]


def idle_section(res: Results) -> list[str]:
    return [
        "## 6. Idle cost of a node",
        "",
        f"Measured {res.date} by `{res.command}` on baton {res.commit}, on the machine above.",
        "",
        "A `LocalCluster(1)` on SQLite (ttl 2 s), left alone for 5 s after it is live, then "
        "measured over the window: CPU is `utime + stime` of the `baton node` process from "
        "`/proc/PID/stat` divided by the wall time (100 % = one core), RSS is `VmRSS` from "
        "`/proc/PID/status` (at the end of the window, and the largest of the once-a-second "
        "samples). An idle node renews its membership and controller leases every 0.4 s and "
        "watches the member leases; nothing polls its API during the window.",
        "",
        "`bench.lease_holder` is a process with a `baton.lease.keeper.LeaseKeeper` (ttl 10 s, "
        "renewing every lease in one `store.renew` call every 2 s) on its own SQLite store, "
        "measured the same way after it acquired its leases (`add_many`): with no lease (the "
        "cost of the process and the keeper's loop) and with 10k leases. Rows are missing when "
        "`baton.lease.keeper` did not exist in the checkout.",
        "",
        *idle_table(res.idle),
        "",
        *[f"- {r.what}: {r.note}" for r in res.idle if r.note],
        "",
    ]


def _ratio_text(moves: int, bound: int) -> str:
    return f"{placement.move_ratio(moves, bound):.3f}"


def placement_time_table(r: PlacementResult) -> list[str]:
    cases = [
        ("fresh (nothing placed yet)", r.fresh, r.fresh_with_bound, r.fresh_moves, r.fresh_bound),
        (
            "one node departed (from the fresh placement)",
            r.departure,
            r.departure_with_bound,
            r.departure_moves,
            r.departure_bound,
        ),
    ]
    rows = []
    for what, times, with_bound, moves, bound in cases:
        s = Summary.of(times)
        rows.append(
            [
                what,
                str(s.n),
                ms(s.p50),
                ms(s.minimum),
                ms(s.maximum),
                ms(Summary.of(with_bound).p50),
                f"{moves:,}",
                f"{bound:,}",
                f"{_mark(s.p50 < placement.TIME_TARGET)} (< {placement.TIME_TARGET:g} s)",
            ]
        )
    header = [
        "`place` on 50 nodes", "timed runs", "median", "min", "max",
        "with `lower_bound` (median)", "moves", "lower bound", "median on target",
    ]  # fmt: skip
    return _table(header, rows)


def placement_moves_table(r: PlacementResult) -> list[str]:
    n = r.small_nodes
    cases = [
        (f"each of the {n} nodes lost in turn", r.loss_moves, r.loss_bound, r.worst_loss_ratio),
        ("the same node returns", r.return_moves, r.return_bound, r.worst_return_ratio),
    ]
    rows = [
        [
            what,
            f"{moves:,}",
            f"{bound:,}",
            _ratio_text(moves, bound),
            f"{worst:.3f}",
            f"{_mark(worst <= 1.0)} (1.0)",
        ]
        for what, moves, bound, worst in cases
    ]
    header = [
        f"{r.small_objects} groups on {n} nodes", "moves (sum)", "lower bound (sum)",
        "moves / lower bound", "worst single node", "worst on target",
    ]  # fmt: skip
    return _table(header, rows)


def placement_samples(r: PlacementResult) -> list[str]:
    def times(xs: Sequence[float]) -> str:
        return ", ".join(f"{x:.4f}" for x in xs)

    return [
        "Every timed run, in seconds:",
        "",
        f"- fresh: {times(r.fresh)}",
        f"- fresh with `lower_bound`: {times(r.fresh_with_bound)}",
        f"- one node departed: {times(r.departure)}",
        f"- one node departed with `lower_bound`: {times(r.departure_with_bound)}",
        "",
        "Moves / lower bound for each node of the small case, when it is lost and when it "
        "returns: "
        + "; ".join(
            f"{x.node} lost {x.loss_moves}/{x.loss_bound}, back {x.return_moves}/{x.return_bound}"
            for x in r.losses
        )
        + ".",
    ]


def placement_section(res: Results) -> list[str]:
    out = [
        "## 7. Placement function",
        "",
        f"Measured {res.date} by `{res.command}` on baton {res.commit}, on the machine above.",
        "",
        "In-process, no store and no node: the pure function `baton.placement.plan.place` that "
        "the placement controller calls on every reconciliation pass, and "
        "`lower_bound`, the fewest moves (members added to groups) a balanced placement can "
        "make. The groups are objects of one partition each, "
        f"{placement.REPLICAS} replicas, spread evenly over {len(placement.TYPES)} types "
        "(balance is per type); the nodes have no labels and a capacity no placement reaches, "
        "so only balance and the distinct-node rule constrain it.",
        "",
        f"**Time**: {placement.LARGE[0]:,} objects on {placement.LARGE[1]} nodes, placed from "
        "nothing (**fresh**: every member is a move), and from that placement after the first "
        "node departs (**one node departed**: its members are placed on the other "
        f"{placement.LARGE[1] - 1}). Each case runs once untimed (warm-up), then "
        f"{placement.REPEATS} times timed with `time.perf_counter()`; the target is a median "
        f"below {placement.TIME_TARGET:g} s for `place` alone. The same with `lower_bound` "
        "computed after `place` is given too.",
        "",
        f"**Moves**: {placement.SMALL[0]} objects placed fresh on {placement.SMALL[1]} nodes; "
        "then one node departs (`place` on the other nodes, from that placement) and returns "
        "(`place` on all nodes, from the placement without it), and each `place` call's moves "
        "are divided by `lower_bound` for the same input. This is done for each of the "
        f"{placement.SMALL[1]} nodes, from the same starting placement. A ratio of 1.0 is the "
        "target: no move beyond what balance needs (a ratio below 1.0 would mean that the "
        "balance the bound assumes cannot be reached).",
        "",
    ]
    for r in res.placement:
        out += [
            *placement_time_table(r),
            "",
            *placement_moves_table(r),
            "",
            "Largest per-type spread (members of a type on the fullest node minus on the "
            f"emptiest): {r.large_spread} on {r.nodes} nodes, {r.small_spread} on "
            f"{r.small_nodes} nodes (after every `place` above). Load before / after: "
            f"{_load(r.load)}.",
            "",
            *placement_samples(r),
            "",
        ]
    return out


_STAGES = ("nominated", "leading", "serving")


def groups_table(results: Sequence[GroupRecoveryResult]) -> list[str]:
    rows = []
    for r in results:
        for which in _STAGES:
            s = r.summary(which)
            rows.append(
                [
                    f"`{r.backend}`",
                    f"{r.nodes} nodes, {r.groups} groups x {r.replicas}",
                    which,
                    str(s.n),
                    secs(s.p50),
                    secs(s.p90),
                    secs(s.p99),
                    secs(s.maximum),
                    secs(s.minimum),
                ]
            )
    header = ["backend", "cluster", "until", "trials", "p50", "p90", "p99", "max", "min"]
    return _table(header, rows)


def groups_samples(results: Sequence[GroupRecoveryResult]) -> list[str]:
    out = []
    for r in results:
        trials = zip(r.victims, r.led, r.nominated, r.leading, r.serving, strict=False)
        out.append(
            f"- `{r.backend}` (load before / after {_load(r.load)}): "
            + "; ".join(
                f"{victim} ({led} led) {a:.3f} / {b:.3f} / {c:.3f}"
                for victim, led, a, b, c in trials
            )
            + "."
        )
    return out


def groups_section(res: Results) -> list[str]:
    return [
        "## 8. Group leader recovery",
        "",
        f"Measured {res.date} by `{res.command}` on baton {res.commit}, on the machine above.",
        "",
        f"A `LocalCluster` of {groups.NODES} `baton node` processes (ttl {groups.TTL:g} s, "
        f"controller reconcile interval {groups.RECONCILE:g} s) on one store runs "
        f"{groups.OBJECTS} built-in `counter` objects of one partition and {groups.REPLICAS} "
        "replicas each (the leader copies its state to the followers every 0.2 s). A trial "
        "waits until every group is `ok` (a leader, all members placed and following it) and "
        "every node is live in `/v1/placement`, waits a random 0-1 s, SIGKILLs a random node "
        "that leads at least one group and is not the controller, and polls `/v1/placement` (the "
        "group records, read from the store by a surviving node) every "
        f"{groups.POLL * 1000:.0f} ms. Three times are measured from the kill, each until it "
        "holds for **every group the killed node led**:",
        "",
        "- **nominated**: the group's record names another leader (the controller deposed the "
        "killed one);",
        "- **leading**: the new leader's own `/v1/groups` reports it runs the group as leader "
        "at the record's new term (the group has a working leader again);",
        "- **serving**: the group's state is `ok` again: its members include the replacement "
        "for the lost member and every member follows the new leader.",
        "",
        "The killed node is suspect as soon as the controller's poll of it fails (connection "
        "refused), well before its membership lease lapses; a leader is deposed only once a "
        "majority of the group's other members report no live stream from it (seed 001's "
        "guard; the counter's window is max(2.5 x copy interval, 0.5 s) = 0.5 s), and the "
        "member with the highest commit index becomes the leader. The lost member is replaced "
        "only once the node's membership lease lapses (up to the ttl after the kill), so "
        "**serving** includes that wait. Groups in which the killed node was only a follower "
        "are not timed. The node is then restarted, and the next trial waits until the "
        "cluster is rebalanced and every group is `ok`. A restarted node gets members back "
        "but leads no group until a leader moves to it, so the number of groups the killed "
        "node led varies from trial to trial (listed with the samples; a node leading none "
        "is never chosen, as its kill would time nothing). Runs on SQLite unless `--backend` "
        "is given; one fresh store per backend.",
        "",
        *groups_table(res.groups),
        "",
        "Every trial: the killed node (groups it led) nominated / leading / serving, in "
        "seconds from the SIGKILL:",
        "",
        *groups_samples(res.groups),
        "",
    ]


# -- the whole document -----------------------------------------------------------------------


def machine_section(res: Results) -> list[str]:
    m = res.machine
    rows = [
        ["CPU", f"{m['cpu']} (`/proc/cpuinfo` model name)"],
        ["cores", f"{m['nproc']} (`nproc`): a 2-core VM"],
        ["RAM", m["ram"]],
        ["kernel", m["kernel"]],
        ["Python", m["python"]],
        ["SQLite (library)", m["sqlite"]],
        ["Redis", m["redis"]],
        ["PostgreSQL", m["postgres"]],
        ["etcd", m["etcd"]],
    ]
    return _table(["", ""], rows)


def summary_section(res: Results) -> list[str]:
    out: list[str] = []
    baton = [r for r in res.failover if r.system.startswith("baton/")]
    if baton:
        parts = [f"{r.system.split('/')[1]} {secs(r.summary.p99)}" for r in baton]
        ok = all(r.summary.p99 <= r.ttl + failover_slack(r.system) for r in baton)
        out.append(
            "- **Unplanned failover** (ttl 2 s, target p99 <= 2.5 s, etcd 2.2 s): "
            f"{_mark(ok)}; p99 " + ", ".join(parts) + "."
        )
    etcd = next((r for r in res.failover if r.system == "etcd"), None)
    if etcd is not None:
        out.append(
            f"- **etcd election API** (same loop, lease TTL 2 s): p50 {secs(etcd.summary.p50)}, "
            f"p99 {secs(etcd.summary.p99)}."
        )
    if res.handover:
        ok = all(r.elect_summary.p99 < handover_target(r.backend) for r in res.handover)
        parts = [f"{r.backend} {ms(r.elect_summary.p99)}" for r in res.handover]
        out.append(
            f"- **Planned handover** `elect()` (target p99 < 50 ms, etcd 10 ms): {_mark(ok)}; p99 "
            + ", ".join(parts)
            + "."
        )
    if res.renewal:
        networked = [r for r in res.renewal if r.backend != "sqlite"]
        same = all(len(set(r.round_trips)) == 1 for r in networked) and (
            len({r.round_trips[0] for r in networked if r.round_trips}) <= 1
        )
        big = [r for r in networked if r.n == 100_000]
        parts = [f"{r.backend} {ms(r.median)}" for r in res.renewal if r.n == 100_000]
        line = f"- **Renewal**: same round trips at every N: {_mark(same)}"
        if big:
            ok = all(r.median < RENEW_100K_TARGET for r in big)
            line += f"; 100k leases renewed in < 1 s on the networked stores: {_mark(ok)} ("
            line += ", ".join(parts) + ")"
        out.append(line + ".")
    if res.takeover:
        parts = []
        for kind, label in (("kill", "SIGKILL"), ("terminate", "SIGTERM")):
            rows = [r for r in res.takeover if r.kind == kind]
            parts.append(
                f"{label} p99 "
                + ", ".join(f"{r.backend} {r.nodes} nodes {secs(r.summary.p99)}" for r in rows)
            )
        out.append("- **Controller takeover** (node agents, ttl 2 s): " + "; ".join(parts) + ".")
    if res.idle:
        parts = [
            f"{r.what}{f' with {r.leases:,} leases' if r.leases else ''} "
            f"{r.cpu_percent:.2f} % of a core, {r.rss_mib:.0f} MiB RSS"
            for r in res.idle
        ]
        out.append("- **Idle node**: " + "; ".join(parts) + ".")
    for p in res.placement:
        target = placement.TIME_TARGET
        out.append(
            f"- **Placement time** (`place`, {p.objects // 1000}k objects x {p.replicas} on "
            f"{p.nodes} nodes, target median < {target:g} s): {_mark(p.time_ok)}; fresh "
            f"{secs(p.fresh_s)}, one node departed {secs(p.departure_s)}."
        )
        out.append(
            f"- **Placement moves / lower bound** (one of {p.small_nodes} nodes lost, then "
            f"back; target 1.0): {_mark(p.moves_ok)}; lost "
            f"{_ratio_text(p.loss_moves, p.loss_bound)} (worst node {p.worst_loss_ratio:.3f}), "
            f"returned {_ratio_text(p.return_moves, p.return_bound)} (worst node "
            f"{p.worst_return_ratio:.3f})."
        )
    for g in res.groups:
        parts = [
            f"{which} p50 {secs(g.summary(which).p50)} / p99 {secs(g.summary(which).p99)}"
            for which in _STAGES
        ]
        out.append(
            f"- **Group leader recovery** ({g.backend}, {g.nodes} nodes, {g.groups} groups, "
            f"ttl {groups.TTL:g} s, SIGKILL of a group leader's node, not the controller): "
            + "; ".join(parts)
            + "."
        )
    if res.cascade:
        out += cascade_report.summary(res.cascade, res.londiste)
    if res.compare:
        from bench.compare import summary as compare_summary

        out += compare_summary(res.compare)
    return out


def _election_tasks(r: HandoverResult) -> list[str]:
    """The election's own tasks among those left running after ``Election.stop()`` (not the
    store's in-flight queries, which end by themselves once cancelled)."""
    return [t for t in r.stuck_tasks if t.startswith("election")]


def findings(res: Results) -> list[str]:
    """Notes that depend on what this run observed."""
    out: list[str] = []
    for r in res.renewal:
        if r.n == 100_000 and r.backend != "sqlite" and r.server:
            out.append(
                f"Renewing 100k leases on {r.backend}: {ms(r.median)} median at the client, of "
                f"which {ms(r.server_median)} on the server; the other "
                f"{ms(r.median - r.server_median)} is the client (encoding the request, "
                "decoding the answer, building 100k `Lease` objects) and the loopback transfer"
                + (
                    ": the 1 s target is missed on the client side."
                    if r.median >= RENEW_100K_TARGET > r.server_median
                    else "."
                )
            )
    stuck = [r for r in res.handover if _election_tasks(r)]
    if stuck:
        out.append(
            "`Election.stop()` returned while its own tasks were still running ("
            + "; ".join(f"{r.backend}: {', '.join(_election_tasks(r))}" for r in stuck)
            + "). On Redis the change-feed task sometimes absorbs the cancellation while it "
            "waits for a pub/sub message (`_PubSubListener.wait` -> redis-py "
            "`PubSub.get_message`), logs `task did not stop in time`, and keeps running after "
            "the store is closed; `asyncio.run()` can then hang at exit. The benchmark "
            "cancels leftover tasks again before closing the stores."
        )
    return out


def document(res: Results) -> str:
    load = f"{min(res.load):.2f}-{max(res.load):.2f}" if res.load else "unknown"
    lines: list[str] = [
        "# Benchmarks",
        "",
        f"Measured {res.date} by `{res.command}` ({res.mode} run, {res.duration / 60:.1f} min) "
        f"on baton {res.commit}. This file is written by `bench/run.py`; re-run `make bench` "
        "to refresh it.",
        "",
        "## Machine",
        "",
        *machine_section(res),
        "",
        "A **2-core VM**: the store server, three participant processes and the benchmark "
        "driver share two cores, so every number here includes CPU contention that a real "
        "deployment (store on its own host) would not have. The 1-minute load average during "
        f"the run was {load}; it counts the benchmark's own processes too (a renewal of 100k "
        "leases keeps the client and the server busy). Other people's test suites may run on this "
        "machine at the same time, so results may be affected by load: above ~1.5 the run "
        "competed for the CPUs and tails (p99, max) may be inflated. Each benchmark section "
        "lists the load before and after it.",
        "",
        "## How to run",
        "",
        "- `make bench`: installs etcd, Londiste 3 + PgQ and the PostgreSQL JDBC driver if "
        "missing (`BATON_BENCH=1 ./scripts/setup.sh`), then `.venv/bin/python -m bench.run`, the "
        "full run (about 20 minutes), which rewrites this file.",
        "- `.venv/bin/python -m bench.run --quick`: 3 kills (failover, takeover, group "
        "recovery) and 10 handovers per backend, N up to 10k (about 2 minutes); prints only, "
        "unless `--output PATH`.",
        "- `--only failover|etcd|handover|renewal|takeover|idle|placement|groups|cascade` "
        "(repeatable), `--backend sqlite|redis|postgres|etcd` (repeatable; `takeover` and `groups` "
        "run on SQLite unless backends are named, `placement` runs in-process on no backend), "
        "`--trials N`, `--wait-idle` (first wait up to 10 minutes for a load average below "
        "1.5).",
        "",
        "## Summary",
        "",
        *summary_section(res),
        "",
    ]
    if res.errors:
        lines += ["**Benchmarks that failed in this run:**", ""]
        lines += [f"- {e}" for e in res.errors]
        lines.append("")
    if res.failover:
        lines += [
            "## 1-2. Unplanned failover (baton on each backend, etcd as the reference)",
            "",
            "Three participant processes campaign for one lease (ttl 2 s: baton renews every "
            f"0.4 s, a follower campaigns {_WAIT} after the lease is free) and the leader "
            "appends `(epoch, id)` to a shared fenced log (`baton.testing.fenced.FencedLog`) "
            "every 20 ms. A trial waits until a leader is writing, SIGKILLs it after a random "
            "0-1 s (so that the kill lands at a random point of the renewal cycle), and measures "
            "from the kill to the **first log entry with a higher epoch**: a new leader "
            "*acting*, not just elected (the entry's time is the writer's `time.monotonic()`, "
            "the same host clock as the kill's). A replacement participant is then started and "
            "the next kill waits until it campaigns, so every kill happens with three "
            "participants. Each backend gets its own fresh server and namespace.",
            "",
            "baton participants run `python -m bench.baton_participant`, which is "
            "`baton.testing.participant` unchanged plus readiness lines on stdout. etcd "
            "participants (`bench/etcd_participant.py`) use etcd's election API through its "
            "JSON gateway: a lease with TTL 2 kept alive every 0.5 s, `POST "
            "/v3/election/campaign` (blocks until leader), the leader key's creation revision "
            "as the epoch, the same 20 ms appends while the lease is alive by the local clock. "
            "etcd is one member on loopback with its data in a temp dir on the VM disk (etcd 3.4 "
            "has no `--unsafe-no-fsync`, so it fsyncs; Redis runs without persistence and "
            "PostgreSQL with `fsync=off`, as in baton's tests).",
            "",
            "The lower bound for both systems is the lease ttl minus the renewal period (the "
            "kill lands at a random point between two renewals: baton 1.6-2.0 s, etcd 1.5-2.0 "
            "s), plus detection (baton: a follower wakes at the lease's expiry by the store "
            f"clock, then waits its random {_WAIT} election timeout; etcd: the lessor revokes "
            "expired leases every 500 ms and the next candidate's watch fires).",
            "",
            *failover_table(res.failover),
            "",
            *failover_details(res.failover),
            "",
        ]
        if "failover" in res.plots:
            lines += [
                f"![every failover sample per system, p99 marked]({res.plots['failover']})",
                "",
            ]
    if res.handover:
        lines += [
            "## 3. Planned handover and resignation",
            "",
            "One process, two `Election`s on the same lease, each with its own store client, "
            "`Timings.for_ttl(2)`. **elect**: the leader calls `elect(other.node_id)`; measured "
            "from the call to the other's event stream delivering `NewState(LEADER)` (emitted "
            "the moment it becomes leader; `is_leader` is checked true). **resign**: the leader "
            "calls `resign()`; measured until the other leads. A resigned lease is free for "
            f"everyone, so the follower first waits its random {_WAIT} election timeout (no "
            "stampede), which is what resign measures; `elect` names the successor, which "
            "campaigns at once. Before each trial both participants agree on the current "
            "leader. `elect() call` is how long the old leader's call took (stop acting, "
            "release with the successor named).",
            "",
            *handover_table(res.handover, res.failover),
            "",
            "Load before / after: "
            + ", ".join(f"{r.backend} {_load(r.load)}" for r in res.handover)
            + ".",
            "",
        ]
        stuck = [r for r in res.handover if _election_tasks(r)]
        if stuck:
            lines += [
                "Election tasks still running after `Election.stop()` returned (cancelled "
                "again by the benchmark): "
                + "; ".join(f"{r.backend}: {', '.join(_election_tasks(r))}" for r in stuck)
                + ". See the notes.",
                "",
            ]
    if res.renewal:
        lines += [
            "## 4. Renewal cost",
            "",
            "One holder acquires N leases (ttl 60 s, concurrent batches of 64 acquires), then "
            "`store.renew(holder, leases)` is timed: one untimed warm-up call, then 5 timed "
            "calls; the table gives their median, min and max wall time as the client sees it "
            "(including building the request and the N returned `Lease` objects). Fresh "
            "namespace per N, one server per backend.",
            "",
            "Round trips are verified on the server: for **Redis**, `INFO commandstats` before "
            "and after each timed call counts the commands clients sent (those the Lua scripts "
            "run internally are excluded) and `EVALSHA`'s `usec` gives the server-side time; "
            "for **PostgreSQL** (`pg_stat_statements` is not loaded), the server logs every "
            "statement with its duration (`log_min_duration_statement = 0`, switched on only "
            "for the timed calls) and the `execute` lines are counted; by construction `renew` "
            "is a single `UPDATE ... FROM unnest(...)` statement sent with one `execute`. "
            "**SQLite** is embedded: no round trip, and `renew` is one transaction by "
            "construction (one function on the store's connection thread, one `UPDATE` per "
            "lease).",
            "",
            *renewal_table(res.renewal),
            "",
            "Load before / after: "
            + ", ".join(
                f"{r.backend} N={r.n:,} {_load(r.load)}" for r in res.renewal if r.n >= 10_000
            )
            + ".",
            "",
        ]
    if res.takeover:
        lines += takeover_section(res)
    if res.idle:
        lines += idle_section(res)
    if res.placement:
        lines += placement_section(res)
    if res.groups:
        lines += groups_section(res)
    if res.cascade:
        image = res.plots.get("cascade_lag")
        lines += cascade_report.section(res.cascade, res.londiste, *([image] if image else []))
    if res.channels:
        from bench.channels import section as channels_section

        plot = res.channels.get("plot")
        lines += [*channels_section(res.channels, Path(plot).name if plot else None), ""]
    if res.store_failover:
        from bench.store_failover import section as store_failover_section

        lines += store_failover_section(res.store_failover)
    if res.compare:
        from bench.compare import section as compare_section

        lines += compare_section(res.compare)
    lines += [
        "## Notes",
        "",
        "- Percentiles interpolate linearly between order statistics (numpy's default): with "
        "20 samples, p99 lies between the 19th and 20th value, so p99 is close to the max; "
        "treat it as a tail indicator, not a precise 99th percentile.",
        "- Latencies are wall-clock on a shared 2-core VM; compare systems within one run "
        "rather than across runs.",
        *[f"- {n}" for n in [*findings(res), *res.notes]],
        "",
    ]
    return "\n".join(lines)


def console(res: Results) -> str:
    """The readable summary printed at the end of a run (the tables without the prose)."""
    lines = ["", "=== Summary ===", *summary_section(res), ""]
    if res.failover:
        lines += ["Unplanned failover:", *failover_table(res.failover), ""]
    if res.handover:
        lines += ["Planned handover:", *handover_table(res.handover, res.failover), ""]
    if res.renewal:
        lines += ["Renewal:", *renewal_table(res.renewal), ""]
    if res.takeover:
        lines += ["Controller takeover:", *takeover_table(res.takeover), ""]
    if res.idle:
        lines += ["Idle node:", *idle_table(res.idle), ""]
    for p in res.placement:
        lines += ["Placement function:", *placement_time_table(p), ""]
        lines += [*placement_moves_table(p), ""]
    if res.groups:
        lines += ["Group leader recovery:", *groups_table(res.groups), ""]
    if res.cascade:
        lines += ["Cascade:", *cascade_report.tables(res.cascade, res.londiste), ""]
    if res.errors:
        lines += ["Failed:", *[f"  {e}" for e in res.errors], ""]
    return "\n".join(lines)
