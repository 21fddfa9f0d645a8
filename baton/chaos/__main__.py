"""``python -m baton.chaos --seed S (--faults N | --duration T) --out DIR``: run a campaign
(see :mod:`baton.chaos.campaign`); exit 0 when the checker found no violation, 1 otherwise.

Needs root (network namespaces, nftables) and Debian's ``faketime``, ``redis-server`` and
``nft``, as ``make chaos`` sets up.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import click

from baton.chaos.campaign import Plan, run
from baton.chaos.disk import unmount_stale
from baton.chaos.nemesis import KINDS
from baton.chaos.net import Network
from baton.logs import describe


@click.command()
@click.option("--seed", type=int, default=1, show_default=True, help="Random seed of the faults.")
@click.option("--faults", type=click.IntRange(min=1), help="Faults to inject in all.")
@click.option("--duration", type=click.FloatRange(min=1), help="Or: seconds of rounds.")
@click.option("--per-round", type=click.IntRange(min=1), default=6, show_default=True)
@click.option("--ttl", type=click.FloatRange(min=0.5), default=2.0, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("chaos-run"))
@click.option(
    "--only",
    "kinds",
    multiple=True,
    type=click.Choice(sorted(KINDS)),
    help="Inject only this kind of fault (repeatable; default: every kind).",
)
@click.option(
    "--store-failover/--no-store-failover",
    "failover",
    default=True,
    show_default=True,
    help="A Redis master and replica under store failover, or one Redis server.",
)
@click.option(
    "--root-loss/--no-root-loss",
    default=True,
    show_default=True,
    help="Lose the cascade's root once, halfway: failover, then resurrect when it comes back.",
)
@click.option(
    "--root-failover",
    type=click.Choice(["auto", "manual"]),
    default="auto",
    show_default=True,
    help="Who fails the lost root over: the agents' automatic failover, or the CLI's failover.",
)
@click.option(
    "--sync",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Synchronous mode: the set's K ('baton cascade sync'), the writer waiting for K "
    "branches; 0: asynchronous.",
)
def main(
    *,
    seed: int,
    faults: int | None,
    duration: float | None,
    per_round: int,
    ttl: float,
    out: Path,
    kinds: tuple[str, ...],
    failover: bool,
    root_loss: bool,
    root_failover: str,
    sync: int,
) -> None:
    """Run a fault campaign against a local five-host cluster and check its history."""
    if (faults is None) == (duration is None):
        raise click.UsageError("give one of --faults N or --duration SECONDS")
    Network.sweep()
    unmount_stale(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        report = run(
            out.resolve(),
            Plan(
                seed,
                faults,
                duration,
                per_round,
                ttl,
                kinds,
                failover,
                root_loss,
                root_failover == "auto",
                sync,
            ),
        )
    except Exception as exc:
        # A failure of the harness itself (not a violation): one line, the run kept.
        click.echo(
            f"chaos: the campaign itself failed: {describe(exc)}; its logs and history are in "
            f"{out}",
            err=True,
        )
        sys.exit(2)
    click.echo(json.dumps(report, indent=2))
    if not report["ok"]:
        click.echo(
            f"chaos: violations found; history kept in {out}; repeat with "
            f"python -m baton.chaos --seed {seed} --faults {report['faults']}"
            + (f" --per-round {per_round}" if per_round != 6 else "")
            + (f" --ttl {ttl:g}" if ttl != 2.0 else "")
            + ("" if failover else " --no-store-failover")
            + ("" if root_loss else " --no-root-loss")
            + ("" if root_failover == "auto" else " --root-failover manual")
            + (f" --sync {sync}" if sync else "")
            + "".join(f" --only {kind}" for kind in kinds),
            err=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
