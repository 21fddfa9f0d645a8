"""Benchmark 11: store failover (issue 14), baton's unanimous switch against Redis Sentinel.

Three ``redis-server`` processes (a master and two replicas, loopback) and three *client hosts*,
each a writer thread in this process that sends ``INCR w:<client>`` as fast as it can, with
``CLIENT INFO`` in the same pipeline so that every acknowledgement says which server gave it.

* **baton**: a ``baton redis-failover client`` process per client host (default timings), one
  ``baton redis-failover server``; the writers use :func:`baton.failover.master_client`.
* **Sentinel**: three ``redis-sentinel`` processes (Debian's, quorum 2) at defaults
  (``down-after-milliseconds`` 30 s) and tuned (1 s); the writers use redis-py's
  ``Sentinel.master_for``, which asks the sentinels again on every new connection.

**unplanned**: SIGKILL of the master. Per system: the time from the kill to every client's first
write acknowledged by the new master (and, for baton, from its round's start, the detection, to
then), and acknowledged writes lost (acknowledged INCRs above the counter on the final master).

**planned**: ``baton redis-failover switch`` / ``SENTINEL FAILOVER``. Acknowledged writes lost,
writes acknowledged by the old master after the switch began (baton: after that client answered
``invalidated``), and the time from the command to every client writing to the new master.

``python -m bench.store_failover [--quick] [--output FILE]`` prints the markdown section.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from baton.errors import NoMaster
from baton.failover import master_client
from baton.failover.config import server_config
from baton.failover.serve import switch
from baton.local.ports import free_port
from baton.local.processes import Proc
from baton.local.waiting import wait_for
from baton.store.master_file import Address
from baton.testing.failover import (
    ClientRole,
    RedisGroup,
    ServerRole,
    baton_exe,
    failover_client,
)
from baton.testing.servers import wait_port
from bench.common import loadavg, temp_dir
from bench.plot import Canvas

CLIENTS = 3
SYSTEMS = ("baton", "sentinel (defaults)", "sentinel (down-after 1 s)")
DOWN_AFTER = {"sentinel (defaults)": 30_000, "sentinel (down-after 1 s)": 1_000}
#: Seconds of writes kept before the event and after every client moved, for the plot.
BEFORE, AFTER = 1.0, 1.0


class Writer(threading.Thread):
    """One client host's worker: acknowledged INCRs, each with the server that acknowledged
    it and the wall-clock time."""

    def __init__(self, client: str, make: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.make = make
        self.acks: list[tuple[float, int]] = []
        """(acknowledged at, server port), wall clock."""
        self.sent: list[float] = []
        """When each acknowledged write was sent (its check of the master file came first)."""
        self.errors: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        client = self.make()
        key = f"w:{self.client}"
        while not self.stopping.is_set():
            sent = time.time()
            try:
                pipe = client.pipeline(transaction=False)
                pipe.incr(key)
                pipe.execute_command("CLIENT", "INFO")
                _, info = pipe.execute()
                port = int(re.search(rb"laddr=[^ ]*:(\d+)", info)[1])  # type: ignore[index]
                self.acks.append((time.time(), port))
                self.sent.append(sent)
            except (NoMaster, redis.RedisError, OSError, TypeError):
                self.errors.append(time.time())
                self.stopping.wait(0.002)
        with contextlib.suppress(redis.RedisError, OSError):
            client.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)

    def first_on(self, port: int, after: float) -> float | None:
        return next((t for t, p in self.acks if p == port and t > after), None)


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


# -- the systems ---------------------------------------------------------------------------------


class BatonSystem:
    def __init__(self, tmp: Path, group: RedisGroup) -> None:
        self.tmp, self.group = tmp, group
        self.clients: list[ClientRole] = []
        self.server: ServerRole | None = None

    def start(self) -> None:
        self.clients = [failover_client(self.tmp, f"c{i}") for i in range(CLIENTS)]
        port = free_port()
        argv = [
            baton_exe(), "redis-failover", "server", "--redis-servers", self.group.spec,
            "--client-ids", ",".join(c.spec for c in self.clients), "--server-id", "s1",
            "--listen", f"127.0.0.1:{port}",
        ]  # fmt: skip
        proc = Proc("server", argv, self.tmp / "server.out")
        self.server = ServerRole("s1", port, proc)
        master = self.group.addresses[0]
        wait_for(lambda: all(c.master() == master for c in self.clients), timeout=30)

    def writer(self, i: int) -> Writer:
        path = self.clients[i].master_file
        return Writer(
            f"c{i}", lambda: master_client(path, socket_timeout=1, socket_connect_timeout=1)
        )

    def planned(self, new: Address) -> None:
        # The library call behind `baton redis-failover switch`, in this process: what is
        # measured is the protocol, not a Python process starting (as SENTINEL FAILOVER is a
        # command to a running sentinel).
        cfg = server_config(
            {
                "redis_servers": self.group.spec,
                "client_ids": ",".join(c.spec for c in self.clients),
                "server_id": "switch",
            }
        )
        asyncio.run(switch(cfg, new))

    def detected(self) -> float | None:
        """Wall-clock time the server started its round (from its log)."""
        assert self.server is not None
        line = next((x for x in self.server.proc.lines() if "round started" in x), None)
        return None if line is None else _log_time(line)

    def invalidated(self, i: int) -> float | None:
        line = next(
            (x for x in self.clients[i].proc.lines() if "invalidate -> invalidated" in x), None
        )
        return None if line is None else _log_time(line)

    def stop(self) -> None:
        if self.server is not None:
            self.server.proc.stop()
        for c in self.clients:
            c.proc.stop()


class SentinelSystem:
    def __init__(self, tmp: Path, group: RedisGroup, down_after_ms: int) -> None:
        self.tmp, self.group, self.down_after = tmp, group, down_after_ms
        self.ports = [free_port() for _ in range(3)]
        self.procs: list[Proc] = []

    def start(self) -> None:
        exe = shutil.which("redis-sentinel")
        if exe is None:
            raise RuntimeError("redis-sentinel is not installed: apt-get install redis-sentinel")
        master = self.group.addresses[0]
        for i, port in enumerate(self.ports):
            d = self.tmp / f"sentinel{i}"
            d.mkdir(parents=True, exist_ok=True)
            conf = d / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d / 'log'}\n"
                f"sentinel monitor bm {master.host} {master.port} 2\n"
                f"sentinel down-after-milliseconds bm {self.down_after}\n"
            )
            self.procs.append(Proc(f"sentinel{i}", [exe, str(conf)], d / "out"))
            wait_port(port)

        # Every sentinel knows the replicas and the other sentinels before the trial.
        def ready() -> bool:
            for port in self.ports:
                with redis.Redis(port=port, socket_timeout=1) as s:
                    m = s.sentinel_master("bm")
                    if int(m["num-slaves"]) < 2 or int(m["num-other-sentinels"]) < 2:
                        return False
            return True

        wait_for(ready, timeout=60, interval=0.2)

    def writer(self, i: int) -> Writer:
        hosts = [("127.0.0.1", p) for p in self.ports]

        def make() -> Any:
            sentinel = Sentinel(hosts, socket_timeout=1)  # type: ignore[no-untyped-call]
            return sentinel.master_for(  # type: ignore[no-untyped-call]
                "bm", socket_timeout=1, socket_connect_timeout=1, retry=_no_retry()
            )

        return Writer(f"c{i}", make)

    def planned(self, new: Address) -> None:
        del new  # Sentinel chooses the replica itself
        with redis.Redis(port=self.ports[0], socket_timeout=5) as s:
            s.execute_command("SENTINEL", "FAILOVER", "bm")

    def detected(self) -> float | None:
        for proc in self.procs:
            log = proc.out.parent / "log"
            for line in log.read_text(errors="replace").splitlines():
                if "+odown" in line:
                    return _sentinel_time(line)
        return None

    def stop(self) -> None:
        for p in self.procs:
            p.stop()


def _log_time(line: str) -> float:
    stamp = line.split(maxsplit=1)[0].removeprefix("ts=").removesuffix("Z")
    return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.UTC).timestamp()


def _sentinel_time(line: str) -> float | None:
    m = re.search(r"(\d+ \w+ \d{4} \d\d:\d\d:\d\d\.\d+)", line)
    if m is None:
        return None
    when = datetime.datetime.strptime(m[1], "%d %b %Y %H:%M:%S.%f")
    return when.replace(tzinfo=datetime.UTC).timestamp()


# -- one trial -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _system(name: str, tmp: Path) -> Iterator[tuple[RedisGroup, Any]]:
    with RedisGroup(tmp / "redis", 3) as group:
        system: Any = (
            BatonSystem(tmp, group)
            if name == "baton"
            else SentinelSystem(tmp, group, DOWN_AFTER[name])
        )
        try:
            system.start()
            yield group, system
        finally:
            system.stop()


def trial(name: str, kind: str, keep_streams: bool = False) -> dict[str, Any]:
    """One unplanned kill or planned switch of ``name``; returns its numbers."""
    with temp_dir("baton-bench-sf-") as tmp, _system(name, tmp) as (group, system):
        old = group.addresses[0]
        writers = [system.writer(i) for i in range(CLIENTS)]
        for w in writers:
            w.start()
        try:
            wait_for(lambda: all(len(w.acks) > 200 for w in writers), timeout=30)
            time.sleep(BEFORE)  # steady writes before the event, for the plot
            event = time.time()
            if kind == "unplanned":
                group.servers[0].kill()
            else:
                system.planned(group.addresses[2])

            def moved() -> bool:
                return all(
                    any(p != old.port and t > event for t, p in w.acks[-50:]) for w in writers
                )

            wait_for(moved, timeout=300, interval=0.01)
            time.sleep(AFTER)
        finally:
            for w in writers:
                w.stop()
        masters = wait_for(lambda: group.masters() or None, timeout=60)
        new = masters[0]
        firsts = [w.first_on(new.port, event) for w in writers]
        with redis.Redis(host=new.host, port=new.port, socket_timeout=5) as r:
            final = [int(r.get(f"w:c{i}") or 0) for i in range(CLIENTS)]
        acked = [len(w.acks) for w in writers]
        lost = sum(max(0, a - f) for a, f in zip(acked, final, strict=True))
        if name == "baton":
            cutoffs = [system.invalidated(i) or event for i in range(CLIENTS)]
        else:
            cutoffs = [event] * CLIENTS
        # Writes sent after the cutoff (the client's log time has millisecond precision:
        # rounded up) and acknowledged by the old master.
        late = sum(
            sum(
                1
                for (_, p), sent in zip(w.acks, w.sent, strict=True)
                if p == old.port and sent > cut + 0.001
            )
            for w, cut in zip(writers, cutoffs, strict=True)
        )
        detected = system.detected()
        moved_at = max(f for f in firsts if f is not None)
        out: dict[str, Any] = {
            "system": name,
            "kind": kind,
            "moved": moved_at - event,
            "after_detection": None if detected is None else moved_at - detected,
            "lost": lost,
            "acked": sum(acked),
            "old_after": late,
            "new": str(new),
        }
        if keep_streams:
            out["streams"] = [
                [
                    (t - event, 0 if p == old.port else 1)
                    for t, p in w.acks[:: max(1, len(w.acks) // 4000)]
                ]
                for w in writers
            ]
        return out


def takeover_trial() -> dict[str, Any]:
    """baton only (issue 27): a planned switch (``baton redis-failover switch``, a process)
    SIGKILLed while it waits for its new master to catch up (the target's replication link is
    down for good), every client's file empty. The running server (default timings) takes the
    round over once the clients report it quiet: the time from the kill to every file naming
    the master again, and to every client's first write acknowledged after the kill."""
    with temp_dir("baton-bench-sf-") as tmp, _system("baton", tmp) as (group, system):
        old, target = group.addresses[0], group.addresses[2]
        writers = [system.writer(i) for i in range(CLIENTS)]
        for w in writers:
            w.start()
        try:
            wait_for(lambda: all(len(w.acks) > 200 for w in writers), timeout=30)
            with group.client(2) as r:
                r.config_set("masterauth", "wrong")
                r.client_kill_filter(_type="master")
            argv = [
                baton_exe(), "redis-failover", "switch", str(target), "--redis-servers",
                group.spec, "--client-ids", ",".join(c.spec for c in system.clients),
                "--timeout", "300",
            ]  # fmt: skip
            switching = Proc("switch", argv, tmp / "switch.out")
            wait_for(
                lambda: all((c.state() or {}).get("invalidated_in") for c in system.clients),
                timeout=60,
                interval=0.01,
            )
            switching.kill()
            event = time.time()
            wait_for(
                lambda: all(c.master() == old for c in system.clients), timeout=120, interval=0.005
            )
            files = time.time() - event
            wait_for(
                lambda: all(w.first_on(old.port, event) is not None for w in writers), timeout=60
            )
        finally:
            for w in writers:
                w.stop()
        with group.client(2) as r:
            r.config_set("masterauth", "")
        firsts = [w.first_on(old.port, event) for w in writers]
        return {
            "system": "baton",
            "kind": "switch killed mid-round",
            "files": files,
            "moved": max(f for f in firsts if f is not None) - event,
            "load": loadavg(),
        }


# -- the whole benchmark ---------------------------------------------------------------------------


def store_failover_bench(
    quick: bool, say: Callable[[str], None] = print, plot_dir: Path | None = None
) -> dict[str, Any]:
    trials = 1 if quick else 3
    results: list[dict[str, Any]] = []
    streams: dict[str, list[Any]] = {}
    for kind in ("unplanned", "planned"):
        for name in SYSTEMS:
            if kind == "planned" and name == "sentinel (defaults)":
                continue  # the same SENTINEL FAILOVER as tuned: down-after plays no part
            for k in range(trials):
                keep = k == 0 and name in ("baton", "sentinel (down-after 1 s)")
                r = trial(name, kind, keep_streams=keep)
                if keep:
                    streams[f"{kind}/{name}"] = r.pop("streams")
                r["load"] = loadavg()
                say(json.dumps(r))
                results.append(r)
    takeovers = []
    for _ in range(trials):
        r = takeover_trial()
        say(json.dumps(r))
        takeovers.append(r)
    plots: dict[str, str] = {}
    if plot_dir is not None:
        for kind in ("unplanned", "planned"):
            rows = [streams.get(f"{kind}/{n}") for n in ("baton", "sentinel (down-after 1 s)")]
            if all(rows):
                path = plot_dir / f"store-failover-{kind}.png"
                _plot(path, [s for r in rows if r for s in r])
                plots[kind] = path.name
    return {"trials": trials, "results": results, "takeovers": takeovers, "plots": plots}


def _plot(path: Path, rows: list[list[tuple[float, int]]]) -> None:
    """One row per client stream (baton's three, then Sentinel's): a dot per acknowledged
    write at its time from the event, red on the old master, green on the new one."""
    width, height, left, top, band = 900, 60 + 40 * len(rows), 40, 20, 40
    c = Canvas(width, height)
    xs = [t for r in rows for t, _ in r]
    x0, x1 = min(xs), max(xs)
    pw = width - left - 20

    def at(t: float) -> int:
        return left + int((t - x0) / ((x1 - x0) or 1) * pw)

    for i, row in enumerate(rows):
        y = top + i * band + band // 2
        c.line(left, y, left + pw, y, (220, 220, 220))
        for t, on_new in row:
            c.dot(at(t), y - 6 + (0 if on_new else 8), (0, 150, 0) if on_new else (200, 0, 0), 2)
    base = top + len(rows) * band
    c.line(left, base, left + pw, base, (0, 0, 0))
    zero = at(0.0)
    c.line(zero, top, zero, base, (0, 0, 200))
    c.line(left, top + CLIENTS * band, left + pw, top + CLIENTS * band, (0, 0, 0))
    for k in range(6):
        t = x0 + (x1 - x0) * k / 5
        c.line(at(t), base, at(t), base + 4, (0, 0, 0))
        c.text(at(t) - 12, base + 10, f"{t:.1f}s")
    path.write_bytes(c.png())


def section(res: dict[str, Any]) -> list[str]:
    """The markdown section of docs/benchmarks.md."""

    def row(r: dict[str, Any]) -> str:
        det = "-" if r["after_detection"] is None else f"{r['after_detection']:.2f} s"
        return (
            f"| {r['kind']} | {r['system']} | {r['moved']:.2f} s | {det} | {r['lost']:,} | "
            f"{r['old_after']:,} | {r['acked']:,} | {r['load']:.1f} |"
        )

    out = [
        "## 11. Store failover: baton's unanimous switch against Redis Sentinel (issue 14)",
        "",
        f"Three `redis-server` (a master, two replicas) and {CLIENTS} client hosts, each a "
        "writer sending `INCR` (with `CLIENT INFO` in the same pipeline, so every "
        "acknowledgement names its server) as fast as it can. **baton**: a `redis-failover "
        "client` per host, one `redis-failover server`, default timings (check 0.5 s, 3 "
        "retries, request timeout 1 s); writers use `master_client`. **Sentinel**: Debian's "
        "`redis-sentinel`, 3 sentinels, quorum 2, at defaults (down-after 30 s) and tuned "
        "(1 s); writers use redis-py's `Sentinel.master_for`. *moved*: from the kill (or the "
        "switch command) to every client's first write acknowledged by the new master; *after "
        "detection*: the same from the round's start (baton) or `+odown` (Sentinel); *lost*: "
        "acknowledged INCRs missing from the final master; *old master after*: writes the old "
        "master acknowledged for writes sent after the switch began (baton: after that client "
        "answered `invalidated`). baton's planned switch is the library call behind `baton "
        "redis-failover switch`, made in the benchmark process; Sentinel's is `SENTINEL "
        f"FAILOVER`. {res['trials']} trial(s) each, every row one trial.",
        "",
        "| kind | system | moved | after detection | lost (acknowledged) | old master after | "
        "acknowledged | load |",
        "|---|---|---|---|---|---|---|---|",
        *(row(r) for r in res["results"]),
        "",
    ]
    if res.get("takeovers"):
        out += [
            "**A round whose server dies** (issue 27): a planned switch (`baton redis-failover "
            "switch`, its own process) SIGKILLed while it waits for its new master, every "
            "client's file empty and writes paused on the old master; the running server "
            "(default timings) takes the round over once every client has heard nothing from "
            "it for 3 check intervals + 2 request timeouts (3.5 s). *files*: from the kill to "
            "every file naming the master again; *moved*: to every client's first write "
            "acknowledged after the kill. Target: 5 s (it was 20 reconfigure intervals, 40 s, "
            "before).",
            "",
            "| trial | files | moved | load |",
            "|---|---|---|---|",
            *(
                f"| {i + 1} | {r['files']:.2f} s | {r['moved']:.2f} s | {r['load']:.1f} |"
                for i, r in enumerate(res["takeovers"])
            ),
            "",
        ]
    for kind, name in res.get("plots", {}).items():
        out += [
            f"![{kind} write streams]({name})",
            "",
            f"*{kind.capitalize()}*: each row one client's acknowledged writes over time (0: the "
            "kill or the switch command, blue line); upper green dots on the new master, lower "
            "red dots on the old one. Rows 1-3: baton; rows 4-6 (below the black line): "
            "Sentinel with down-after 1 s.",
            "",
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_failover")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--plots", type=Path, help="directory for the PNGs")
    args = parser.parse_args()
    res = store_failover_bench(args.quick, plot_dir=args.plots)
    text = "\n".join(section(res))
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
