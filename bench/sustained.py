"""Issue 33's sustained run: the queue of a cascade under a steady writer for many minutes.

``python -m bench.sustained --minutes N [--rate 5000] [--system baton|londiste|both]``

Both systems run root -> branch -> leaf on a PostgreSQL 15 server of their own, set up as the
cascade benchmark sets them up: baton by :func:`bench.cascade.baton_set` (node services in
threads, low-latency Spark workers, one local SparkSession), Londiste 3 + PgQ by
:func:`bench.londiste.cascade` (``pgqd`` and a ``londiste worker`` per node, the same tuning).
A writer commits 100-change transactions of the :mod:`bench.accounts_load` mix at ``--rate``
changes per second on the root for the whole run, and each transaction's lag (commit on the
root to the first probe that sees it on the leaf) is taken by :func:`bench.accounts_load.steady`.

Every ``--sample`` seconds (10), for each node's queue:

- the size on disk of its event table(s) with their indexes and TOAST
  (``pg_total_relation_size``; the indexes alone too): baton's ``baton_event``; PgQ's
  ``pgq.event_<id>`` and its rotating children ``pgq.event_<id>_0..2``; and of the tick
  table (``baton_tick``, ``pgq.tick``);
- ``n_live_tup`` and ``n_dead_tup`` (``pg_stat_user_tables``, summed over the event tables),
  and the count of (auto)vacuums of them so far;
- for PgQ, which of its tables is current (a change is a rotation).

A line per minute is printed as the run goes (the queue's figures; the lag is known per minute
once the writer stops, as :func:`~bench.accounts_load.steady` returns its series at the end),
then a table of every minute. The JSON (``--json``) holds every sample and the per-minute
summary of each system; the plot (``--plot``, SVG or PNG by its suffix) puts the systems side by
side per minute: queue size, dead tuples and lag p99.

PgQ rotates its event tables every ``queue_rotation_period`` (2 hours by default), so a run
shorter than that would only show its tables filling; the run sets the period on every node's
queue to ``--pgq-rotation`` (5 minutes) so that rotations happen within it. Nothing else
differs from :mod:`bench.londiste`. Autovacuum runs with PostgreSQL's defaults on both servers.

The systems run one after the other (``both``: baton, then Londiste), never at once. This
benchmark is not part of ``make bench`` (an hour for both at 30 minutes each).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from baton.service.worker import LOW_LATENCY
from bench import accounts_load, londiste
from bench.cascade import _warm, baton_set, bench_session
from bench.common import REPO, loadavg, quantile, temp_dir

#: The nodes whose queues are sampled (a leaf carries no queue in either system: it is
#: sampled too, and shows so).
NODES = ("root", "branch", "leaf")
#: The writer's transaction size (:func:`bench.accounts_load.steady`'s default).
TX_SIZE = 100
DEFAULT_JSON = Path("/tmp/baton-sustained.json")
DEFAULT_PLOT = REPO / "docs" / "sustained.svg"
MIB = 1024 * 1024


# -- sampling a queue ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Queue:
    """Where one node's queue is: its database and a function that names its event tables and
    its tick table (PgQ's event tables are found in its catalog, and may not exist yet)."""

    url: str
    tables: Callable[[psycopg.Connection[Any]], tuple[list[str], str | None, str | None]]


def baton_tables(_: psycopg.Connection[Any]) -> tuple[list[str], str | None, str | None]:
    """baton's queue: one event table, one tick table; no rotation."""
    return ["baton_event"], "baton_tick", None


def pgq_tables(conn: psycopg.Connection[Any]) -> tuple[list[str], str | None, str | None]:
    """PgQ's queue :data:`bench.londiste.QUEUE` on this node: the parent event table (empty:
    events go to its children) and its ``queue_ntables`` children, the tick table, and the
    current child (empty lists when the node has no such queue)."""
    row = conn.execute(
        "SELECT queue_data_pfx, queue_ntables, queue_cur_table FROM pgq.queue "
        "WHERE queue_name = %s",
        (londiste.QUEUE,),
    ).fetchone()
    if row is None:
        return [], None, None
    prefix, ntables, current = row
    return [prefix, *(f"{prefix}_{i}" for i in range(ntables))], "pgq.tick", f"{prefix}_{current}"


_STATS = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint,
       coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint,
       coalesce(sum(s.n_live_tup), 0)::bigint, coalesce(sum(s.n_dead_tup), 0)::bigint,
       coalesce(sum(s.autovacuum_count), 0)::bigint, coalesce(sum(s.vacuum_count), 0)::bigint
FROM unnest(%s::text[]) AS t(name)
JOIN pg_class c ON c.oid = to_regclass(t.name)
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
"""


def sample_queue(conn: psycopg.Connection[Any], queue: Queue) -> dict[str, Any]:
    """One sample of a node's queue (sizes in bytes, counts of rows and of vacuums)."""
    events, ticks, current = queue.tables(conn)
    row = conn.execute(_STATS, (events,)).fetchone()
    assert row is not None
    size, index_size, live, dead, autovacuums, vacuums = (int(v) for v in row)
    tick_size = 0
    if ticks is not None:
        got = conn.execute("SELECT pg_total_relation_size(to_regclass(%s))", (ticks,)).fetchone()
        tick_size = int(got[0] or 0) if got else 0
    return {
        "size": size,
        "index_size": index_size,
        "live": live,
        "dead": dead,
        "autovacuums": autovacuums,
        "vacuums": vacuums,
        "tick_size": tick_size,
        "current": current,
    }


# -- one system's run ------------------------------------------------------------------------


def _lag_minutes(series: Sequence[tuple[float, float]], minutes: int) -> list[dict[str, Any]]:
    """Each minute's lag quantiles from steady()'s (commit time since its start, lag) series."""
    buckets: list[list[float]] = [[] for _ in range(minutes)]
    for t, lag in series:
        buckets[min(int(t // 60), minutes - 1)].append(lag)
    return [
        {
            "transactions": len(b),
            "changes_per_s": len(b) * TX_SIZE / 60,
            "lag_p50": quantile(b, 0.5),
            "lag_p99": quantile(b, 0.99),
            "lag_max": max(b, default=math.nan),
        }
        for b in buckets
    ]


def _queue_minutes(
    samples: list[dict[str, Any]], minutes: int, base: dict[str, Any]
) -> list[dict[str, Any]]:
    """Per minute and node: the queue's size and rows at the minute's end, their maxima in the
    minute, the dead tuples' mean, and the (auto)vacuums and PgQ rotations in the minute."""
    out: list[dict[str, Any]] = []
    before = base
    for m in range(minutes):
        inside = [s for s in samples if m * 60 < s["t"] <= (m + 1) * 60 + 1e-6]
        if not inside:
            out.append({})
            continue
        end = inside[-1]
        nodes: dict[str, Any] = {}
        for node, last in end["nodes"].items():
            seen = [s["nodes"][node] for s in inside]
            prev = before["nodes"][node]
            rotations = sum(
                1
                for a, b in zip([prev, *seen], seen, strict=False)
                if b["current"] is not None and a["current"] != b["current"]
            )
            nodes[node] = {
                "size_mib": last["size"] / MIB,
                "size_max_mib": max(s["size"] for s in seen) / MIB,
                "index_mib": last["index_size"] / MIB,
                "tick_size_mib": last["tick_size"] / MIB,
                "live": last["live"],
                "live_max": max(s["live"] for s in seen),
                "dead": last["dead"],
                "dead_max": max(s["dead"] for s in seen),
                "dead_mean": sum(s["dead"] for s in seen) / len(seen),
                "autovacuums": last["autovacuums"] - prev["autovacuums"],
                "vacuums": last["vacuums"] - prev["vacuums"],
                "rotations": rotations,
            }
        out.append({"minute": m + 1, "load": end["load"], "nodes": nodes})
        before = end
    return out


def measure(
    console: Console,
    name: str,
    queues: dict[str, Queue],
    root: str,
    leaf: str,
    *,
    minutes: int,
    rate: float,
    every: float,
    check: Callable[[], None],
) -> dict[str, Any]:
    """Write at ``rate`` on ``root`` for ``minutes`` while sampling ``queues`` every ``every``
    seconds (a line per minute on ``console``); then the per-minute summary, with the lag at
    ``leaf`` per minute. ``check`` raises if the system under test failed."""
    conns = {n: psycopg.connect(q.url, autocommit=True) for n, q in queues.items()}
    samples: list[dict[str, Any]] = []
    outcome: dict[str, Any] = {}

    def write() -> None:
        try:
            outcome["steady"] = accounts_load.steady(root, leaf, rate, minutes * 60.0, seed=33)
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    def sample(t: float) -> dict[str, Any]:
        nodes = {n: sample_queue(conns[n], q) for n, q in queues.items()}
        return {"t": round(t, 2), "load": loadavg(), "nodes": nodes}

    try:
        base = sample(0.0)
        writer = threading.Thread(target=write, name="sustained-writer", daemon=True)
        t0 = time.monotonic()
        writer.start()
        per_minute = round(60 / every)
        k = 0
        while k < minutes * per_minute:
            k += 1
            time.sleep(max(0.0, t0 + k * every - time.monotonic()))
            samples.append(sample(time.monotonic() - t0))
            check()
            if "error" in outcome:
                raise RuntimeError(f"the writer failed: {outcome['error']}")
            if k % per_minute == 0:
                _say_minute(console, name, samples, k // per_minute, base)
        writer.join()
    finally:
        for conn in conns.values():
            conn.close()
    if "error" in outcome:
        raise RuntimeError(f"the writer failed: {outcome['error']}")
    steady = outcome["steady"]
    series = steady.pop("series")
    lags = _lag_minutes(series, minutes)
    queue = _queue_minutes(samples, minutes, base)
    rows = [{**q, **lag} for q, lag in zip(queue, lags, strict=True)]
    return {
        "system": name,
        "rate": rate,
        "minutes": minutes,
        "sample_seconds": every,
        "steady": steady,
        "base": base,
        "samples": samples,
        "per_minute": rows,
        "lag_series": series,
    }


def _say_minute(
    console: Console, name: str, samples: list[dict[str, Any]], minute: int, base: dict[str, Any]
) -> None:
    row = _queue_minutes(samples, minute, base)[-1]
    parts = []
    for node in ("root", "branch"):
        n = row["nodes"].get(node)
        if n:
            parts.append(
                f"{node} {n['size_mib']:7.1f} MiB (max {n['size_max_mib']:6.1f}) "
                f"live {n['live']:>7,} dead {n['dead']:>7,} (max {n['dead_max']:>7,}) "
                f"av {n['autovacuums']}" + (f" rot {n['rotations']}" if n["rotations"] else "")
            )
    console.print(
        f"[bold]{name}[/] min {minute:>2}  " + "  |  ".join(parts) + f"  load {row['load']}"
    )


def run_baton(console: Console, minutes: int, rate: float, every: float) -> dict[str, Any]:
    """baton root -> branch -> leaf on PostgreSQL with low-latency workers."""
    with temp_dir("sustained") as directory:
        spark = bench_session(directory)
        try:
            with baton_set("postgres", directory / "baton", spark, LOW_LATENCY) as s:
                _warm(s)
                queues = {n: Queue(s.target(n), baton_tables) for n in NODES}
                console.print(f"baton: cascade running, writing {rate:,.0f} changes/s")
                result = measure(
                    console, "baton", queues, s.target("root"), s.target("leaf"),
                    minutes=minutes, rate=rate, every=every, check=s.check,
                )  # fmt: skip
                result["leaf_equals_root"] = _equal(s.target("root"), s.target("leaf"))
                s.check()
        finally:
            spark.stop()
    result["mode"] = LOW_LATENCY
    return result


def run_londiste(
    console: Console, minutes: int, rate: float, every: float, rotation: str
) -> dict[str, Any]:
    """Londiste 3 + PgQ root -> branch -> leaf, as :mod:`bench.londiste` runs it, with PgQ's
    rotation period set to ``rotation`` on every node's queue."""
    version = londiste.ensure_installed()
    settings = londiste.Settings()
    with londiste.cascade(settings) as c:
        for node in NODES:
            with psycopg.connect(c.url(node), autocommit=True) as conn:
                if pgq_tables(conn)[0]:
                    conn.execute(
                        "SELECT pgq.set_queue_config(%s, 'rotation_period', %s)",
                        (londiste.QUEUE, rotation),
                    )
        queues = {n: Queue(c.url(n), pgq_tables) for n in NODES}
        console.print(f"londiste: cascade running, writing {rate:,.0f} changes/s")
        result = measure(
            console, "londiste", queues, c.url("root"), c.url("leaf"),
            minutes=minutes, rate=rate, every=every, check=c._check_alive,
        )  # fmt: skip
        result["leaf_equals_root"] = _equal(c.url("root"), c.url("leaf"))
    result["version"] = version
    result["settings"] = {**asdict(settings), "queue_rotation_period": rotation}
    return result


def _equal(root: str, leaf: str) -> bool:
    """The leaf caught up and equal to the root (count and checksum) after the run."""
    try:
        accounts_load.wait_equal(root, leaf, 300)
    except TimeoutError:
        return False
    return accounts_load.signature(root) == accounts_load.signature(leaf)


# -- report and plot ---------------------------------------------------------------------------


def table(result: dict[str, Any]) -> Table:
    """The per-minute summary of one system as a rich table."""
    t = Table(title=f"{result['system']}: {result['rate']:,.0f} changes/s, per minute")
    for col in (
        "min", "root MiB", "root dead max", "root av", "branch MiB", "branch dead max",
        "branch av", "writes/s", "lag p50 ms", "lag p99 ms", "load",
    ):  # fmt: skip
        t.add_column(col, justify="right")
    for row in result["per_minute"]:
        if not row.get("nodes"):
            continue
        r, b = row["nodes"]["root"], row["nodes"]["branch"]
        t.add_row(
            str(row["minute"]), f"{r['size_mib']:.1f}", f"{r['dead_max']:,}",
            str(r["autovacuums"]), f"{b['size_mib']:.1f}", f"{b['dead_max']:,}",
            str(b["autovacuums"]), f"{row['changes_per_s']:,.0f}",
            f"{row['lag_p50'] * 1000:.0f}", f"{row['lag_p99'] * 1000:.0f}", f"{row['load']:.1f}",
        )  # fmt: skip
    return t


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    """Per minute, one line per system and node: the queue's size on disk, its dead tuples
    (the minute's maximum) and the lag p99 at the leaf (matplotlib, from the bench extra)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: a small SVG
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 9), dpi=100, sharex=True)
    colours = {"baton": "tab:blue", "londiste": "tab:orange"}
    for name, result in results.items():
        rows = [r for r in result["per_minute"] if r.get("nodes")]
        xs = [r["minute"] for r in rows]
        colour = colours.get(name, "tab:gray")
        for node, style in (("root", "-"), ("branch", "--")):
            axes[0].plot(
                xs, [r["nodes"][node]["size_mib"] for r in rows], style, color=colour,
                marker="o", ms=3, label=f"{name} {node}",
            )  # fmt: skip
            axes[1].plot(
                xs, [r["nodes"][node]["dead_max"] for r in rows], style, color=colour,
                marker="o", ms=3, label=f"{name} {node}",
            )  # fmt: skip
        axes[2].plot(
            xs, [r["lag_p99"] * 1000 for r in rows], "-", color=colour, marker="o", ms=3,
            label=f"{name} p99",
        )  # fmt: skip
        axes[2].plot(
            xs, [r["lag_p50"] * 1000 for r in rows], ":", color=colour, label=f"{name} p50"
        )
    rate = next(iter(results.values()))["rate"]
    axes[0].set_title(f"Sustained {rate:,.0f} changes/s, root -> branch -> leaf, per minute")
    axes[0].set_ylabel("event tables on disk (MiB)")
    axes[1].set_ylabel("dead tuples (max in minute)")
    axes[2].set_ylabel("lag root -> leaf (ms)")
    axes[2].set_xlabel("minute of the run")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """The per-minute table of docs/benchmarks.md: for each system the root's and the branch's
    event tables on disk at the minute's end, the dead tuples' maximum in the minute, the
    autovacuums (baton) or rotations (PgQ) of the root's queue, and the lag at the leaf."""
    names = list(results)
    head = ["min"]
    for name in names:
        head += [
            f"{name} root / branch MiB",
            f"{name} dead max root / branch",
            f"{name} {'rotations' if name == 'londiste' else 'autovacuums'} root",
            f"{name} lag p50 / p99 ms",
        ]
    head.append("load")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    minutes = max(len(r["per_minute"]) for r in results.values())
    for m in range(minutes):
        cells = [str(m + 1)]
        load = []
        for name in names:
            rows = results[name]["per_minute"]
            row = rows[m] if m < len(rows) else {}
            if not row.get("nodes"):
                cells += ["", "", "", ""]
                continue
            r, b = row["nodes"]["root"], row["nodes"]["branch"]
            turns = r["rotations"] if name == "londiste" else r["autovacuums"]
            cells += [
                f"{r['size_mib']:.0f} / {b['size_mib']:.0f}",
                f"{r['dead_max']:,} / {b['dead_max']:,}",
                str(turns),
                f"{row['lag_p50'] * 1000:.0f} / {row['lag_p99'] * 1000:.0f}",
            ]
            load.append(f"{row['load']:.1f}")
        cells.append(", ".join(load))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _revision() -> str:
    res = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return res.stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sustained", description=__doc__)
    parser.add_argument("--minutes", type=int, help="minutes of writing per system")
    parser.add_argument("--rate", type=float, default=5000.0, help="changes per second")
    parser.add_argument("--system", choices=("baton", "londiste", "both"), default="both")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--pgq-rotation", default="5 minutes", help="PgQ's rotation period")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument(
        "--report",
        action="store_true",
        help="run nothing: redraw the plot from --json and print its per-minute markdown table",
    )
    args = parser.parse_args(argv)
    if args.report:
        systems = json.loads(args.json.read_text())["systems"]
        plot(systems, args.plot)
        print(markdown(systems))
        return
    if args.minutes is None or args.minutes < 1:
        parser.error("--minutes N (N >= 1) is needed")
    if args.rate <= 0 or not 0 < args.sample <= 60 or 60 % args.sample:
        parser.error("--rate > 0 and --sample a divisor of 60")
    console = Console(stderr=True, width=180)  # a log file is wide too
    out: dict[str, Any] = {
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "revision": _revision(),
        "loadavg_start": loadavg(),
        "systems": {},
    }
    systems = ("baton", "londiste") if args.system == "both" else (args.system,)
    for system in systems:
        console.rule(f"{system}: {args.minutes} min at {args.rate:,.0f} changes/s")
        if system == "baton":
            result = run_baton(console, args.minutes, args.rate, args.sample)
        else:
            result = run_londiste(console, args.minutes, args.rate, args.sample, args.pgq_rotation)
        out["systems"][system] = result
        out["finished"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        args.json.write_text(json.dumps(out, indent=1))  # each system kept as soon as it ends
        console.print(table(result))
        console.print(
            f"{system}: leaf equals root after the run: {result['leaf_equals_root']}; "
            f"unseen transactions {result['steady']['unseen']}; json {args.json}"
        )
    plot(out["systems"], args.plot)
    console.print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
