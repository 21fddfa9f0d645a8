"""The campaign's cluster: five hosts in network namespaces, each with a node agent and a
``baton elect`` candidate per job lease; a Redis store on a host of its own (with store
failover: a master and a replica there, a failover client on every host keeping the master file
that host's agent and candidates follow, and failover servers on two hosts); a cascade
root -> branch -> leaf whose node services are objects placed by the controller; placed
counters; and a writer at the root that records every write in the history
(:mod:`baton.chaos.writer`). The branch's database lives on a small disk that can fill
(:mod:`baton.chaos.disk`).

Every process is a :class:`~baton.local.processes.Proc` started in a session of its own (so a
signal reaches its whole process group: a paused agent pauses its Spark JVM too) inside its
host's namespace. Nothing here judges what happens: :mod:`baton.chaos.checker` does, from the
history and the node databases.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from baton.cascade import commands
from baton.cascade.model import Role
from baton.chaos.disk import SmallDisk, node_db
from baton.chaos.history import History
from baton.chaos.net import Network
from baton.chaos.writer import Writer
from baton.local.processes import Proc, java_of
from baton.local.waiting import wait_for

#: The libfaketime that shifts one process's clocks (Debian ``faketime``); CLOCK_MONOTONIC too.
FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
LEASES = ("job-a", "job-b")
COUNTERS = ("c1", "c2")
CASCADE = {"s1": None, "s2": "s1", "s3": "s2"}
#: The cascade's set name.
CASCADE_SET = "chaos"
#: The hosts labelled ``spark=yes``: the branch's and the leaf's workers (which need Spark) are
#: placed only there, as an operator keeps Spark on the machines sized for it. A worker that
#: moves lands on the other one, whose JVM is already warm, rather than starting a JVM on a
#: host of five agents sharing two cores (a cold start took 80 s at load 8 and held each
#: round's settle up to it).
SPARK_HOSTS = 2
#: The host labelled ``root=yes``, where the cascade's first root is placed with one replica:
#: as a database lives on one machine, losing that host (its agent killed or frozen, or the
#: host cut off) loses the root, and only a failover brings the set back (with two replicas,
#: placement would just move the service to the standby). Not a Spark host: a root needs none.
ROOT_HOST_INDEX = SPARK_HOSTS
STORE_PORT = 6390
#: The Redis servers of the store (the first starts as master) and their data directories.
STORES = {"store": STORE_PORT, "store2": STORE_PORT + 1}
FAILOVER_CLIENT_PORT = 9101
FAILOVER_SERVER_PORT = 9100
#: The hosts that run a failover server (two: no single point of failure).
FAILOVER_SERVERS = ("h1", "h2")
#: How long a service may take to stop on SIGTERM before it is killed.
GRACE = 15.0


class ChaosCluster:
    """See the module docstring. ``directory`` keeps everything: logs, history, databases."""

    def __init__(
        self, directory: Path, *, hosts: int = 5, ttl: float = 2.0, failover: bool = True
    ) -> None:
        self.dir = directory
        self.failover = failover
        self.ttl = ttl
        self.hosts = [f"h{i + 1}" for i in range(hosts)]
        self.logs = directory / "logs"
        self.history_dir = directory / "history"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.net = Network([*self.hosts, "st"])
        self.store_url = f"redis://{self.net.address('st')}:{STORE_PORT}/0"
        self.stores = list(STORES) if failover else ["store"]
        self.token_file = directory / "token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
        self.token = self.token_file.read_text().strip()
        self.resource = directory / "fenced.db"
        self.cascade_dir = directory / "cascade"
        self.history = History(self.history_dir, "harness")
        # Mounted before any process starts, so that every host's mount namespace has it.
        self.disk = SmallDisk(directory, self.history)
        self.services: dict[str, Proc] = {}
        self.clock_files: dict[str, Path] = {}
        self.ports = {h: 7400 + i for i, h in enumerate(self.hosts)}
        self.writer: Writer | None = None
        #: The cascade's root now: ``s1`` until the root is lost and a failover promotes another.
        self.root = "s1"
        self._define()

    # -- the processes -------------------------------------------------------------------------

    def store_dir(self, name: str) -> Path:
        return self.dir / name

    def master_file(self, host: str) -> Path:
        return self.dir / "agents" / host / "redis-master"

    def host_store_url(self, host: str) -> str:
        """The store as ``host``'s processes reach it: through its master file (failover)."""
        if not self.failover:
            return self.store_url
        return f"redis+masterfile://{self.master_file(host)}?db=0"

    def _service(
        self, name: str, host: str, argv: list[str], env: dict[str, str] | None = None
    ) -> Proc:
        """Long-running process ``name`` inside ``host``, its output in ``logs/<name>.log``.
        Started in a session of its own, whose whole group every signal reaches: a paused
        agent pauses its Spark JVM too."""
        return Proc(
            name, self.net.argv(host, argv), self.logs / f"{name}.log", env,
            group=True, grace=GRACE, start=False,
        )  # fmt: skip

    def _define(self) -> None:
        bin_dir = Path(sys.executable).parent
        for name in self.stores:
            self.store_dir(name).mkdir(exist_ok=True)
            self.services[name] = self._service(
                name,
                "st",
                [
                    "redis-server",
                    "--bind", self.net.address("st"),
                    "--port", str(STORES[name]),
                    "--protected-mode", "no",
                    "--save", "",
                    # Kept on restart (appendonly, fsync each write); store-lost removes it.
                    "--appendonly", "yes",
                    "--appendfsync", "always",
                    "--dir", str(self.store_dir(name)),
                ],
            )  # fmt: skip
        if self.failover:
            self._define_failover(bin_dir)
        for host in self.hosts:
            self.services[f"agent-{host}"] = self._service(
                f"agent-{host}",
                host,
                [str(bin_dir / "baton"), "node"],
                {
                    "BATON_NODE_ID": host,
                    "BATON_STORE": self.host_store_url(host),
                    "BATON_TOKEN_FILE": str(self.token_file),
                    "BATON_DATA_DIR": str(self.dir / "agents" / host),
                    "BATON_LISTEN": f"{self.net.address(host)}:{self.ports[host]}",
                    "BATON_TTL": str(self.ttl),
                    "BATON_RECONCILE_INTERVAL": "0.5",
                    "BATON_SPARK_MASTER": "local[1]",
                    "BATON_LABELS": self._labels(host),
                    # Spark's driver binds inside the namespace, where the host name resolves
                    # to nothing the namespace has.
                    "SPARK_LOCAL_IP": "127.0.0.1",
                },
            )
            for lease in LEASES:
                clock = self.dir / "clocks" / f"{lease}-{host}"
                clock.parent.mkdir(exist_ok=True)
                clock.write_text("+0\n")
                name = f"elect-{lease}-{host}"
                self.clock_files[name] = clock
                self.services[name] = self._service(
                    name,
                    host,
                    [
                        str(bin_dir / "baton"), "elect", lease,
                        "--store", self.host_store_url(host), "--ttl", str(self.ttl), "--id", host,
                        # The job's own clock stays true: only the candidate's lease timing is
                        # under test, and libfaketime stalls Python's timed waits.
                        "--", "env", "-u", "LD_PRELOAD", sys.executable, "-m", "baton.chaos.job",
                        str(self.resource), str(self.history_dir),
                    ],
                    {
                        "LD_PRELOAD": FAKETIME,
                        "FAKETIME_TIMESTAMP_FILE": str(clock),
                        "FAKETIME_CACHE_DURATION": "1",
                    },
                )  # fmt: skip

    def _labels(self, host: str) -> str:
        if host in self.hosts[:SPARK_HOSTS]:
            return "spark=yes"
        return "root=yes" if host == self.hosts[ROOT_HOST_INDEX] else ""

    def root_host(self) -> str | None:
        """The one host that serves the cascade's root (None once a failover moved the root to
        a node placed with a standby)."""
        return self.hosts[ROOT_HOST_INDEX] if self.root == "s1" else None

    def _define_failover(self, bin_dir: Path) -> None:
        """A failover client on every host, a failover server on each of FAILOVER_SERVERS, at
        their default timings (what a user runs)."""
        baton = str(bin_dir / "baton")
        clients = ",".join(f"{h}@{self.net.address(h)}:{FAILOVER_CLIENT_PORT}" for h in self.hosts)
        servers = ",".join(f"{self.net.address('st')}:{port}" for port in STORES.values())
        for host in self.hosts:
            self.master_file(host).parent.mkdir(parents=True, exist_ok=True)
            self.services[f"rcc-{host}"] = self._service(
                f"rcc-{host}",
                host,
                [
                    baton, "redis-failover", "client", "--client-id", host,
                    "--master-file", str(self.master_file(host)),
                    "--listen", f"{self.net.address(host)}:{FAILOVER_CLIENT_PORT}",
                    "--token-file", str(self.token_file),
                ],
            )  # fmt: skip
        for host in FAILOVER_SERVERS:
            self.services[f"rcs-{host}"] = self._service(
                f"rcs-{host}",
                host,
                [
                    baton, "redis-failover", "server", "--redis-servers", servers,
                    "--client-ids", clients, "--server-id", host,
                    "--listen", f"{self.net.address(host)}:{FAILOVER_SERVER_PORT}",
                    "--token-file", str(self.token_file),
                ],
            )  # fmt: skip

    def start(self) -> None:
        from baton.chaos.resource import FencedResource

        FencedResource(self.resource)
        for name in self.stores:
            self.services[name].start()
            wait_for(partial(self.store_role, name), timeout=20, what=name)
        if self.failover:
            for name in self.stores[1:]:
                self._redis(name).replicaof(self.net.address("st"), STORE_PORT)
            for name in self.failover_services():
                self.services[name].start()
            first = f"{self.net.address('st')}:{STORE_PORT}"
            wait_for(
                lambda: set(self.master_files().values()) == {first},
                timeout=60,
                what="every host's master file to name the store",
            )
        for name, svc in self.services.items():
            if name not in self.stores and name not in self.failover_services():
                svc.start()
        self.history.record("cluster-start", hosts=self.hosts, failover=self.failover)

    def failover_services(self) -> list[str]:
        return [n for n in self.services if n.startswith(("rcc-", "rcs-"))]

    def _redis(self, name: str) -> Any:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return redis.Redis(
            self.net.address("st"),
            STORES[name],
            socket_timeout=1,
            socket_connect_timeout=1,
            retry=Retry(NoBackoff(), 0),
        )

    def store_role(self, name: str) -> str | None:
        """``master`` or ``slave`` as store server ``name`` says; None if it does not answer."""
        import redis

        if self.services[name].paused or not self.services[name].running:
            return None
        try:
            with self._redis(name) as r:
                return str(r.info("replication")["role"])
        except (redis.RedisError, OSError):
            return None

    def master_files(self) -> dict[str, str]:
        """Every host's master file as it reads now ('' while empty or missing)."""
        out = {}
        for host in self.hosts:
            try:
                out[host] = self.master_file(host).read_text().strip()
            except OSError:
                out[host] = ""
        return out

    def store_address(self, name: str) -> str:
        """Store server ``name`` as the master files name it (``host:port``)."""
        return f"{self.net.address('st')}:{STORES[name]}"

    def store_master(self) -> str | None:
        """The store server every master file names, if they all name the same one."""
        named = set(self.master_files().values())
        if len(named) != 1 or "" in named:
            return None
        return next(iter(named))

    def admin_store_url(self) -> str:
        """The store as an operator's command reaches it now: through any non-empty master
        file (failover), else the single store."""
        for master in self.master_files().values() if self.failover else ():
            if master:
                return f"redis://{master}/0"
        return self.store_url

    def restart(self, name: str) -> None:
        svc = self.services[name]
        svc.kill()
        svc.start()
        if name in STORES:
            wait_for(lambda: self.store_role(name) is not None, timeout=20, what=name)

    def jvms(self, name: str) -> list[int]:
        """The Spark JVMs running under service ``name``."""
        svc = self.services[name]
        return java_of(svc.pid) if svc.running else []

    def agents(self) -> list[str]:
        return [f"agent-{h}" for h in self.hosts]

    # -- what the harness asks the cluster, through the API ------------------------------------

    def api(self, host: str, path: str) -> Any:
        res = httpx.get(
            f"http://{self.net.address(host)}:{self.ports[host]}{path}",
            headers={"authorization": f"Bearer {self.token}"},
            timeout=2,
        )
        res.raise_for_status()
        return res.json()

    def views(self, path: str) -> dict[str, Any]:
        """``path`` as every answering, unpaused agent sees it."""
        out = {}
        for host in self.hosts:
            if self.services[f"agent-{host}"].paused:
                continue
            try:
                out[host] = self.api(host, path)
            except (httpx.HTTPError, ValueError):
                continue
        return out

    def cli(self, *args: str) -> str:
        baton = str(Path(sys.executable).parent / "baton")
        res = subprocess.run(
            [baton, *args], capture_output=True, text=True, check=False, timeout=60,
            env={**os.environ, "BATON_STORE": self.admin_store_url()},
        )  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"baton {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout

    # -- the cascade and the placed objects ----------------------------------------------------

    def location(self, node: str) -> str:
        return f"sqlite://{node_db(self.dir, node)}"

    def create_objects(self) -> None:
        """The cascade's node databases (tables created empty), then the placed objects."""
        self.cascade_dir.mkdir(exist_ok=True)
        for node, provider in CASCADE.items():
            db = sqlite3.connect(node_db(self.dir, node))
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, "
                "writer TEXT NOT NULL)"
            )
            if provider is not None:
                _audit_triggers(db)
            db.commit()
            db.close()
            if provider is None:
                commands.create_root(node, self.location(node), CASCADE_SET)
            else:
                role = Role.LEAF if node == "s3" else Role.BRANCH
                commands.create_subscriber(
                    role, node, self.location(node), provider, self.location(provider)
                )
            commands.add_table(self.location("s1"), "items", node)
        self.declare_objects()

    def declare_objects(self) -> None:
        """The placed objects, as an operator declares them (again, after the store's data was
        lost: the node databases keep the cascade's state, the store only what runs where).
        Only the missing ones: with store failover the data lost may have been a replica's, or
        a master's that was replaced first. Retried while the store cannot answer (no master
        during a switch, a replica still named)."""
        wanted: dict[str, list[str]] = {
            name: ["counter", name, "--partitions", "2", "--replicas", "3"] for name in COUNTERS
        }
        for node in CASCADE:
            spec = json.dumps({"location": self.location(node)})
            wanted[node] = ["cascade-worker", node, "--replicas", "2", "--spec", spec]
            if node != self.root:  # a subscriber: its worker runs on Spark
                wanted[node] += ["--selector", "spark=yes"]
            elif self.root_host() is not None:  # the first root: on its host alone
                wanted[node] = ["cascade-worker", node, "--replicas", "1", "--spec", spec]
                wanted[node] += ["--selector", "root=yes"]

        def declared() -> bool:
            try:
                have = {o["name"] for o in json.loads(self.cli("object", "list", "--json"))}
                for name, args in wanted.items():
                    if name not in have:
                        self.cli("object", "create", *args)
            except (RuntimeError, ValueError, subprocess.TimeoutExpired):
                return False
            return True

        wait_for(declared, timeout=60, interval=1.0, what="the objects declared")

    def subscribers(self) -> list[str]:
        """The cascade's nodes other than the root, now."""
        return [node for node in CASCADE if node != self.root]

    def start_writer(self, seed: int, sync: int = 0) -> Writer:
        """The application at the root; ``sync`` > 0: through the sync-mode writer helper."""
        self.writer = Writer(
            node_db(self.dir, self.root), self.history_dir, seed, sync=sync, set_name=CASCADE_SET
        )
        self.writer.start()
        return self.writer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.halt.set()
            self.writer.join(30)
        for name, svc in self.services.items():
            if name not in STORES:
                svc.stop()
        for name in self.stores:
            self.services[name].stop()
        self.history.close()
        self.net.close()


def _audit_triggers(db: sqlite3.Connection) -> None:
    """A user's append-only audit of what the apply did to ``items`` on a subscriber: a row per
    row version written. Events carry whole row images, so a replayed event leaves no trace in
    ``items`` itself; here it leaves a second row for the same (id, n)."""
    db.execute("CREATE TABLE IF NOT EXISTS items_applied (id INTEGER, n INTEGER, op TEXT, at REAL)")
    at = "(julianday('now') - 2440587.5) * 86400.0"  # Unix time, as the history's ``t``
    for op, row in (("INSERT", "new"), ("UPDATE", "new"), ("DELETE", "old")):
        db.execute(
            f"CREATE TRIGGER IF NOT EXISTS items_audit_{op.lower()} AFTER {op} ON items "
            f"BEGIN INSERT INTO items_applied VALUES ({row}.id, {row}.n, '{op[0]}', {at}); END"
        )


def probe_lag(cluster: ChaosCluster, timeout: float) -> float | None:
    """A user's lag: seconds from a commit at the root to every other node showing it (None:
    not in ``timeout``). Writes a fresh row and polls their databases read-only."""
    root = node_db(cluster.dir, cluster.root)
    waiting = [node_db(cluster.dir, node) for node in cluster.subscribers()]
    probe_id = -int(time.time() * 1000)
    db = sqlite3.connect(root, timeout=5, isolation_level=None)
    try:
        db.execute("INSERT INTO items VALUES (?, 0, 'probe')", (probe_id,))
    finally:
        db.close()
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        waiting = [path for path in waiting if not _has_row(path, probe_id)]
        if not waiting:
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def _has_row(path: Path, id_: int) -> bool:
    try:
        ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return ro.execute("SELECT 1 FROM items WHERE id = ?", (id_,)).fetchone() is not None
        finally:
            ro.close()
    except sqlite3.Error:
        return False
