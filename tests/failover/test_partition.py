"""A partition with network namespaces and nftables: the server and one client lose the
master, another client still reaches it. The seed's rule (a client answers pong only if the
master is unavailable from where it stands) holds the switch back."""

from __future__ import annotations

import os
import shutil
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import redis

from baton.chaos.net import Network
from baton.local.processes import Proc
from baton.store.master_file import Address, read_master
from baton.testing import wait_for
from baton.testing.failover import FAST, baton_exe

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None,
    reason="network namespaces and nftables need root, ip and nft",
)

PORT = 6379


@pytest.fixture
def net() -> Iterator[Network]:
    with Network(["m", "r", "srv", "ca", "cb"]) as network:
        yield network


def _redis(net: Network, tmp: Path, host: str, port: int, *extra: str) -> Proc:
    d = tmp / f"redis-{host}-{port}"
    d.mkdir()
    exe = shutil.which("redis-server") or "redis-server"
    argv = [
        exe, "--port", str(port), "--bind", net.address(host), "--protected-mode", "no",
        "--save", "", "--appendonly", "no", "--dir", str(d), "--logfile", str(d / "log"),
        "--repl-diskless-sync-delay", "0", *extra,
    ]  # fmt: skip
    return Proc(f"redis-{host}-{port}", net.argv(host, argv), tmp / f"redis-{host}-{port}.out")


def _info(address: Address) -> dict[str, object] | None:
    try:
        with redis.Redis(host=address.host, port=address.port, socket_timeout=0.5) as r:
            return dict(r.info("replication"))
    except (redis.RedisError, OSError):
        return None


def _linked(address: Address) -> bool:
    return (_info(address) or {}).get("master_link_status") == "up"


def test_a_client_that_still_reaches_the_master_holds_the_switch_back(
    tmp_path: Path, net: Network
) -> None:
    master = Address(net.address("m"), PORT)
    replicas = [Address(net.address("r"), PORT + 1), Address(net.address("r"), PORT + 2)]
    procs = [_redis(net, tmp_path, "m", PORT)]
    procs += [
        _redis(net, tmp_path, "r", a.port, "--replicaof", master.host, str(PORT)) for a in replicas
    ]
    try:
        for a in replicas:
            wait_for(partial(_linked, a), timeout=20, what=f"{a} in sync")
        files = {}
        for host in ("ca", "cb"):
            files[host] = tmp_path / host / "redis-master"
            files[host].parent.mkdir()
            argv = [
                baton_exe(), "redis-failover", "client", "--client-id", host,
                "--master-file", str(files[host]), "--listen", f"{net.address(host)}:9101",
                "--check-timeout", "1",
            ]  # fmt: skip
            procs.append(Proc(host, net.argv(host, argv), tmp_path / f"client-{host}.out"))
        servers = ",".join(str(a) for a in [master, *replicas])
        clients = ",".join(f"{h}@{net.address(h)}:9101" for h in ("ca", "cb"))
        argv = [
            baton_exe(), "redis-failover", "server", "--redis-servers", servers,
            "--client-ids", clients, "--server-id", "s1", "--listen",
            f"{net.address('srv')}:9100", *FAST,
        ]  # fmt: skip
        server = Proc("srv", net.argv("srv", argv), tmp_path / "server.out")
        procs.append(server)
        wait_for(
            lambda: all(read_master(f) == master for f in files.values()),
            timeout=30,
            what="every file names the master",
        )

        net.drop("srv", "m")  # the server loses the master...
        net.drop("ca", "m")  # ...and so does client ca; cb still reaches it
        line = wait_for(
            lambda: next((x for x in server.lines() if "switch held back" in x), None),
            timeout=30,
            what="the switch held back",
        )
        assert "cb: refused (the master answers from here)" in line
        metrics = f"http://{net.address('srv')}:9100/metrics"

        def held_back() -> bool:
            with urllib.request.urlopen(metrics, timeout=2) as res:
                return "baton_failover_held_back 1.0" in res.read().decode()

        wait_for(held_back, what="the metric")
        # Nothing switched: the master is still the only master, every file still names it.
        assert (_info(master) or {}).get("role") == "master"
        assert all((_info(a) or {}).get("role") == "slave" for a in replicas)
        assert all(read_master(f) == master for f in files.values())
        assert not any("master switched" in x for x in server.lines())
    finally:
        for p in reversed(procs):
            p.stop()
