"""Shared pieces of the benchmark suite: statistics, the machine description, temp dirs,
store servers per backend, and a fast reader of a :class:`~baton.testing.fenced.FencedLog`."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from baton.testing.fenced import Entry
from baton.testing.servers import PG_BIN, EtcdServer, PostgresServer, RedisServer

if TYPE_CHECKING:
    import threading

    from baton.service.node import NodeService

T = TypeVar("T")

#: The backends of baton, in the order every table lists them.
BACKENDS: tuple[str, ...] = ("sqlite", "redis", "postgres", "etcd")

#: The repository root (so that child processes can run ``python -m bench.<module>``).
REPO = Path(__file__).resolve().parent.parent


class BenchError(RuntimeError):
    """A benchmark could not run (a server did not start, a participant never led...)."""


# -- statistics -------------------------------------------------------------------------------


def quantile(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) with linear interpolation between order statistics (numpy's
    default method): with 20 samples, p99 lies between the 19th and the 20th value."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Summary:
    """Order statistics of a set of durations, in seconds."""

    n: int
    minimum: float
    p50: float
    p90: float
    p99: float
    maximum: float
    mean: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Summary:
        if not samples:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan, nan)
        return cls(
            n=len(samples),
            minimum=min(samples),
            p50=quantile(samples, 0.5),
            p90=quantile(samples, 0.9),
            p99=quantile(samples, 0.99),
            maximum=max(samples),
            mean=sum(samples) / len(samples),
        )


def ms(seconds: float) -> str:
    """Seconds as milliseconds for a table (``12.3 ms``; ``-`` for NaN)."""
    if math.isnan(seconds):
        return "-"
    if seconds >= 10:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds * 1000:.0f} ms"


def secs(seconds: float) -> str:
    """Seconds for a table (``2.134 s``; ``-`` for NaN)."""
    return "-" if math.isnan(seconds) else f"{seconds:.3f} s"


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``1.23x`` (``-`` when undefined)."""
    if math.isnan(a) or math.isnan(b) or b == 0:
        return "-"
    return f"{a / b:.2f}x"


# -- the machine ------------------------------------------------------------------------------


def loadavg() -> float:
    """The 1-minute load average."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def _version(argv: list[str], keep: Callable[[str], str]) -> str:
    exe = shutil.which(argv[0]) or argv[0]
    try:
        out = subprocess.run(
            [exe, *argv[1:]], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return "not installed"
    text = (out.stdout or out.stderr).strip()
    return keep(text) if text else "unknown"


def machine() -> dict[str, str]:
    """What the results were measured on."""
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    return {
        "nproc": nproc or str(os.cpu_count()),
        "ram": ram,
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "redis": _version(["redis-server", "--version"], lambda t: t.split()[2].removeprefix("v=")),
        "postgres": _version(
            [str(PG_BIN / "postgres"), "--version"], lambda t: t.split("(PostgreSQL)")[-1].strip()
        ),
        "etcd": _version(["etcd", "--version"], lambda t: t.splitlines()[0].split()[-1]),
    }


# -- temp dirs and servers --------------------------------------------------------------------


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    """A temp dir the ``postgres`` user can traverse (PostgresServer runs initdb as that user
    when the benchmark runs as root), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=f"baton-bench-{prefix}-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Backend:
    """A running backend: its store URL (with a namespace) and, for PostgreSQL, the server's
    log file."""

    url: str
    server_log: Path | None = None


@contextlib.contextmanager
def backend_server(backend: str, directory: Path, namespace: str) -> Iterator[Backend]:
    """Start the server of ``backend`` (none for SQLite) under ``directory`` and yield it with a
    store URL using ``namespace``; the server is stopped on exit."""
    query = f"?namespace={namespace}"
    if backend == "sqlite":
        yield Backend(f"sqlite://{directory / 'baton.db'}{query}")
    elif backend == "redis":
        with RedisServer(directory / "redis") as redis:
            yield Backend(redis.url + query)
    elif backend == "postgres":
        with PostgresServer(directory / "postgres") as pg:
            yield Backend(pg.url + query, pg.directory / "pg.log")
    elif backend == "etcd":
        # One member, its data on the VM disk like the etcd reference's (etcd 3.4 fsyncs).
        with EtcdServer(directory / "etcd") as etcd:
            yield Backend(etcd.store_url + query)
    else:
        raise BenchError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")


@contextlib.contextmanager
def backend_url(backend: str, directory: Path, namespace: str) -> Iterator[str]:
    """:func:`backend_server`, yielding only the store URL."""
    with backend_server(backend, directory, namespace) as running:
        yield running.url


# -- waiting ----------------------------------------------------------------------------------


def poll(predicate: Callable[[], T | None], timeout: float, what: str, interval: float) -> T:
    """Call ``predicate`` until it returns something other than None/False; raise
    :class:`BenchError` naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# -- reading the fenced log -------------------------------------------------------------------


class LogReader:
    """Indexed reads of a FencedLog's file (``FencedLog.entries()`` reads every row, which
    gets slow when polled every few milliseconds over a log of thousands of entries)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(str(path), timeout=30, isolation_level=None)

    def latest(self) -> Entry | None:
        row = self._db.execute(
            "SELECT seq, epoch, writer, at FROM log ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return None if row is None else Entry(*row)

    def first_above(self, epoch: int) -> Entry | None:
        row = self._db.execute(
            "SELECT seq, epoch, writer, at FROM log WHERE epoch > ? ORDER BY seq LIMIT 1", (epoch,)
        ).fetchone()
        return None if row is None else Entry(*row)

    def count(self) -> int:
        (n,) = self._db.execute("SELECT count(*) FROM log").fetchone()
        return int(n)

    def close(self) -> None:
        self._db.close()


# -- memory -----------------------------------------------------------------------------------


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class PeakMemory:
    """Samples, every half second, the resident memory of this process's Spark JVM and of the
    Python workers under it (the source's and sink's workers, a low-latency task): the largest
    seen of each while the block runs, in MiB."""

    def __init__(self) -> None:
        import threading

        self.jvm_mib = 0.0
        self.python_worker_mib = 0.0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="peak-memory")

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(5)

    def _run(self) -> None:
        from baton.local.processes import descendants, java_of

        while not self._halt.wait(0.5):
            for jvm in java_of(os.getpid()):
                self.jvm_mib = max(self.jvm_mib, _status_kib(jvm, "VmRSS") / 1024)
                for child in descendants(jvm):
                    rss = _status_kib(child, "VmRSS") / 1024
                    self.python_worker_mib = max(self.python_worker_mib, rss)

    def result(self) -> dict[str, float]:
        return {
            "jvm_peak_rss_mib": round(self.jvm_mib, 1),
            "python_worker_peak_rss_mib": round(self.python_worker_mib, 1),
        }


def node_locations(kind: str, names: Sequence[str], directory: Path, pg_url: str | None,
                   prefix: str) -> dict[str, str]:  # fmt: skip
    """A fresh node database per name: SQLite files in ``directory``, or PostgreSQL databases
    ``<prefix>_<name>`` (dropped first) on the server at ``pg_url``."""
    if kind == "postgres":
        import psycopg

        assert pg_url is not None
        base = pg_url.rsplit("/", 1)[0]
        with psycopg.connect(pg_url, autocommit=True) as admin:
            for n in names:
                admin.execute(f"DROP DATABASE IF EXISTS {prefix}_{n}")
                admin.execute(f"CREATE DATABASE {prefix}_{n}")
        return {n: f"{base}/{prefix}_{n}" for n in names}
    directory.mkdir(parents=True, exist_ok=True)
    return {n: f"sqlite://{directory / n}.db" for n in names}


def step_service(  # noqa: PLR0917
    service: NodeService,
    halt: threading.Event,
    errors: list[BaseException],
    interval: Callable[[], float],
    patience: float,
    waited_out: tuple[type[BaseException], ...],
    fatal: tuple[type[BaseException], ...] = (),
) -> None:
    """Step a node service (``service.step()``) every ``interval()`` seconds until ``halt`` is
    set, as ``baton cascade run`` does: errors of the ``waited_out`` kinds are waited out for up
    to ``patience`` seconds in a row (``fatal`` ones never), anything else ends the loop; the
    error that ended it is appended to ``errors`` (the benchmark's check reports it)."""
    failing_since: float | None = None
    while not halt.wait(interval()):
        try:
            service.step()
            failing_since = None
        except waited_out as exc:
            now = time.monotonic()
            failing_since = failing_since or now
            if isinstance(exc, fatal) or now - failing_since > patience:
                errors.append(exc)
                return
        except BaseException as exc:  # reported by the caller's check
            errors.append(exc)
            return
