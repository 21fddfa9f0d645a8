"""Hosts on one machine: a network namespace per host, a bridge between them, nftables faults.

::

    with Network(["h1", "h2", "st"]) as net:
        net.run("h1", ["ip", "addr"])            # a command inside host h1
        net.address("h2")                        # 10.213.R.2
        net.cut("h1", "h2")                      # both ways
        net.drop("h1", "h2")                     # one way: h1's packets to h2 are lost
        net.isolate("h1"); net.heal()

The bridge lives in a namespace of its own (the hub), so the machine's own interfaces and routes
are untouched, except for one veth the harness uses to reach the hosts (``net.harness``), with
an address in the same private /24. Namespace and interface names carry a per-run tag, so two
runs (or a crashed one) never collide; :meth:`Network.close` removes everything it made, and
``Network.sweep()`` removes what a killed run left behind.

Needs root and ``ip`` and ``nft`` (Debian ``iproute2`` and ``nftables``).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from baton.errors import ConfigError

#: Every namespace this module makes starts with this, so a sweep finds leftovers.
PREFIX = "btx"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise ConfigError(f"ip {' '.join(args)} failed: {res.stderr.strip()}")
    return res


def _free_subnet() -> int:
    """A ``10.213.<n>.0/24`` no network of this host uses yet: two test runs side by side (the
    suite's two workers, a campaign beside a partition test) must not share a harness
    address."""
    taken = _ip("-o", "-4", "addr", "show", check=False).stdout
    free = [n for n in range(10, 251) if f" 10.213.{n}." not in taken]
    return random.choice(free or list(range(10, 251)))


class Network:
    """Namespaces ``btx<tag>-<host>`` on one bridge, host ``i`` at ``10.213.<subnet>.<i+1>``."""

    def __init__(self, hosts: Sequence[str], subnet: int | None = None) -> None:
        if os.geteuid() != 0:
            raise ConfigError("the chaos network needs root (network namespaces, nftables)")
        for tool in ("ip", "nft"):
            if shutil.which(tool) is None:
                raise ConfigError(f"{tool} not found: apt-get install iproute2 nftables")
        self.tag = f"{os.getpid() % 10000:04d}"
        self.subnet = subnet if subnet is not None else _free_subnet()
        self.hosts = list(hosts)
        self.hub = f"{PREFIX}{self.tag}-hub"
        self._addr = {h: f"10.213.{self.subnet}.{i + 1}" for i, h in enumerate(self.hosts)}
        self.harness = f"10.213.{self.subnet}.254"
        self._rules: dict[str, list[str]] = {h: [] for h in self.hosts}
        self._made: list[str] = []
        self._root_veth = f"{PREFIX}{self.tag}r"
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def ns(self, host: str) -> str:
        return f"{PREFIX}{self.tag}-{host}"

    def address(self, host: str) -> str:
        return self._addr[host]

    def _build(self) -> None:
        _ip("netns", "add", self.hub)
        self._made.append(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            # The pair is made inside the host, one end is moved to the hub and bridged.
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}")
            _ip("-n", ns, "link", "set", f"p{i}", "netns", self.hub)
            _ip("-n", self.hub, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", self.hub, "link", "set", f"p{i}", "up")
            _ip("-n", ns, "addr", "add", f"{self._addr[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self._nft(host, "add table inet chaos")
            self._nft(host, "add chain inet chaos out { type filter hook output priority 0 ; }")
            self._nft(host, "add chain inet chaos in { type filter hook input priority 0 ; }")
        # The harness's way in: a veth from this (the machine's) namespace to the bridge.
        _ip("link", "add", self._root_veth, "type", "veth", "peer", "name", "ph")
        _ip("link", "set", "ph", "netns", self.hub)
        _ip("-n", self.hub, "link", "set", "ph", "master", "br0")
        _ip("-n", self.hub, "link", "set", "ph", "up")
        _ip("addr", "add", f"{self.harness}/24", "dev", self._root_veth)
        _ip("link", "set", self._root_veth, "up")

    def _nft(self, host: str, rule: str) -> None:
        res = subprocess.run(
            ["ip", "netns", "exec", self.ns(host), "nft", rule],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            raise ConfigError(f"nft {rule!r} in {host} failed: {res.stderr.strip()}")

    def argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host`` (``ip netns exec`` keeps the pid: it execs)."""
        return ["ip", "netns", "exec", self.ns(host), *argv]

    def run(self, host: str, argv: Sequence[str]) -> str:
        res = subprocess.run(self.argv(host, argv), capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise ConfigError(f"{' '.join(argv)} in {host} failed: {res.stderr.strip()}")
        return res.stdout

    # Faults. Each adds drop rules; heal() removes them all.

    def drop(self, src: str, dst: str) -> None:
        """One way: packets from ``src`` to ``dst`` are lost (``dst`` still reaches ``src``, but
        TCP to ``src`` then stalls on the lost answers, as on a real one-way link fault)."""
        self._nft(src, f"add rule inet chaos out ip daddr {self._addr[dst]} drop")
        self._nft(dst, f"add rule inet chaos in ip saddr {self._addr[src]} drop")

    def cut(self, a: str, b: str) -> None:
        """Both ways between ``a`` and ``b``."""
        self.drop(a, b)
        self.drop(b, a)

    def isolate(self, host: str) -> None:
        """``host`` reaches no other host, and none reaches it (the harness still does)."""
        for other in self.hosts:
            if other != host:
                self.cut(host, other)

    def heal(self) -> None:
        for host in self.hosts:
            self._nft(host, "flush chain inet chaos out")
            self._nft(host, "flush chain inet chaos in")

    def close(self) -> None:
        _ip("link", "del", self._root_veth, check=False)
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()

    @staticmethod
    def sweep() -> None:
        """Remove the namespaces and veths of runs that were killed before closing."""
        for line in _ip("netns", "list", check=False).stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(PREFIX):
                _ip("netns", "del", name, check=False)
        for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
            parts = line.split(":")
            if len(parts) > 1:
                name = parts[1].strip().split("@")[0]
                if name.startswith(PREFIX):
                    _ip("link", "del", name, check=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
