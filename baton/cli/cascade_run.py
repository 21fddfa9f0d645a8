"""``baton cascade run LOCATION``: serve one cascade node (its ticker at the root, its Spark
worker elsewhere) under a fenced lease in the coordination store."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from baton.cli.common import need_store, run_async, store_option
from baton.service.mode import DEFAULT_MODE, MODES


@click.command("run")
@click.argument("locations", nargs=-1, required=True)
@store_option
@click.option("--ttl", type=float, default=10.0, show_default=True, help="Lease ttl in seconds.")
@click.option(
    "--spark-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Spark's scratch files and its log (spark.log, with any Java trace) go here "
    "[default: a new temporary directory].",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=DEFAULT_MODE.value,
    show_default=True,
    help="How the worker applies: low-latency, one long-running Spark task (a hop's lag in "
    "tens of milliseconds; it holds a Spark task slot while it runs), micro-batch, Structured "
    "Streaming micro-batches (about 0.25 s a hop; no slot held between them), or auto: "
    "low-latency while the session has a slot to spare beside one kept for copies, else "
    "micro-batch (a default local session has at least 8 slots).",
)
@click.option(
    "--spark-master",
    metavar="MASTER",
    help="The Spark master of the process's session: local[N], spark://HOST:PORT, ... "
    "[default: $BATON_SPARK_MASTER, else local[N], N the cores but at least 8]; a "
    "low-latency worker takes one task slot while it runs.",
)
@click.option(
    "--spark-remote",
    metavar="URL",
    help="Run on a Spark Connect server instead, sc://HOST:PORT [default: $BATON_SPARK_REMOTE]; "
    "give it a task slot per low-latency worker of all its clients. A process that takes over "
    "a node reattaches to its predecessor's "
    "server session and stops the queries it left running.",
)
@click.option(
    "--spark-conf",
    "spark_conf",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting for the process's session, as spark-submit's --conf (repeat it): "
    "spark.cores.max=2 lets several runs share one standalone cluster.",
)
@click.option(
    "--standby",
    type=click.Choice(["warm", "cold"]),
    default="warm",
    show_default=True,
    help="warm: a branch's or leaf's process runs one worker over a throwaway pair of nodes "
    "before it campaigns, so that whichever process takes the node over applies within about "
    "a second (a session's first worker otherwise takes 9-40 s); cold: it only starts its "
    "JVM (less memory and no Python worker processes while it stands by).",
)
def run(  # noqa: PLR0917 (click passes every option by position)
    locations: tuple[str, ...],
    store_url: str | None,
    ttl: float,
    spark_dir: Path | None,
    mode: str,
    spark_master: str | None,
    spark_remote: str | None,
    spark_conf: tuple[str, ...],
    standby: str,
) -> None:
    """Serve the cascade nodes at LOCATIONS until SIGTERM or Ctrl-C.

    Each node is served under the lease cascade/SET/NODE, whose epoch fences every batch its
    worker applies, so a stale worker can never apply after its successor. Several locations
    share one process and one Spark session (a combined root with the merge-leaves it hosts:
    LOCATION LOCATION#A LOCATION#B ...)."""
    from baton.cascade.commands import existing
    from baton.cascade.db import open_node_db
    from baton.errors import ConfigError, NodeUnreachable
    from baton.service.under_lease import run_nodes
    from baton.spark.session import where

    url = need_store(store_url)
    conf = {}
    for item in spark_conf:
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or not key.startswith("spark."):
            raise click.UsageError(
                f"--spark-conf {item!r} is not a Spark setting: give KEY=VALUE with a key "
                "starting spark. (for example spark.cores.max=2)"
            )
        conf[key.strip()] = value
    try:
        at = where(spark_master, spark_remote)  # the options, else BATON_SPARK_*, else local
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    for location in locations:
        # A mistyped SQLite path is refused before anything opens it (opening would create
        # an empty file): only the create-* commands make a node database.
        existing(location.partition("#")[0])
        try:
            with open_node_db(location) as db:
                db.state()  # a location that is not a node is refused before anything starts
        except NodeUnreachable:
            pass  # locked or unreachable for now: the service says so and waits for it
    from baton import logs

    logs.setup(20)
    sys.exit(
        run_async(
            lambda: run_nodes(
                list(locations),
                url,
                ttl,
                spark_dir,
                mode=mode,
                master=at.master,
                remote=at.remote,
                conf=conf,
                warm=standby == "warm",
            )
        )
    )
