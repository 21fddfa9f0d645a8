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
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from baton.errors import ServerError
from baton.local.ports import free_port
from baton.local.processes import descendants
from baton.spark.session import LOG4J as SESSION_LOG4J
from baton.testing.servers import wait_port

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
    """The environment of every Spark process started here: loopback only, this venv's
    Python for Python workers, scratch and logs inside ``work``, in the foreground."""
    for sub in ("logs", "tmp", "local", "workers"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    log4j = work / "log4j2.properties"
    log4j.write_text(LOG4J.format(log=work / "logs" / "spark.log"))
    java = f"-Dlog4j2.configurationFile=file:{log4j} -Djava.io.tmpdir={work / 'tmp'}"
    return {
        **os.environ,
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


class _Processes:
    """Child processes stopped together, with whatever they started."""

    def __init__(self, work: Path) -> None:
        self.work = Path(work)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._outs: list[int] = []

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        out = os.open(self.work / f"{name}.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._outs.append(out)
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.work,
            start_new_session=True,  # a signal to the test runner's group does not reach it
        )
        self.procs.append(proc)
        return proc

    def check(self, what: str) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise ServerError(
                    f"{what} exited with status {proc.returncode} while starting: see "
                    f"{self.work}/*.out and {self.work}/logs"
                )

    def stop(self) -> None:
        """SIGTERM every process (the last started first), SIGKILL what is left after 15 s,
        then every process they started that outlived them (executors, Python workers)."""
        children = [c for p in self.procs if p.poll() is None for c in descendants(p.pid)]
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for out in self._outs:
            os.close(out)
        self.procs.clear()
        self._outs.clear()


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
        self._procs = _Processes(self.work)

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
        self._procs.spawn("master", master, env)
        try:
            wait_port(self.port, START_TIMEOUT)
            for n in range(self.workers):
                worker = [spark_class, "org.apache.spark.deploy.worker.Worker", self.url,
                          "--host", "127.0.0.1", "--webui-port", str(free_port()),
                          "--cores", str(self.cores), "--memory", self.memory,
                          "--work-dir", str(self.work / "workers" / str(n))]  # fmt: skip
                self._procs.spawn(f"worker-{n}", worker, env)
            self._wait_workers()
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
        for worker in self._procs.procs[1:]:
            for pid in descendants(worker.pid):
                with contextlib.suppress(OSError):
                    if b"CoarseGrainedExecutorBackend" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        found.append(pid)
        return found

    def _wait_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            self._procs.check("a standalone master or worker")
            with contextlib.suppress(OSError, ValueError):
                if self.status().get("aliveworkers") == self.workers:
                    return
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{self.workers} Spark workers did not register with {self.url} within "
                    f"{START_TIMEOUT:.0f}s: see {self.work}/*.out and {self.work}/logs"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        self._procs.stop()

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
        self._procs = _Processes(self.work)
        self.proc: subprocess.Popen[bytes] | None = None

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
        self.proc = self._procs.spawn("connect", argv, env)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                self._procs.check("the Spark Connect server")
                try:
                    wait_port(self.port, 0.5)
                    break
                except ServerError:
                    if time.monotonic() > deadline:
                        raise ServerError(
                            f"the Spark Connect server did not listen on 127.0.0.1:{self.port} "
                            f"within {START_TIMEOUT:.0f}s: see {self.work}/connect.out"
                        ) from None
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._procs.stop()
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
