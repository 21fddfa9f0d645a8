"""Real Spark deployments on this host, for tests, the demo and benchmarks: a standalone
cluster (a master and workers) and a Spark Connect server, started from the pip PySpark
distribution (it ships ``bin/spark-class``, ``bin/spark-submit`` and the Connect server's jar)
on free loopback ports, and stopped by PID with everything they started (executors, Python
workers)::

    with StandaloneCluster(tmp / "cluster", workers=2) as cluster:
        spark = build_session(master=cluster.url, quiet=True, work_dir=tmp / "driver")
    with ConnectServer(tmp / "connect") as server:
        spark = build_session(remote=server.url, quiet=True)

Their logs (and Java traces) are in the directory given; nothing reaches the terminal.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from baton.errors import ServerError
from baton.local.ports import free_port, port_open
from baton.local.processes import Proc, descendants, wait_ready
from baton.spark.session import LOG4J as SESSION_LOG4J

#: The Spark Connect server's main class (``sbin/start-connect-server.sh`` runs the same).
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: How long a server may take to start on a busy 2-core machine.
START_TIMEOUT = 120.0
#: Daemon and server JVMs log errors only, to a file: the format of baton's sessions.
LOG4J = SESSION_LOG4J


def spark_home() -> Path:
    """The pip PySpark distribution's directory (it is a whole ``SPARK_HOME``)."""
    import pyspark

    return Path(pyspark.__file__).parent


def connect_jar() -> Path:
    """The Spark Connect server's jar, bundled with PySpark."""
    jars = sorted((spark_home() / "jars").glob("spark-connect_*.jar"))
    if not jars:
        raise ServerError(f"no spark-connect jar in {spark_home() / 'jars'}: reinstall pyspark")
    return jars[-1]


def _spark_env(work: Path) -> dict[str, str]:
    """What every Spark process started here adds to the environment: loopback only, this
    venv's Python for Python workers, scratch and logs inside ``work``, in the foreground."""
    for sub in ("logs", "tmp", "local", "workers"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.properties"
    log4j.write_text(LOG4J.format(log=work / "logs" / "spark.log"))
    java = f"-Dlog4j2.configurationFile=file:{log4j} -Djava.io.tmpdir={work / 'tmp'}"
    return {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(work / "logs"),
        "SPARK_WORKER_DIR": str(work / "workers"),
        "SPARK_LOCAL_DIRS": str(work / "local"),
        "SPARK_NO_DAEMONIZE": "1",
        "SPARK_DAEMON_JAVA_OPTS": java,
        "SPARK_SUBMIT_OPTS": java,
    }


def _spawn(work: Path, name: str, argv: list[str], env: dict[str, str]) -> Proc:
    """A Spark daemon or server in ``work``, its output in ``work/<name>.out``. A JVM may take
    a while to stop gracefully on a busy machine: 15 s before it is killed."""
    return Proc(name, argv, work / f"{name}.out", env, cwd=work, grace=15.0)


class StandaloneCluster:
    """A Spark standalone cluster: a master and ``workers`` workers of ``cores`` cores each,
    on loopback. ``url`` is its ``spark://`` master URL."""

    def __init__(self, work: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.work = Path(work)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = 0
        self.ui_port = 0
        #: The master, then the workers.
        self._procs: list[Proc] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self.work.mkdir(parents=True, exist_ok=True)
        env = _spark_env(self.work)
        spark_class = str(spark_home() / "bin" / "spark-class")
        self.port, self.ui_port = free_port(), free_port()
        master = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                  "--port", str(self.port), "--webui-port", str(self.ui_port)]  # fmt: skip
        try:
            self._procs.append(_spawn(self.work, "master", master, env))
            wait_ready(
                lambda: port_open(self.port), self._procs, START_TIMEOUT,
                f"the Spark master to listen on {self.url}",
            )  # fmt: skip
            for n in range(self.workers):
                worker = [spark_class, "org.apache.spark.deploy.worker.Worker", self.url,
                          "--host", "127.0.0.1", "--webui-port", str(free_port()),
                          "--cores", str(self.cores), "--memory", self.memory,
                          "--work-dir", str(self.work / "workers" / str(n))]  # fmt: skip
                self._procs.append(_spawn(self.work, f"worker-{n}", worker, env))
            wait_ready(
                self._registered, self._procs, START_TIMEOUT,
                f"{self.workers} Spark workers to register with {self.url}",
            )  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict[str, object]:
        """The master's view (its web UI's JSON): workers, cores, applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            answer: dict[str, object] = json.loads(r.read())
        return answer

    def executors(self) -> list[int]:
        """The PIDs of the executor JVMs the workers run now."""
        found = []
        for worker in self._procs[1:]:
            for pid in descendants(worker.pid) if worker.running else ():
                with contextlib.suppress(OSError):
                    if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found.append(pid)
        return found

    def _registered(self) -> bool:
        with contextlib.suppress(OSError, ValueError):
            return self.status().get("aliveworkers") == self.workers
        return False

    def stop(self) -> None:
        """Stop the workers (the last started first), then the master, with whatever they
        started (executors, Python workers)."""
        for proc in reversed(self._procs):
            proc.stop()
        self._procs.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ConnectServer:
    """A Spark Connect server (``spark-submit --class SparkConnectServer``) on loopback, its
    Spark running on ``master``. ``session_timeout``: how long the server keeps a session
    whose client has gone quiet (``spark.connect.session.manager.defaultSessionTimeout``,
    60 min by default); closing a session stops its streaming queries. ``url`` is its
    ``sc://`` URL."""

    def __init__(
        self,
        work: Path,
        master: str = "local[2]",
        session_timeout: str = "5min",
        conf: dict[str, str] | None = None,
    ) -> None:
        self.work = Path(work)
        self.master = master
        self.session_timeout = session_timeout
        self.conf = dict(conf or {})
        self.port = 0
        self.proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self.work.mkdir(parents=True, exist_ok=True)
        env = _spark_env(self.work)
        self.port = free_port()
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.session.manager.defaultSessionTimeout": self.session_timeout,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.local.dir": str(self.work / "local"),
            "spark.sql.warehouse.dir": str(self.work / "warehouse"),
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            **self.conf,
        }
        argv = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_CLASS,
                "--name", "baton-connect", "--master", self.master]  # fmt: skip
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        argv.append(str(connect_jar()))
        self.proc = _spawn(self.work, "connect", argv, env)
        try:
            self.proc.wait_ready(
                lambda: port_open(self.port), START_TIMEOUT,
                f"the Spark Connect server to listen on 127.0.0.1:{self.port}",
            )  # fmt: skip
        except BaseException:  # an interrupt too: leave nothing running
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
