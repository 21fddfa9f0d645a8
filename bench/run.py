"""Entry point of the benchmark suite: ``python -m bench.run [--quick] [--only NAME]...``.

Benchmarks (each starts its own servers in a temp dir and stops them, except ``placement``):

``failover``  unplanned failover of baton on SQLite, Redis and PostgreSQL (SIGKILL the leader)
``etcd``      the same failover with etcd's election API, as the reference
``handover``  planned handover (``elect``) and ``resign`` between two Elections
``renewal``   one ``renew`` call for N = 1 ... 100k leases, with round trips verified
``takeover``  controller takeover between ``baton node`` agents (SIGKILL / SIGTERM), 3 and 5 nodes;
              on SQLite unless ``--backend`` is given (a full run stays under ~4 minutes)
``idle``      CPU and RSS of an idle ``baton node``
``placement`` the pure placement function in-process (no servers, backend-independent): ``place``
              for 10k objects on 50 nodes, and its moves versus ``lower_bound`` when one of
              10 nodes is lost and returns
``cascade``   cascaded replication root -> branch -> leaf: baton (SQLite and PostgreSQL, with
              Spark, in both worker modes) and Londiste 3 + PgQ as the reference (events/s, lag
              at 2k and 5k changes/s, planned switchover, memory, apply efficiency), then where
              a micro-batch's time goes (:mod:`bench.hops`); about 25 minutes (6 with
              ``--quick``)
``channels``  live channels on 3 ``baton node`` agents: delivery latency, memory and CPU with
              1k and 10k WebSocket subscribers at 100 publications/s, against every node
              running its own upstream; the time subscribers on survivors take to receive from
              a new epoch after a SIGKILL of the channel leader (a PNG of latency over time)
``store-failover``  Redis master failover (issue 14): baton's unanimous switch against Debian's
              ``redis-sentinel`` (defaults and down-after 1 s), an unplanned kill and a planned
              switch; time until every client writes to the new master, acknowledged writes
              lost (PNGs of each client's write stream)
``compare``   ``cascade compare`` and ``repair`` on 1M and 10M PostgreSQL rows with 300 planted
              differences, beside reladiff and Londiste 3's compare and repair (1M only with
              ``--quick``)
``groups``    group leader recovery: SIGKILL a node (not the controller) leading groups among
              5 ``baton node`` agents running 30 replicated objects, until those groups have a
              new leader nominated, leading and serving; on SQLite unless ``--backend`` is given

A full run (no ``--quick``, no ``--only``) writes ``docs/benchmarks.md`` and its plots
(``docs/failover.svg``, ``docs/cascade_lag.svg``); other runs print only, unless ``--output``
(the report) or ``--plots DIR`` is given. On a terminal a progress bar over the chosen
benchmarks stays below the lines they print; otherwise (CI, a redirect) the lines are plain.
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from bench.common import BACKENDS, REPO, loadavg, machine
from bench.failover import baton_failover, etcd_failover
from bench.groups import group_recovery
from bench.handover import handover
from bench.nodes import SIZES, idle, takeover
from bench.placement import placement_bench
from bench.renewal import FULL_SIZES, QUICK_SIZES, renewal
from bench.report import PLOTS, Results, console, document, plots

NAMES = (
    "failover", "etcd", "handover", "renewal", "takeover", "idle", "placement", "groups", "cascade",
    "channels", "store-failover", "compare",
)  # fmt: skip
DOC = REPO / "docs" / "benchmarks.md"
#: ``--wait-idle``: start when the 1-minute load average is below this, waiting at most
#: IDLE_WAIT seconds.
IDLE_LOAD = 1.5
IDLE_WAIT = 600.0

#: Notes added to every report (findings that depend on a run are in report.findings).
NOTES: list[str] = []


#: The console of the progress bar while one is shown: lines go through it so that they are
#: printed above the bar instead of through it.
_live: list[Console] = []


def say(message: str) -> None:
    """Print one line of progress (every benchmark is given this to report its trials)."""
    if not _live:
        print(message, flush=True)
    else:
        # Not markup: the lines hold brackets (lists, JSON) that rich would read as styles.
        _live[-1].print(message, markup=False, highlight=False, soft_wrap=True)


def _commit() -> str:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return out.stdout

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "baton").splitlines()]
    return f"`{head}`" + (f" plus uncommitted changes to {', '.join(dirty)}" if dirty else "")


def _wait_idle() -> None:
    deadline = time.monotonic() + IDLE_WAIT
    while (load := loadavg()) >= IDLE_LOAD and time.monotonic() < deadline:
        say(f"waiting for the load average to drop below {IDLE_LOAD} (now {load:.2f})")
        time.sleep(30)


def run_jobs(
    res: Results, jobs: Sequence[tuple[str, Callable[[], None]]], out: Console | None = None
) -> None:
    """Run ``jobs`` (name, benchmark) one after another, a failure recorded in ``res.errors``.
    When ``out`` (default: stdout) is a terminal, one progress bar over them shows the one
    running, the time elapsed and how many are done, below the lines they print; otherwise
    only the plain lines are printed (no escape codes in a log)."""
    out = out or Console()
    if not out.is_terminal:
        for i, (what, job) in enumerate(jobs, 1):
            _attempt(res, f"{what} ({i} of {len(jobs)})", job)
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=out) as progress:
        bar = progress.add_task("benchmarks", total=len(jobs))
        _live.append(progress.console)
        try:
            for i, (what, job) in enumerate(jobs, 1):
                progress.update(bar, description=what)
                _attempt(res, f"{what} ({i} of {len(jobs)})", job)
                progress.advance(bar)
            progress.update(bar, description="benchmarks done")
        finally:
            _live.pop()


def _attempt(res: Results, what: str, fn: Callable[[], None]) -> None:
    say(f"--- {what} (load {loadavg():.2f})")
    res.load.append(loadavg())
    try:
        fn()
    except Exception as exc:
        traceback.print_exc()
        res.errors.append(f"{what}: {type(exc).__name__}: {exc}")
    res.load.append(loadavg())


def _failover(res: Results, backend: str, trials: int) -> None:
    res.failover.append(baton_failover(backend, trials, say))


def _etcd(res: Results, trials: int) -> None:
    res.failover.append(etcd_failover(trials, say))


def _handover(res: Results, backend: str, trials: int) -> None:
    res.handover.append(handover(backend, trials, say))


def _renewal(res: Results, backend: str, sizes: Sequence[int]) -> None:
    res.renewal.extend(renewal(backend, sizes, say))


def _takeover(res: Results, backend: str, trials: int) -> None:
    res.takeover.extend(takeover(backend, SIZES, trials, say))


def _idle(res: Results, quick: bool) -> None:
    res.idle.extend(idle(quick, say))


def _placement(res: Results) -> None:
    res.placement.append(placement_bench(say))


def _groups(res: Results, backend: str, trials: int) -> None:
    res.groups.append(group_recovery(backend, trials, say))


def _cascade(res: Results, quick: bool) -> None:
    from bench.cascade import cascade_bench
    from bench.hops import hops_bench
    from bench.londiste import londiste_bench

    res.cascade = cascade_bench(quick)
    say(f"baton: {res.cascade}")
    # Where a micro-batch's time goes (section 9's breakdown): its own Spark session, after.
    res.cascade["hops"] = hops_bench(seconds=10.0 if quick else 20.0)
    res.londiste = londiste_bench(quick)
    say(f"londiste: {res.londiste}")


def _channels(res: Results, quick: bool) -> None:
    from bench.channels import channels_bench

    res.channels = channels_bench(quick, say, plot=DOC.parent / "channels-failover.png")


def _store_failover(res: Results, quick: bool) -> None:
    from bench.store_failover import store_failover_bench

    res.store_failover = store_failover_bench(quick, say, plot_dir=DOC.parent)


def _compare(res: Results, quick: bool) -> None:
    from bench.compare import suite

    res.compare = suite(quick, say)


def run(
    names: Sequence[str],
    backends: Sequence[str],
    quick: bool,
    trials: int | None,
    node_backends: Sequence[str] = ("sqlite",),
) -> Results:
    res = Results(
        mode="quick" if quick else "full",
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command="python -m bench.run " + " ".join(sys.argv[1:]),
        commit=_commit(),
        machine=machine(),
        notes=list(NOTES),
    )
    if res.command.strip() == "python -m bench.run":
        res.command = "make bench"
    started = time.monotonic()
    kills = trials or (3 if quick else 20)
    handovers = trials or (10 if quick else 50)
    sizes = QUICK_SIZES if quick else FULL_SIZES
    takeovers = trials or (3 if quick else 10)
    recoveries = trials or (3 if quick else 10)
    jobs: list[tuple[str, Callable[[], None]]] = []
    if "failover" in names:
        for b in backends:
            jobs.append((f"unplanned failover, baton on {b}", partial(_failover, res, b, kills)))
    if "etcd" in names:
        jobs.append(("unplanned failover, etcd", partial(_etcd, res, kills)))
    if "handover" in names:
        for b in backends:
            jobs.append((f"planned handover on {b}", partial(_handover, res, b, handovers)))
    if "renewal" in names:
        for b in backends:
            jobs.append((f"renewal cost on {b}", partial(_renewal, res, b, sizes)))
    if "takeover" in names:
        for b in node_backends:
            what = f"controller takeover on {b}"
            jobs.append((what, partial(_takeover, res, b, takeovers)))
    if "idle" in names:
        jobs.append(("idle node", partial(_idle, res, quick)))
    if "placement" in names:
        jobs.append(("placement function", partial(_placement, res)))
    if "groups" in names:
        for b in node_backends:
            what = f"group leader recovery on {b}"
            jobs.append((what, partial(_groups, res, b, recoveries)))
    if "cascade" in names:
        jobs.append(("cascaded replication, baton and Londiste 3", partial(_cascade, res, quick)))
    if "channels" in names:
        jobs.append(
            ("live channels, baton and one upstream per node", partial(_channels, res, quick))
        )
    if "store-failover" in names:
        what = "store failover, baton and Redis Sentinel"
        jobs.append((what, partial(_store_failover, res, quick)))
    if "compare" in names:
        what = "compare and repair, baton, reladiff and Londiste 3"
        jobs.append((what, partial(_compare, res, quick)))
    run_jobs(res, jobs)
    res.duration = time.monotonic() - started
    return res


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description="baton's benchmark suite (see docs/benchmarks.md)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="few trials, N up to 10k (a smoke run, minutes)"
    )
    parser.add_argument(
        "--only", action="append", choices=NAMES, metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(NAMES)}",
    )  # fmt: skip
    parser.add_argument(
        "--backend", action="append", choices=BACKENDS, metavar="BACKEND",
        help=f"run baton's benchmarks only on this backend (repeatable): {', '.join(BACKENDS)}",
    )  # fmt: skip
    parser.add_argument(
        "--trials",
        type=int,
        metavar="N",
        help="failover kills, handovers, takeovers (per kind and cluster size), group "
        "recoveries per backend",
    )
    parser.add_argument(
        "--output", type=Path, metavar="PATH",
        help=f"write the markdown report here (default for a full run: {DOC.relative_to(REPO)})",
    )  # fmt: skip
    parser.add_argument(
        "--plots", type=Path, metavar="DIR",
        help=f"write the plots (SVG) into DIR (default with {DOC.relative_to(REPO)}: "
        f"{DOC.parent.relative_to(REPO)}/)",
    )  # fmt: skip
    parser.add_argument(
        "--wait-idle", action="store_true",
        help=f"first wait (up to {IDLE_WAIT / 60:.0f} min) for a load average below {IDLE_LOAD}",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.trials is not None and args.trials < 1:
        parser.error("--trials must be at least 1")
    names: list[str] = args.only or list(NAMES)
    backends: list[str] = args.backend or list(BACKENDS)
    full = not args.quick and args.only is None and args.backend is None and args.trials is None
    output: Path | None = args.output or (DOC if full else None)
    if args.wait_idle:
        _wait_idle()
    # Node benchmarks (takeover, groups) run on SQLite only unless backends are named (keeps a
    # full run short).
    node_backends: list[str] = args.backend or ["sqlite"]
    res = run(names, backends, args.quick, args.trials, node_backends)
    say(console(res))
    plot_dir: Path | None = args.plots or (DOC.parent if output == DOC else None)
    if plot_dir is not None:
        write_plots(res, plot_dir, output)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(with_kept(document(res), output))
        say(f"wrote {output}")
    say(f"done in {res.duration / 60:.1f} min")
    return 1 if res.errors else 0


def write_plots(res: Results, directory: Path, report: Path | None) -> None:
    """Write ``res``'s plots into ``directory`` and record them in ``res.plots`` as paths
    relative to ``report``'s directory (the report links them from there)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = (report or directory / "report.md").parent
    for kind, svg in plots(res).items():
        path = directory / PLOTS[kind]
        path.write_text(svg)
        res.plots[kind] = os.path.relpath(path, base)
        say(f"wrote {path}")


#: Everything after this line of docs/benchmarks.md is measured by commands of its own (each
#: section names its command); a full run keeps it when it writes the rest of the file again.
KEPT = (
    "<!-- Sections below are measured by their own commands (each names it); a full "
    "`make bench` rewrites everything above this line and keeps them. -->"
)


def with_kept(text: str, output: Path) -> str:
    """``text`` (a full run's report), followed by the kept part of the file it replaces."""
    try:
        before = output.read_text()
    except OSError:
        return text
    at = before.find(KEPT)
    return text if at < 0 else f"{text.rstrip()}\n\n{before[at:]}"


if __name__ == "__main__":
    sys.exit(main())
