"""Section 9 of docs/benchmarks.md: cascaded replication, baton against Londiste 3 + PgQ
(results of :func:`bench.cascade.cascade_bench` and :func:`bench.londiste.londiste_bench`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Targets of the cascade issues (10, then 15: lag p99 root -> leaf at 5,000 changes/s).
THROUGHPUT_RATIO_TARGET = 2.0
LAG_P99_TARGET = 0.5
EFFICIENCY_TARGET = 0.8
#: baton's results in report order: (key in the benchmark's output, name in the tables).
BATON_RUNS = (
    ("sqlite", "baton, sqlite, micro-batch"),
    ("sqlite, low-latency", "baton, sqlite, low-latency"),
    ("postgres", "baton, postgres, micro-batch"),
    ("postgres, low-latency", "baton, postgres, low-latency"),
)


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _per_s(x: float) -> str:
    return f"{x:,.0f}/s"


def _lag(r: dict[str, Any]) -> str:
    return f"{r['p50']:.3f} / {r['p99']:.3f} / {r['max']:.3f} s"


def _ok(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _systems(baton: dict[str, Any], londiste: dict[str, Any] | None) -> list[tuple[str, Any]]:
    out = [(name, baton[key]) for key, name in BATON_RUNS if key in baton]
    if londiste:
        out.append(("Londiste 3 + PgQ, postgres", londiste))
    return out


def summary(baton: dict[str, Any], londiste: dict[str, Any] | None) -> list[str]:
    out: list[str] = []
    for name, pg in _systems(baton, None):
        if "postgres" not in name or not londiste:
            continue
        ratio = pg["throughput"]["events_per_s"] / londiste["throughput"]["events_per_s"]
        out.append(
            f"- **Cascade throughput** (root -> branch -> leaf, {name}, target >= "
            f"{THROUGHPUT_RATIO_TARGET:g}x Londiste 3): {_ok(ratio >= THROUGHPUT_RATIO_TARGET)}; "
            f"baton {_per_s(pg['throughput']['events_per_s'])}, Londiste "
            f"{_per_s(londiste['throughput']['events_per_s'])} ({ratio:.2f}x)."
        )
    for name, r in _systems(baton, None):
        lag5 = r["lag"]["5000"]
        out.append(
            f"- **Cascade lag at 5,000 changes/s** ({name}, target p99 <= {LAG_P99_TARGET:g} s): "
            f"{_ok(lag5['p99'] <= LAG_P99_TARGET)}; p50 {lag5['p50']:.3f} s, p99 "
            f"{lag5['p99']:.3f} s."
        )
    eff = baton.get("efficiency")
    if eff:
        out.append(
            f"- **Apply efficiency** (sink / plain Spark JDBC write, target >= "
            f"{EFFICIENCY_TARGET:g}): {_ok(eff['efficiency'] >= EFFICIENCY_TARGET)}; "
            f"{eff['efficiency']:.2f}."
        )
    return out


def tables(baton: dict[str, Any], londiste: dict[str, Any] | None) -> list[str]:
    systems = _systems(baton, londiste)
    lines = [
        _row(["", "events/s root -> leaf", "root -> branch", "generate on the root", "load"]),
        _row(["---"] * 5),
    ]
    for name, r in systems:
        t = r["throughput"]
        lines.append(
            _row(
                [
                    name,
                    f"**{_per_s(t['events_per_s'])}** ({t['root_to_leaf_s']:.1f} s)",
                    f"{_per_s(t['root_to_branch_per_s'])} ({t['root_to_branch_s']:.1f} s)",
                    f"{_per_s(t['generate_per_s'])}",
                    f"{t['loadavg']:.1f}",
                ]
            )
        )
    lines += [
        "",
        _row(["lag p50 / p99 / max", "at 2,000 changes/s", "at 5,000 changes/s", "unseen"]),
        _row(["---"] * 4),
    ]
    for name, r in systems:
        lag = r["lag"]
        unseen = sum(int(lag[k]["unseen"]) for k in lag)
        lines.append(_row([name, _lag(lag["2000"]), _lag(lag["5000"]), str(unseen)]))
    switches = [(name, r["switchover"]) for name, r in systems if "switchover" in r]
    if switches:
        lines += [
            "",
            _row(
                [
                    "planned switchover at 2,000 changes/s",
                    "command -> first write at the new root p50",
                    "-> the leaf shows it p50 / max",
                    "nodes differing after",
                ]
            ),
            _row(["---"] * 4),
        ]
        for name, sw in switches:
            if "error" in sw:
                lines.append(_row([name, "failed", sw["error"][:80], ""]))
                continue
            lines.append(
                _row(
                    [
                        name,
                        f"{sw['to_new_root_write_p50']:.2f} s",
                        f"{sw['to_leaf_p50']:.2f} / {sw['to_leaf_max']:.2f} s",
                        f"{sw['nodes_differing']} ({sw['trials']} switches)",
                    ]
                )
            )
    memory = [(name, r["memory"]) for name, r in systems if "memory" in r]
    if memory:
        lines += [
            "",
            _row(["peak resident memory", "Spark JVM", "largest Python worker"]),
            _row(["---"] * 3),
            *(
                _row(
                    [
                        name,
                        f"{m['jvm_peak_rss_mib']:,.0f} MiB",
                        f"{m['python_worker_peak_rss_mib']:,.0f} MiB",
                    ]
                )
                for name, m in memory
            ),
        ]
    lines += hops_table(baton.get("hops"))
    eff = baton.get("efficiency")
    if eff:
        lines += [
            "",
            _row(["apply efficiency", "time", "changes/s", "rows written"]),
            _row(["---"] * 4),
            _row(
                [
                    "baton sink `batonapply` (reduce, set-wise upsert/delete, position, epoch)",
                    f"{eff['sink_s']:.2f} s",
                    _per_s(eff["sink_changes_per_s"]),
                    "upserts and deletes",
                ]
            ),
            _row(
                [
                    "plain Spark write (same reduction, `from_json`, `write.jdbc`)",
                    f"{eff['plain_s']:.2f} s",
                    _per_s(eff["changes"] / eff["plain_s"]),
                    f"{eff['plain_rows']:,} inserts",
                ]
            ),
            *(
                [
                    _row(
                        [
                            "the low-latency mode's step (read, reduce, apply: one transaction; "
                            "what its task runs per batch, timed outside Spark)",
                            f"{eff['low_latency_step_s']:.2f} s",
                            _per_s(eff["changes"] / eff["low_latency_step_s"]),
                            "upserts and deletes",
                        ]
                    )
                ]
                if "low_latency_step_s" in eff
                else []
            ),
            _row(
                [
                    "the same apply as `foreachBatch` (rows through the driver)",
                    f"{eff['foreach_batch_s']:.2f} s",
                    _per_s(eff["changes"] / eff["foreach_batch_s"]),
                    "upserts and deletes",
                ]
            ),
            "",
            f"Efficiency (plain time / sink time): **{eff['efficiency']:.2f}**"
            + (
                f"; of the low-latency step: **{eff['low_latency_efficiency']:.2f}**. "
                if "low_latency_efficiency" in eff
                else ". "
            )
            + "Times are Spark's `addBatch` duration of the one micro-batch (reading the source "
            "included), the faster of two runs.",
        ]
    return lines


#: The parts of a micro-batch Spark reports (``durationMs``), in the order they run.
PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def hops_table(hops: dict[str, Any] | None) -> list[str]:
    """Where a micro-batch's time goes (:mod:`bench.hops`): p50 ms of each part."""
    if not hops:
        return []
    heads = ["p50 ms per micro-batch", *PARTS, "whole trigger"]
    rows: list[tuple[str, dict[str, Any]]] = []
    for sink, r in (hops.get("floor") or {}).items():
        rows.append((f"floor: a one-row Python source into `{sink}`", r))
    for key, r in hops.items():
        if "/" in key:
            for node in ("branch", "leaf"):
                if r.get(node, {}).get("batches"):
                    rows.append((f"baton {node}, {key}, 5,000 changes/s", r[node]))
    lines = ["", _row(heads), _row(["---"] * len(heads))]
    for name, r in rows:
        cells = [f"{r[p]['p50']:.0f}" for p in (*PARTS, "triggerExecution")]
        lines.append(_row([name, *cells]))
    return lines


def section(
    baton: dict[str, Any], londiste: dict[str, Any] | None, image: str = "cascade-lag.png"
) -> list[str]:
    """Section 9 of the report; ``image`` is the lag plot it links (a file beside it)."""
    changes = baton.get("postgres", baton.get("sqlite", {})).get("throughput", {}).get("changes")
    lines = [
        "## 9. Cascaded replication (baton against Londiste 3 + PgQ)",
        "",
        "`python -m bench.run --only cascade` (or `python -m bench.cascade` and "
        "`python -m bench.londiste`, each printing JSON). Workload (`bench/accounts_load.py`): "
        "`accounts(id bigint primary key, balance bigint, name text, updated_at)`, about 70% "
        "inserts, 20% updates and 10% deletes in transactions of 100 to 1,000 rows, every "
        "change one row-level trigger event. Both systems run root -> branch -> leaf: baton with "
        "its node services (the root's ticker, a Spark worker per subscriber, one local "
        "SparkSession) in both worker modes: micro-batch (Structured Streaming) and "
        "low-latency (one long-running Spark task per worker); Londiste 3.11 with `pgqd` "
        "and one `londiste worker` per node, tuned for low lag (see `bench/londiste.py`). "
        "Each PostgreSQL run starts its own PostgreSQL 15 server with the same settings "
        "(fsync and synchronous commit off) and puts the three node databases on it.",
        "",
        f"- **Throughput**: {changes:,} changes are written on the root while the branch and "
        "leaf are stopped (baton: paused; Londiste: workers stopped), then both are started "
        "and timed until the leaf's table equals the root's (count and checksum). baton's time "
        "includes restarting two streaming queries or tasks (about a second).",
        "- **Lag**: a writer commits 100-change transactions at a steady rate; a prober reads "
        "the leaf's `max(id)` every 10 ms; lag is commit to first probe that sees it.",
        "- **Apply efficiency** (PostgreSQL only): one micro-batch of every change applied by "
        "baton's sink against a plain Spark write of the same rows from the same source.",
        "- **Planned switchover**: a writer at 2,000 changes/s on the root stops, at once the "
        "switch runs (baton: `switchover`; Londiste: `takeover`), then one row is written at "
        "the new root; times from the command to that row's commit and to the leaf showing "
        "it. The root alternates between two nodes over four switches; then every node is "
        "compared with the root.",
        "- baton's micro-batch workers apply in a Spark Python worker through the `batonapply` "
        "sink; its low-latency workers in one long-running Spark task each "
        "([spark.md](spark.md#worker-modes-micro-batch-or-low-latency)).",
        "",
        f"![lag over the lag runs]({image})",
        "",
        *tables(baton, londiste),
        "",
    ]
    return lines


def lag_svg(baton: dict[str, Any], londiste: dict[str, Any] | None) -> str:
    """The lag root -> leaf over each lag run as SVG text: a panel per rate (changes/s), a line
    per system with a ``series`` ([seconds into the run, lag] per transaction), and a system
    whose result has no series (numbers copied from a report) as dashed lines at its p50 and
    p99."""
    from bench.plot import Level, Panel, Series, lines_svg

    systems = _systems(baton, londiste)
    rates = sorted({rate for _, r in systems for rate in r.get("lag", {})}, key=float)
    panels = []
    for rate in rates:
        series, levels = [], []
        for name, r in systems:
            lag = r.get("lag", {}).get(rate)
            if lag is None:
                continue
            if lag.get("series"):
                series.append(Series(name, [(float(x), float(y)) for x, y in lag["series"]]))
            else:
                levels += [Level(f"{name} p50", lag["p50"]), Level(f"{name} p99", lag["p99"])]
        panels.append(Panel(f"at {float(rate):,.0f} changes/s", series, levels))
    return lines_svg(
        panels,
        title="Cascade lag root -> branch -> leaf over each run",
        xlabel="seconds into the run (one 100-change transaction per point)",
        ylabel="lag (s)",
    )


def plot(baton: dict[str, Any], londiste: dict[str, Any] | None, path: Path) -> None:
    """Lag over the run at 5,000 changes/s, one line per system (matplotlib, from the bench
    extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    for name, r in _systems(baton, londiste):
        series = r["lag"]["5000"].get("series") or []
        if series:
            ax.plot([t for t, _ in series], [lag for _, lag in series], label=name, lw=1)
    ax.set_xlabel("seconds into the run (a 100-change transaction every 20 ms)")
    ax.set_ylabel("lag root -> leaf (s)")
    ax.set_yscale("log")
    ax.set_title("Cascade lag at 5,000 changes/s, root -> branch -> leaf")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.cascade_report BATON.json [LONDISTE.json] [--plot PNG]``: section 9
    from the JSON that ``python -m bench.cascade`` and ``python -m bench.londiste`` print."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m bench.cascade_report")
    parser.add_argument("baton", type=Path)
    parser.add_argument("londiste", type=Path, nargs="?")
    parser.add_argument("--plot", type=Path, help="write the lag plot (PNG) here")
    args = parser.parse_args(argv)
    baton = json.loads(args.baton.read_text())
    londiste = json.loads(args.londiste.read_text()) if args.londiste else None
    if args.plot:
        plot(baton, londiste, args.plot)
    print("\n".join([*section(baton, londiste), *summary(baton, londiste)]))


if __name__ == "__main__":
    main()
