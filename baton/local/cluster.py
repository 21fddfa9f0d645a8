"""``LocalCluster``: real ``baton node`` processes on one host, for tests, demos and ``baton up``.

::

    with LocalCluster(3, store_url="sqlite:///tmp/c/store.db", data_dir=Path("/tmp/c")) as c:
        ctl, epoch = c.wait_for(c.controller)
        c.kill(ctl)                                  # SIGKILL
        c.wait_for(lambda: (c.controller() or ("", 0))[1] > epoch)
        c.pause("n1"); c.resume("n1"); c.restart("n2")

Each node gets a free loopback port, the cluster token is written to ``data_dir/token`` (mode
0600) and never printed, and each node's output goes to ``data_dir/<id>.log``.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from baton.errors import WaitTimeout
from baton.local.ports import free_port
from baton.local.processes import Proc
from baton.local.waiting import Falsy
from baton.local.waiting import wait_for as _wait_for

T = TypeVar("T")


class LocalNode:
    """One node process of a :class:`LocalCluster`."""

    def __init__(self, cluster: LocalCluster, node_id: str) -> None:
        self.cluster = cluster
        self.id = node_id
        self.host = cluster.host_for(node_id)
        self.port = free_port(self.host)
        self.proc: Proc | None = None
        #: Extra environment for this node (``BATON_LABELS``, ``BATON_CAPACITY``...).
        self.env: dict[str, str] = {}

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> None:
        c = self.cluster
        env = {
            "BATON_NODE_ID": self.id,
            "BATON_STORE": c.store_url,
            "BATON_TOKEN_FILE": str(c.token_file),
            "BATON_DATA_DIR": str(c.data_dir / self.id),
            "BATON_LISTEN": self.address,
            "BATON_TTL": str(c.ttl),
            "BATON_RECONCILE_INTERVAL": str(c.reconcile_interval),
            **c.env,
            **self.env,
        }
        (c.data_dir / self.id).mkdir(parents=True, exist_ok=True)
        baton = str(Path(sys.executable).with_name("baton"))
        self.proc = Proc(self.id, [baton, "node"], c.data_dir / f"{self.id}.log", env=env)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.running

    def get(self, path: str) -> httpx.Response:
        return httpx.get(
            f"{self.url}{path}",
            headers={"authorization": f"Bearer {self.cluster.token}"},
            timeout=2,
        )

    def status(self) -> dict[str, Any] | None:
        """``/v1/status`` of this node, or None if it does not answer."""
        if not self.running:
            return None
        try:
            res = self.get("/v1/status")
        except httpx.HTTPError:
            return None
        return res.json() if res.status_code == 200 else None


class LocalCluster:
    """``n`` real node processes sharing one store."""

    def __init__(
        self,
        n: int,
        store_url: str | None = None,
        data_dir: Path | None = None,
        ttl: float = 2.0,
        *,
        reconcile_interval: float = 0.5,
        distinct_hosts: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        """``distinct_hosts``: each node listens (and calls out) on its own loopback address,
        127.0.X.<i+1>, so a firewall rule can cut one node off from another (see
        :class:`baton.testing.network.Firewall`)."""
        import random
        import tempfile

        self.reconcile_interval = reconcile_interval
        self.env = dict(env or {})
        self._subnet = random.randint(2, 250) if distinct_hosts else None

        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="baton-cluster-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store_url = store_url or f"sqlite://{self.data_dir.resolve() / 'store.db'}"
        self.ttl = ttl
        self.token_file = self.data_dir / "token"
        if not self.token_file.exists():
            fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32))
        self.token = self.token_file.read_text().strip()
        self.nodes = {f"n{i}": LocalNode(self, f"n{i}") for i in range(n)}

    def host_for(self, node_id: str) -> str:
        if self._subnet is None:
            return "127.0.0.1"
        return f"127.0.{self._subnet}.{int(node_id.removeprefix('n')) + 1}"

    def start(self) -> Self:
        for node in self.nodes.values():
            node.start()
        return self

    def node(self, node_id: str) -> LocalNode:
        return self.nodes[node_id]

    def status(self) -> dict[str, Any] | None:
        """The status as the first answering node sees it."""
        for node in self.nodes.values():
            st = node.status()
            if st is not None:
                return st
        return None

    def controller(self) -> tuple[str, int] | None:
        """(id, epoch) of the controller, as a running node reports it."""
        st = self.status()
        ctl = st and st["controller"]
        return (ctl["id"], ctl["epoch"]) if ctl else None

    def get(self, path: str) -> dict[str, Any] | None:
        """``GET path`` (JSON) from the first running node that answers it."""
        for node in self.nodes.values():
            if not node.running:
                continue
            try:
                res = node.get(path)
            except httpx.HTTPError:
                continue
            if res.status_code == 200:
                data: dict[str, Any] = res.json()
                return data
        return None

    def states(self) -> dict[str, str]:
        st = self.status()
        return {n["id"]: n["state"] for n in st["nodes"]} if st else {}

    def kill(self, node_id: str) -> None:
        """SIGKILL: a crash (returns once the process is gone)."""
        if (proc := self.nodes[node_id].proc) is not None:
            proc.kill()

    def pause(self, node_id: str) -> None:
        """SIGSTOP: frozen, as in a long pause (the node process only)."""
        if (proc := self.nodes[node_id].proc) is not None:
            proc.pause()

    def resume(self, node_id: str) -> None:
        if (proc := self.nodes[node_id].proc) is not None:
            proc.resume()

    def terminate(self, node_id: str) -> None:
        """SIGTERM: a graceful stop, without waiting for it."""
        if (proc := self.nodes[node_id].proc) is not None:
            proc.signal(signal.SIGTERM)

    def restart(self, node_id: str) -> None:
        """Stop the node gracefully and start it again, with a fresh log."""
        node = self.nodes[node_id]
        if node.proc is not None:
            node.proc.stop()
        node.start()

    def wait_for(self, predicate: Callable[[], T | Falsy], timeout: float = 30.0) -> T:
        """:func:`~baton.local.waiting.wait_for`; a timeout's message also carries the last
        lines each node wrote, so a failure seen once (in CI) can still be explained."""
        try:
            return _wait_for(predicate, timeout=timeout)
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n{self.log_tails()}") from None

    def log_tails(self, lines: int = 15) -> str:
        """The last ``lines`` lines of each node's output, under its id."""
        parts: list[str] = []
        for node in self.nodes.values():
            said = node.proc.lines()[-lines:] if node.proc is not None else []
            state = "running" if node.running else "not running"
            parts.append(f"--- {node.id} ({state}), last {len(said)} lines:")
            parts.extend(said)
        return "\n".join(parts)

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.proc is not None:
                node.proc.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
