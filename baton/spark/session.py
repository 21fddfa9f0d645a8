"""Building the SparkSession a node (or a test) uses, wherever Spark runs.

Where Spark runs is said the same way everywhere a session is built (``baton cascade run
--spark-master/--spark-remote``, the node config's ``[spark]`` table, the demo, the test kit,
the benchmarks): a ``master`` (by default ``local[N]``, N the cores but at least 8;
``local[*]``, ``spark://host:7077``, ...) for a classic session whose driver runs in this
process, or a ``remote`` (``sc://host:15002``) for Spark Connect. When a caller gives
neither, ``BATON_SPARK_MASTER`` or ``BATON_SPARK_REMOTE`` decide (:func:`where`). ``conf``
adds any Spark setting.

``quiet=True`` applies the settings that make a session start fast and log little: no UI,
loopback only and two shuffle partitions on a local master, scratch directories inside
``work_dir``, and error-level logs in ``work_dir/spark.log`` (not on the terminal). Nothing
driver-local (a log4j file, a temporary directory) goes into the executors' settings: on a
cluster they run on other hosts. Over Spark Connect the session is the server's: settings only
the server can take (static ones: the UI, the driver, directories) are left to it, with one log
line naming them, and the rest are set on the session.

Who holds a process's sessions, and replaces one whose JVM died, is
:class:`baton.spark.lifecycle.SparkSessions`; this module builds them and tells a dead JVM
(:func:`jvm_alive`, :func:`forget`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from baton.errors import ConfigError, SparkUnavailable
from baton.spark import class_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("baton.spark")

#: The environment variables that say where Spark runs when a caller does not.
ENV_MASTER = "BATON_SPARK_MASTER"
ENV_REMOTE = "BATON_SPARK_REMOTE"
#: Task slots of the default local session, at least: each low-latency worker (the default
#: mode) holds one while it runs, mostly waiting for its provider's next tick, so a process
#: serving several nodes needs more slots than a small machine has cores.
DEFAULT_SLOTS = 8
#: The master of a session when none is given: the cores, but at least :data:`DEFAULT_SLOTS`.
DEFAULT_MASTER = f"local[{max(os.cpu_count() or 1, DEFAULT_SLOTS)}]"

_MASTER = re.compile(
    r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]"
    r"|spark://[^\s/]+(,[^\s/]+)*|(k8s|mesos)://\S+|yarn"
)
_REMOTE = re.compile(r"sc://[^\s/;:]+(:\d+)?/?(;[^\s;=]+=[^\s;]*)*")
_LOCAL = re.compile(r"local(\[.*\])?")
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}

#: Quiet sessions log Spark's errors, with their whole traces, to ``spark.log`` in the work
#: directory, not to the terminal: baton says in one line what happened and what it does next.
LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
"""


@dataclass(frozen=True, slots=True)
class Where:
    """Where a session's Spark runs: exactly one of ``master`` (a classic session) and
    ``remote`` (Spark Connect)."""

    master: str | None = None
    remote: str | None = None

    @property
    def local(self) -> bool:
        """A ``local[...]`` master: driver and executors in one JVM on this host."""
        return self.master is not None and bool(_LOCAL.fullmatch(self.master))

    @property
    def loopback(self) -> bool:
        """Local, or a standalone master on a loopback address (a cluster on this host: the
        driver may then listen on loopback only)."""
        if self.local:
            return True
        if self.master is None or not self.master.startswith("spark://"):
            return False
        hosts = [h.rsplit(":", 1)[0] for h in self.master.removeprefix("spark://").split(",")]
        return all(h in _LOOPBACK for h in hosts)

    def __str__(self) -> str:
        return f"remote {self.remote}" if self.remote else f"master {self.master}"


#: Seconds a Spark master or Connect server has to accept a connection (:func:`probe`).
PROBE_TIMEOUT = 5.0
#: Spark Connect's port when the URL names none.
CONNECT_PORT = 15002


def _addresses(at: Where) -> list[tuple[str, int]]:
    """The addresses a session at ``at`` connects to first (none for local, yarn, k8s: the
    JVM or the cluster manager finds its own way)."""
    if at.remote:
        host_port = at.remote.removeprefix("sc://").split("/", 1)[0].split(";", 1)[0]
        host, _, port = host_port.partition(":")
        return [(host, int(port) if port else CONNECT_PORT)]
    if at.master and at.master.startswith("spark://"):
        out = []
        for hp in at.master.removeprefix("spark://").split(","):
            host, _, port = hp.rpartition(":")
            out.append((host or hp, int(port) if port.isdigit() else 7077))
        return out
    return []


def probe(at: Where, timeout: float = PROBE_TIMEOUT) -> None:
    """:class:`SparkUnavailable` unless one of the addresses a session at ``at`` starts with
    accepts a connection, within ``timeout`` seconds: the JVM would otherwise retry a dead
    standalone master for a minute and a half and fail with a Java trace, and the Connect
    client retry for over ten minutes, both in silence."""
    addresses = _addresses(at)
    errors = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or type(exc).__name__}")
    if addresses:
        what = f"spark remote {_redact(at.remote)}" if at.remote else f"spark master {at.master}"
        check = (
            "that its Spark Connect server runs and listens there"
            if at.remote
            else "that the standalone master runs and listens there"
        )
        raise SparkUnavailable(
            f"{what} does not answer ({'; '.join(errors)}): check {check}, and the URL"
        )


def check_master(master: str, source: str = "spark master") -> str:
    """``master`` if Spark takes it, else :class:`ConfigError` saying what would be
    (``source`` names where the value came from; empty when the caller names it)."""
    if not _MASTER.fullmatch(master):
        what = f"{source} {master!r} is not" if source else "not"
        raise ConfigError(
            f"{what} a Spark master: use local[*], local[N], spark://HOST:PORT (a standalone "
            "cluster), yarn or k8s://URL"
        )
    return master


def check_remote(remote: str, source: str = "spark remote") -> str:
    """``remote`` if it is a Spark Connect URL, else :class:`ConfigError`."""
    if not _REMOTE.fullmatch(remote):
        what = f"{source} {remote!r} is not" if source else "not"
        raise ConfigError(
            f"{what} a Spark Connect URL: use sc://HOST:PORT (15002 by default), optionally "
            "with ;key=value parameters"
        )
    return remote


def where(
    master: str | None = None, remote: str | None = None, env: Mapping[str, str] | None = None
) -> Where:
    """Where Spark runs: the ``master`` or ``remote`` given (not both), else the environment's
    ``BATON_SPARK_REMOTE`` or ``BATON_SPARK_MASTER`` (not both), else :data:`DEFAULT_MASTER`.
    A value Spark would not take raises :class:`ConfigError`, before any JVM or connection
    starts."""
    if master and remote:
        raise ConfigError("give a Spark master or a Spark Connect remote, not both")
    if master:
        return Where(master=check_master(master))
    if remote:
        return Where(remote=check_remote(remote))
    env = os.environ if env is None else env
    env_master, env_remote = env.get(ENV_MASTER), env.get(ENV_REMOTE)
    if env_master and env_remote:
        raise ConfigError(f"set {ENV_MASTER} or {ENV_REMOTE}, not both")
    if env_remote:
        return Where(remote=check_remote(env_remote, ENV_REMOTE))
    if env_master:
        return Where(master=check_master(env_master, ENV_MASTER))
    return Where(master=DEFAULT_MASTER)


#: Spark Connect session ids are UUIDs; baton's are derived from a name (see
#: :func:`connect_session_id`) so that a successor reattaches to its predecessor's session.
_CONNECT_NAMESPACE = uuid.UUID("6f1d4d3e-1c6b-4b8e-9a52-0b7a3c2f5e10")
#: How many generations of a named Connect session are tried (a closed one is skipped).
CONNECT_GENERATIONS = 64


def connect_session_id(name: str, generation: int = 0) -> str:
    """The Spark Connect session id of ``name``'s ``generation`` (a version-4 UUID, as the
    client insists, derived from the name: every process that gives the name gets the same)."""
    derived = uuid.uuid5(_CONNECT_NAMESPACE, f"{name}#{generation}")
    return str(uuid.UUID(bytes=derived.bytes, version=4))


#: The quiet settings asked of a Spark Connect session (the UI ones are the server's).
QUIET_CONNECT = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "10s",
}


def _quiet_settings(work: Path, at: Where) -> dict[str, str]:
    """The quiet settings for a session at ``at``, with scratch files in ``work`` (on this
    host: nothing here reaches an executor on another host)."""
    log4j = work / "log4j2.properties"
    log4j.write_text(LOG4J.format(log=work / "spark.log"))
    driver_java = (
        f"-Dlog4j2.configurationFile=file:{log4j} -Djava.io.tmpdir={work} "
        "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    )
    if at.local:
        # The driver is a JVM on this host: start it from the class archive when there is one.
        driver_java = f"{driver_java} {class_archive.java_options()}".strip()
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": str(work / "local"),
        "spark.sql.warehouse.dir": str(work / "warehouse"),
        "spark.driver.extraJavaOptions": driver_java,
        "spark.sql.streaming.stopTimeout": "10s",
    }
    if at.loopback:
        # Everything on this host: listen on loopback only.
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    if at.local:
        # Small jobs on a small machine; a cluster's own sizes are left alone. Executors live
        # in the driver's JVM here, so they share its options (and need none of their own).
        settings["spark.sql.shuffle.partitions"] = "2"
        settings["spark.default.parallelism"] = "2"
    return settings


def _quiet_accumulator_server() -> None:
    """PySpark's accumulator server (a ``socketserver`` in the driver) prints a traceback to
    stderr when the JVM's connection to it ends mid-update, which is what a killed JVM does:
    an event baton expects and recovers from (:func:`jvm_alive`). One line instead."""
    from pyspark import accumulators

    def handle_error(self: object, request: object, client_address: object) -> None:
        exc = sys.exc_info()[1]
        log.warning(
            "spark's JVM dropped its accumulator connection",
            extra={"error": type(exc).__name__ if exc is not None else "closed"},
        )

    for server in (accumulators.AccumulatorTCPServer, accumulators.AccumulatorUnixServer):
        server.handle_error = handle_error  # type: ignore[method-assign]


def build_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
    work_dir: Path | None = None,
    quiet: bool = False,
    app_name: str = "baton",
    connect_session: str | None = None,
) -> SparkSession:
    """A SparkSession at :func:`where` ``(master, remote)`` (a classic session: an existing
    active one is reused, as Spark does; a dead one's JVM is replaced by a new one).

    ``connect_session`` (Spark Connect only): a name for the server-side session. Processes
    that give the same name attach to the same session, so a process that takes over from a
    dead one (its lease's successor) sees, and can stop, the streaming queries the dead one
    left running on the server. Without it every session is new."""
    at = where(master, remote)
    probe(at)
    if at.remote:
        return _connect_session(at.remote, conf or {}, work_dir, quiet, connect_session)
    from pyspark.sql import SparkSession

    if not jvm_alive():
        # The JVM died (killed, out of memory), perhaps while a session was being built, so
        # that nobody holds a session to notice it by: PySpark would hand out its dead
        # gateway again, and every call would be refused for good.
        forget(None)
    # Spark's Python workers must run this interpreter (with baton and pyspark installed), not
    # whatever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(at.master or DEFAULT_MASTER)
    settings: dict[str, str] = {}
    work = Path(work_dir or Path.cwd() / ".spark")
    if quiet:
        work.mkdir(parents=True, exist_ok=True)
        if at.loopback:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings = _quiet_settings(work, at)
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    if quiet:
        _quiet_accumulator_server()
        _quiet_dead_jvm()
        with _stderr_to(work / "spark.log"):
            session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
    else:
        session = builder.getOrCreate()
    register(session)
    return session


def _connect_session(
    remote: str,
    conf: Mapping[str, str],
    work_dir: Path | None,
    quiet: bool,
    name: str | None,
) -> SparkSession:
    """A Spark Connect session at ``remote``: a new one, or with ``name`` the first of the
    name's sessions the server has not closed (a closed session's queries were stopped with
    it, so nothing is lost by moving past it)."""
    from pyspark.sql import SparkSession

    # The client has no JVM and no files of its own: of the quiet settings only those a
    # session may take apply (the rest are the server's, and said to be so).
    settings = {**(QUIET_CONNECT if quiet else {}), **conf}
    generations = range(CONNECT_GENERATIONS) if name and "session_id=" not in remote else [None]
    session: SparkSession | None = None
    for generation in generations:
        url = remote
        if generation is not None and name is not None:
            sid = f"session_id={connect_session_id(name, generation)}"
            url = f"{remote};{sid}" if ";" in remote else f"{remote.rstrip('/')}/;{sid}"
        session = SparkSession.builder.remote(url).create()
        try:
            session.streams.active  # noqa: B018 (the first call reaches the server)
        except Exception as exc:
            if _condition(exc) == "INVALID_HANDLE.SESSION_CLOSED" and generation is not None:
                session.release_session_on_close = False  # type: ignore[attr-defined]
                session.stop()
                continue
            raise SparkUnavailable(
                f"spark remote {_redact(remote)} did not answer: {_first_line(exc)}"
            ) from None
        break
    else:
        raise ConfigError(
            f"spark remote {_redact(remote)}: the first {CONNECT_GENERATIONS} sessions of "
            f"{name!r} are closed; restart the Spark Connect server or name another session"
        )
    assert session is not None
    left = _apply_connect_settings(session, settings)
    if left:
        log.info(
            "spark connect: server-side settings left to the server",
            extra={"remote": _redact(remote), "settings": ",".join(sorted(left))},
        )
    register(session)
    return session


def _apply_connect_settings(session: SparkSession, settings: Mapping[str, str]) -> list[str]:
    """Set on ``session`` what it can take; the keys only the server can take."""
    left = []
    for key, value in settings.items():
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
        else:
            left.append(key)
    return left


def _condition(exc: BaseException) -> str | None:
    get = getattr(exc, "getCondition", None)
    return str(get()) if callable(get) and get() else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _redact(remote: str) -> str:
    """``remote`` without its parameters (a ``token`` may be one)."""
    return remote.split(";", 1)[0]


def is_connect(session: SparkSession) -> bool:
    """Whether ``session`` is a Spark Connect session (no local JVM, no RDDs)."""
    return getattr(session, "_jsparkSession", None) is None and hasattr(session, "client")


def executors(session: SparkSession) -> int | None:
    """How many executors the cluster gave ``session``'s application (the driver not
    counted); None where there is nothing to count: local Spark runs in the driver, and a
    Spark Connect server's executors are its own."""
    if is_connect(session):
        return None
    sc = session.sparkContext
    if (sc.master or "local").startswith("local"):
        return None
    infos = sc._jsc.sc().statusTracker().getExecutorInfos()  # the driver's own is one of them
    return max(0, len(infos) - 1)


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Start the JVM with its standard error (which its Python workers inherit) in ``path``:
    a Python worker that loses its JVM socket when a query is stopped prints its traceback
    there, not on the user's terminal.

    Only the JVM's process gets the file (PySpark's launcher is handed it for that one Popen):
    redirecting this process's own descriptor 2 instead would send every line another thread
    logs while the JVM starts (up to half a minute on a busy machine) to the file too."""
    import pyspark.java_gateway as launcher

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    plain = launcher.Popen  # type: ignore[attr-defined]

    def popen(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("stderr", fd)
        return plain(*args, **kwargs)

    launcher.Popen = popen  # type: ignore[attr-defined,assignment]
    try:
        yield
    finally:
        launcher.Popen = plain  # type: ignore[attr-defined]
        os.close(fd)


def register(session: SparkSession) -> None:
    """Make ``format("baton")`` (the source) and ``format("batonapply")`` (the apply sink)
    available in ``session``."""
    from baton.spark.sink import BatonApplySink
    from baton.spark.source import BatonSource

    session.dataSource.register(BatonSource)
    session.dataSource.register(BatonApplySink)


def activate(session: SparkSession) -> None:
    """Make ``session`` the JVM's active session in this thread. Spark 4.3 resolves a Python
    data source *sink* (``writeStream.format("batonapply")``) through the calling thread's
    active session, and a thread other than the one that built the session has none: without
    this, a worker started from a service thread fails with DATA_SOURCE_NOT_FOUND. (PySpark's
    own ``createDataFrame`` does the same.) Spark Connect sessions need nothing."""
    jvm = getattr(session, "_jvm", None)
    jsession = getattr(session, "_jsparkSession", None)
    if jvm is not None and jsession is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)


def jvm_alive(session: SparkSession | None = None) -> bool:
    """False once the Spark JVM behind ``session`` (or, with None, whichever JVM PySpark holds)
    has died (killed, out of memory): every call then fails with a refused connection, for
    good. True while no JVM was started; Spark Connect sessions have no local JVM and count as
    alive (their server is another process's business).

    A session is judged by its own gateway, not by the process's current one: after a JVM
    died, the first of two services to notice builds a new JVM, and the other's session (still
    on the dead one) must not pass for alive because the process has a live JVM again."""
    from pyspark import SparkContext

    current = getattr(SparkContext, "_gateway", None)
    if session is not None:
        jsession = getattr(session, "_jsparkSession", None)
        if jsession is None:
            return True
        client = getattr(current, "_gateway_client", None)
        if client is None or getattr(jsession, "_gateway_client", None) is not client:
            return False  # built on a JVM that is gone (a newer one, or none, replaced it)
    proc = getattr(current, "proc", None)
    return proc is None or bool(proc.poll() is None)


class _FromPy4j(logging.Filter):
    """Drops what py4j logs on the root logger (``logging.exception``, with a traceback) about
    a command it could not send, when that is because the JVM died: an event baton expects
    and says in one line (:func:`jvm_alive`'s callers). With ``always``, whatever the JVM."""

    def __init__(self, always: bool = False) -> None:
        super().__init__()
        self.always = always

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}py4j{os.sep}" not in record.pathname:
            return True
        from py4j.protocol import Py4JNetworkError  # type: ignore[import-untyped]

        # A lost connection to a JVM is one a dead JVM left: the record may come from a thread
        # of an old gateway after a new JVM started, when the JVM of the moment is alive.
        lost = record.exc_info is not None and isinstance(record.exc_info[1], Py4JNetworkError)
        return not (self.always or lost or not jvm_alive())


#: Installed on the root logger once a session is built (see :func:`_quiet_dead_jvm`).
_DEAD_JVM_FILTER = _FromPy4j()


def _quiet_dead_jvm() -> None:
    """py4j's threads (its garbage collection of Java objects, say) may send a command just as
    the JVM is killed: keep the traceback it logs out of the process's output."""
    root = logging.getLogger()
    if _DEAD_JVM_FILTER not in root.filters:
        root.addFilter(_DEAD_JVM_FILTER)


@contextlib.contextmanager
def _py4j_quiet() -> Iterator[None]:
    """Drop what py4j logs on the root logger meanwhile (stopping a dead JVM's session)."""
    quiet = _FromPy4j(always=True)
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)


def forget(session: SparkSession | None) -> None:
    """Drop a session whose JVM died (or, with None, whatever PySpark still holds of a dead
    JVM), so the next build starts a new JVM: PySpark keeps the dead gateway in class
    attributes and would hand it to every later session."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession as Session

    if session is not None:
        # Stopping a dead JVM's context fails halfway, and py4j logs each command it could not
        # send, with its traceback, on the root logger: an event baton expects (the caller
        # says it in one line), so that is kept quiet.
        with contextlib.suppress(Exception), _py4j_quiet():
            session.stop()
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    Session._instantiatedSession = None
    Session._activeSession = None
