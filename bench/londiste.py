"""The Londiste 3 + PgQ reference for the cascade benchmark: the real Debian packages replicating
the :mod:`bench.accounts_load` workload root -> branch -> leaf, measured as baton's
``bench/cascade.py`` measures baton.

Set-up: one PostgreSQL 15 server (:class:`~baton.testing.servers.PostgresServer`) with three
databases ``l_root``, ``l_branch`` and ``l_leaf``; ``londiste create-root``/``create-branch``/
``create-leaf`` (which install the ``pgq``, ``pgq_node`` and ``londiste`` extensions), ``pgqd``
as the ticker for the three databases, one ``londiste worker`` per node as a child process
(the root's only publishes watermarks), and ``add-table public.accounts`` on every node.

Measurements:

1. **Throughput.** The branch and leaf workers are stopped (the root keeps capturing into its
   queue and ``pgqd`` keeps ticking), N changes are generated on the root (1,000,000; 100,000
   with ``--quick``), then the workers are started and we time until the branch, and the leaf,
   equal the root (:func:`bench.accounts_load.wait_equal`). events/s = N / leaf time.
2. **Lag** at a steady 2,000 and 5,000 changes/s (:func:`bench.accounts_load.steady`):
   p50/p99/max from a root commit to the first probe that sees it on the leaf.

Tuning (:class:`Settings`, chosen for low lag without hurting throughput; override any with
``--set name=value``). The defaults of Londiste 3 are made for a production queue (ticks every
second or 500 events, a worker sleeping 1 s when idle), which would put about 2 s of lag on
every hop; here they are shortened as far as is useful:

- ``pgqd``: ``ticker_period`` 0.05 s (how often it calls ``pgq.ticker()``; default 1 s),
  ``check_period`` 10 s (new databases; irrelevant once running), ``retry_period`` 1 s,
  ``maint_period`` 60 s.
- root queue (``pgq.set_queue_config``): ``ticker_max_lag`` 0 (tick on every ``pgqd`` round
  that finds new events; default 3 s), ``ticker_max_count`` 10000 (default 500; it only matters
  when one round sees more events), ``ticker_idle_period`` 1 s (default 1 min: the idle tick
  that keeps subscribers' positions moving).
- workers: ``loop_delay`` 0.05 s (the sleep after finding no batch; default 1 s; after a batch
  a worker asks again at once), ``pgq_lazy_fetch`` 1000 (events fetched per cursor round trip;
  default 300).

Tried in quick runs (100,000 changes; the machine was shared with another benchmark, load
average 3.5 to 8, so differences under ~30% are noise). events/s root -> leaf; lag p50/p99 in ms
at 2,000 and 5,000 changes/s:

================================================  ========  ===========  ============
settings                                          events/s  lag at 2k    lag at 5k
================================================  ========  ===========  ============
Londiste defaults (tick 1 s/3 s/500, loop 1 s)       7,400  1516 / 3503  2053 / 3060
kept (the values above)                             11,000   120 /  259   412 /  919
``loop_delay`` 0.01, ``ticker_period`` 0.01          6,600    47 /  169   899 / 1975
``pgq_lazy_fetch`` 0 (whole batch at once)           8,100   120 /  209   191 /  420
``ticker_period`` 0.2                                7,100   252 /  441   579 / 1435
================================================  ========  ===========  ============

Polling every 10 ms lowers the lag at 2k/s (a hop costs about half a tick period plus half a
loop delay) but the four pollers then take CPU from the workers, and the lag at 5k/s and the
throughput suffer; 50 ms is the compromise kept. At 5,000 changes/s Londiste is near its limit
on this machine (each hop is bound by one Python worker's per-event work), so the lag there
mostly measures queueing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import psycopg

from baton.testing.servers import PG_BIN, PostgresServer
from bench import accounts_load
from bench.common import BenchError, loadavg, temp_dir

#: The Debian packages of Londiste 3 and PgQ. ``postgresql-15-londiste-sql`` holds the
#: ``londiste`` extension that ``londiste create-root`` installs; ``python3-londiste`` does not
#: depend on it.
PACKAGES = (
    "python3-londiste",
    "postgresql-15-pgq3",
    "postgresql-15-pgq-node",
    "postgresql-15-londiste-sql",
    "pgqd",
)
EXTENSIONS = ("pgq", "pgq_node", "londiste")
QUEUE = "replika"
NODES = ("root", "branch", "leaf")
TABLE = "public.accounts"


@dataclass(frozen=True, slots=True)
class Settings:
    """The Londiste/PgQ knobs (see the module docstring for why these values)."""

    ticker_period: float = 0.05
    check_period: float = 10.0
    ticker_max_lag: float = 0.0
    ticker_max_count: int = 10_000
    ticker_idle_period: float = 1.0
    loop_delay: float = 0.05
    pgq_lazy_fetch: int = 1000

    def replace(self, overrides: dict[str, str]) -> Settings:
        kinds = {f.name: f.type for f in fields(self)}
        values: dict[str, Any] = asdict(self)
        for name, text in overrides.items():
            if name not in kinds:
                raise BenchError(f"unknown setting {name!r}: one of {', '.join(kinds)}")
            values[name] = int(text) if kinds[name] in (int, "int") else float(text)
        return Settings(**values)


# -- installation ----------------------------------------------------------------------------


def _missing() -> list[str]:
    missing = [exe for exe in ("londiste", "pgqd") if shutil.which(exe) is None]
    share = Path("/usr/share/postgresql") / PG_BIN.parent.name
    missing += [
        f"extension {ext}"
        for ext in EXTENSIONS
        if not (share / "extension" / f"{ext}.control").exists()
    ]
    return missing


def ensure_installed() -> str:
    """Install the Debian packages if ``londiste``, ``pgqd`` or an extension is missing, check
    that ``londiste`` runs (it is a ``/usr/bin/python3`` script on the system's skytools), and
    return its version line."""
    if _missing():
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", *PACKAGES]):
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if res.returncode != 0:
                raise BenchError(f"{' '.join(cmd)} failed: {res.stderr.strip()[-2000:]}")
        if still := _missing():
            raise BenchError(f"still missing after apt-get install: {', '.join(still)}")
    res = subprocess.run(["londiste", "--version"], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise BenchError(f"londiste does not run: {res.stderr.strip()}")
    return (res.stdout or res.stderr).strip().splitlines()[0]


# -- the cascade -----------------------------------------------------------------------------


class Cascade:
    """A Londiste 3 cascade root -> branch -> leaf on one PostgreSQL server, with ``pgqd`` and
    the workers as child processes of this one."""

    def __init__(
        self, directory: Path, settings: Settings, fill: Callable[[str], None] | None = None
    ) -> None:
        """``fill``: called with each node's URL once its ``accounts`` table exists; the tables
        are then added with ``--expect-sync`` on the subscribers (alike already: no copy)."""
        self.directory = directory
        self.settings = settings
        self.fill = fill
        self.server = PostgresServer(directory / "pg")
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.pgqd: subprocess.Popen[bytes] | None = None

    # locations

    def connstr(self, node: str) -> str:
        return f"dbname=l_{node} host=127.0.0.1 port={self.server.port} user=postgres"

    def url(self, node: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.server.port}/l_{node}"

    def ini(self, node: str) -> Path:
        return self.directory / f"{node}.ini"

    # set-up

    def start(self) -> None:
        self.server.start()
        with psycopg.connect(self.server.url, autocommit=True) as conn:
            for node in NODES:
                conn.execute(f"CREATE DATABASE l_{node}")
        s = self.settings
        for node in NODES:
            accounts_load.create_table(self.url(node))
            if self.fill is not None:
                self.fill(self.url(node))
            self.ini(node).write_text(
                "[londiste]\n"
                f"job_name = londiste_{node}\n"
                f"db = {self.connstr(node)}\n"
                f"queue_name = {QUEUE}\n"
                f"logfile = {self.directory / f'{node}.log'}\n"
                f"pidfile = {self.directory / f'{node}.pid'}\n"
                "use_skylog = 0\n"
                f"loop_delay = {s.loop_delay}\n"
                f"pgq_lazy_fetch = {s.pgq_lazy_fetch}\n"
            )
        self.londiste("root", "create-root", "root", self.connstr("root"))
        self.londiste(
            "branch", "create-branch", "branch", self.connstr("branch"),
            f"--provider={self.connstr('root')}",
        )  # fmt: skip
        self.londiste(
            "leaf", "create-leaf", "leaf", self.connstr("leaf"),
            f"--provider={self.connstr('branch')}",
        )  # fmt: skip
        with psycopg.connect(self.url("root"), autocommit=True) as conn:
            for key, value in (
                ("ticker_max_lag", f"{s.ticker_max_lag} seconds"),
                ("ticker_max_count", str(s.ticker_max_count)),
                ("ticker_idle_period", f"{s.ticker_idle_period} seconds"),
            ):
                conn.execute("SELECT pgq.set_queue_config(%s, %s, %s)", (QUEUE, key, value))
        self.start_pgqd()
        self.start_workers(*NODES)
        for node in NODES:
            synced = ("--expect-sync",) if self.fill is not None and node != NODES[0] else ()
            self.londiste(node, "add-table", TABLE, *synced)
        self.wait_tables_ok(timeout=60)

    def start_pgqd(self) -> None:
        self.pgqd = start_pgqd(
            self.directory, self.server.port, [f"l_{n}" for n in NODES], self.settings
        )

    def londiste(self, node: str, *args: str, timeout: float = 120) -> str:
        res = subprocess.run(
            ["londiste", "-q", str(self.ini(node)), *args],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            raise BenchError(
                f"londiste {node} {' '.join(args)} failed: {(res.stderr or res.stdout).strip()}"
            )
        return res.stdout

    def start_workers(self, *nodes: str) -> None:
        for node in nodes:
            with (self.directory / f"{node}.out").open("ab") as out:
                self.workers[node] = subprocess.Popen(
                    ["londiste", "-q", str(self.ini(node)), "worker"], stdout=out, stderr=out
                )

    def stop_workers(self, *nodes: str) -> None:
        for node in nodes:
            proc = self.workers.pop(node, None)
            if proc is not None:
                _stop(proc)

    def wait_tables_ok(self, timeout: float) -> None:
        """Wait until ``accounts`` is in state ``ok`` (copied and caught up) on every
        subscriber."""
        deadline = time.monotonic() + timeout
        for node in NODES[1:]:
            with (
                psycopg.connect(self.url(node), autocommit=True) as conn,
                psycopg.connect(self.url("root"), autocommit=True) as root,
            ):
                while True:
                    # The copy's hand-over to the worker waits for ticks; with an idle queue
                    # and a long ticker_idle_period they would take up to a minute each.
                    root.execute("SELECT pgq.force_tick(%s)", (QUEUE,))
                    row = conn.execute(
                        "SELECT merge_state FROM londiste.get_table_list(%s) WHERE table_name = %s",
                        (QUEUE, TABLE),
                    ).fetchone()
                    if row is not None and row[0] == "ok":
                        break
                    if time.monotonic() > deadline:
                        raise BenchError(f"{TABLE} on {node} is {row} after {timeout}s")
                    self._check_alive()
                    time.sleep(0.1)

    def _check_alive(self) -> None:
        for node, proc in self.workers.items():
            if proc.poll() is not None:
                raise BenchError(
                    f"the {node} worker exited ({proc.returncode}); "
                    f"see {self.directory / f'{node}.log'}"
                )
        if self.pgqd is not None and self.pgqd.poll() is not None:
            raise BenchError(f"pgqd exited; see {self.directory / 'pgqd.log'}")

    def stop(self) -> None:
        self.stop_workers(*list(self.workers))
        # A worker starts its table copies as daemons (``londiste INI copy TABLE -d``) with
        # pidfiles next to its own; stop any that is still running.
        for pidfile in self.directory.glob("*.pid.copy.*"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pidfile.read_text().split()[0]), signal.SIGTERM)
        if self.pgqd is not None:
            _stop(self.pgqd)
            self.pgqd = None
        self.server.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.server.directory)


def start_pgqd(
    directory: Path, port: int, databases: list[str], settings: Settings
) -> subprocess.Popen[bytes]:
    """``pgqd`` ticking ``databases`` on the PostgreSQL server at ``port`` with the tuning of
    ``settings`` (its config, log and pid file in ``directory``)."""
    ini = directory / "pgqd.ini"
    ini.write_text(
        "[pgqd]\n"
        f"base_connstr = host=127.0.0.1 port={port} user=postgres\n"
        "initial_database = postgres\n"
        f"database_list = {', '.join(databases)}\n"
        f"logfile = {directory / 'pgqd.log'}\n"
        f"pidfile = {directory / 'pgqd.pid'}\n"
        f"check_period = {settings.check_period}\n"
        f"ticker_period = {settings.ticker_period}\n"
        "retry_period = 1\n"
        "maint_period = 60\n"
    )
    with (directory / "pgqd.out").open("ab") as out:
        return subprocess.Popen(["pgqd", "-q", str(ini)], stdout=out, stderr=out)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (skytools and pgqd shut down cleanly on it), then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def cascade(settings: Settings) -> Iterator[Cascade]:
    with temp_dir("londiste") as directory:
        running = Cascade(directory, settings)
        try:
            running.start()
            yield running
        finally:
            running.stop()


# -- the measurements --------------------------------------------------------------------------


def throughput(c: Cascade, changes: int, seed: int) -> dict[str, float]:
    """Generate ``changes`` on the root while the subscribers' workers are stopped, then start
    them and time until the branch and the leaf equal the root."""
    result = accounts_load.catch_up(
        c.url("root"),
        c.url("branch"),
        c.url("leaf"),
        changes,
        seed=seed,
        stop=lambda: c.stop_workers("branch", "leaf"),
        start=lambda: c.start_workers("branch", "leaf"),
    )
    return {**result, "loadavg": loadavg()}


def takeover(c: Cascade, trials: int, rate: int = 2000) -> dict[str, Any]:
    """Londiste's planned switchover (``londiste <new>.ini takeover <old>``) measured as
    baton's is (:func:`bench.accounts_load.switchovers`). A failed takeover is reported, not
    raised (the other figures stand)."""
    try:
        return accounts_load.switchovers(
            c.url, lambda old, new: c.londiste(new, "takeover", old), trials, rate
        )
    except (BenchError, TimeoutError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)[:500]}


def londiste_bench(quick: bool, settings: Settings | None = None) -> dict[str, Any]:
    """Run both measurements on a fresh cascade and return the numbers."""
    settings = settings or Settings()
    version = ensure_installed()
    changes = 100_000 if quick else 1_000_000
    seconds = 10.0 if quick else 30.0
    out: dict[str, Any] = {
        "system": "londiste3+pgq",
        "version": version,
        "quick": quick,
        "settings": asdict(settings),
        "loadavg_start": loadavg(),
    }
    with cascade(settings) as c:
        out["throughput"] = throughput(c, changes, seed=1)
        lag: dict[str, Any] = {}
        for i, rate in enumerate((2000, 5000)):
            accounts_load.wait_equal(c.url("root"), c.url("leaf"), 120)
            result: dict[str, Any] = dict(
                accounts_load.steady(c.url("root"), c.url("leaf"), rate, seconds, seed=10 + i)
            )
            result["loadavg"] = loadavg()
            lag[str(rate)] = result
        out["lag"] = lag
        out["leaf_equals_root"] = accounts_load.signature(c.url("leaf")) == (
            accounts_load.signature(c.url("root"))
        )
        out["switchover"] = takeover(c, 2 if quick else 4)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.londiste", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100,000 changes, 10 s lag runs")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="override a setting"
    )
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    result = londiste_bench(args.quick, Settings().replace(overrides))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
