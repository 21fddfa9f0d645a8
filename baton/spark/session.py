"""Building the SparkSession a node (or a test) uses.

``master`` (``local[*]`` by default) or ``remote`` (Spark Connect) come from the node config's
``[spark]`` table; ``conf`` adds any Spark setting. ``quiet=True`` applies the settings that make
a local session start fast and log little (tests and the demo): no UI, two shuffle partitions,
loopback only, scratch directories inside ``work_dir``, and error-level logs in
``work_dir/spark.log`` (not on the terminal).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def build_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
    work_dir: Path | None = None,
    quiet: bool = False,
    app_name: str = "baton",
) -> SparkSession:
    """A SparkSession (an existing active one is reused, as Spark does; a dead one's JVM is
    replaced by a new one)."""
    from pyspark.sql import SparkSession

    if not remote and not jvm_alive():
        # The JVM died (killed, out of memory), perhaps while a session was being built, so
        # that nobody holds a session to notice it by: PySpark would hand out its dead
        # gateway again, and every call would be refused for good.
        forget(None)
    # Spark's Python workers must run this interpreter (with baton and pyspark installed), not
    # whatever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    # Spark Connect (remote) or a classic session (master).
    builder = builder.remote(remote) if remote else builder.master(master or "local[*]")
    settings: dict[str, str] = {}
    if quiet:
        work = Path(work_dir or Path.cwd() / ".spark")
        work.mkdir(parents=True, exist_ok=True)
        log4j = work / "log4j2.properties"
        log4j.write_text(LOG4J.format(log=work / "spark.log"))
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        java = (
            f"-Dlog4j2.configurationFile=file:{log4j} -Djava.io.tmpdir={work} "
            "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
        )
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.local.dir": str(work / "local"),
            "spark.sql.warehouse.dir": str(work / "warehouse"),
            "spark.driver.extraJavaOptions": java,
            "spark.executor.extraJavaOptions": java,
            "spark.sql.streaming.stopTimeout": "10s",
        }
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    if quiet and not remote:
        with _stderr_to(Path(settings["spark.local.dir"]).parent / "spark.log"):
            session = builder.getOrCreate()
    else:
        session = builder.getOrCreate()
    if quiet:
        session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


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


_SHARED: list[SparkSession] = []
_SHARED_LOCK = threading.Lock()


def shared_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, str] | None = None,
    work_dir: Path | None = None,
    quiet: bool = False,
) -> SparkSession:
    """The process's one SparkSession (one JVM per process, however often leadership comes and
    goes): built by the first call, with its settings, and returned by every later call."""
    with _SHARED_LOCK:
        if _SHARED and not jvm_alive(_SHARED[0]):
            _SHARED.clear()  # its JVM died: build_session starts a new one
        if not _SHARED:
            _SHARED.append(
                build_session(
                    master=master, remote=remote, conf=conf, work_dir=work_dir, quiet=quiet
                )
            )
        return _SHARED[0]


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


def forget(session: SparkSession | None) -> None:
    """Drop a session whose JVM died (or, with None, whatever PySpark still holds of a dead
    JVM), so the next build starts a new JVM: PySpark keeps the dead gateway in class
    attributes and would hand it to every later session."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession as Session

    if session is not None:
        with contextlib.suppress(Exception):  # stopping a dead JVM's context fails halfway
            session.stop()
        with _SHARED_LOCK:
            if session in _SHARED:
                _SHARED.remove(session)
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    Session._instantiatedSession = None
    Session._activeSession = None
