"""How soon the web dashboard shows each incident (docs/dashboard.md, "What an incident looks
like"), measured as a user sees it: the dashboard's socket (``/v1/ui/ws``, the token in its
first frame) open on an agent that survives, every snapshot recorded with the time it arrived,
and the time from the fault to the first snapshot that shows each sign of it.

1. **agent**: three agents (``baton node``, ttl 2 s, one SQLite store); the controller's agent
   SIGKILLed, watched from another: the node shown ``suspect``, the new controller, the node
   shown ``dead``. The killed agent is started again before the next trial.
2. **root**: the cluster of :mod:`bench.auto_failover` (cascade-worker objects pinned per host,
   automatic failover on, a writer through ``RootWriter``), its trial reused as is: the root's
   host agent SIGKILLed, watched from another host's agent: the host ``suspect``, the root's
   worker no longer ``running``, the root ``unreachable`` or ``dead``, the new root in the set's
   header, at the top of the set's tree (the page's own ordering of the tree, see
   :func:`tree_top`) and in the timeline. Needs Spark: one JVM per cascade worker.
3. **store**: three Redis servers (a master, two replicas) and three agents whose store follows
   their host's master file (``redis+masterfile://``), each running the store-failover client
   role and the first also the configuration server (``[redis_failover]``, default timings);
   the Redis master SIGKILLed, watched on the server's agent: the first sign (a failed check,
   the file emptied), the new round with its outcome, and the new master in the server's
   picture and in the node's master file. The round's own start and end (wall clock, from the
   round it records) separate the switch from the dashboard's delay.

    .venv/bin/python -m bench.dashboard_incidents --trials 3 [--only agent,store] [--root-trials 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import secrets
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
from websockets.asyncio.client import connect

from baton.local.cluster import LocalCluster, LocalNode
from baton.local.ports import free_port
from baton.local.processes import Proc
from baton.local.waiting import wait_for
from baton.testing.failover import RedisGroup
from bench import auto_failover
from bench.common import loadavg, quantile

TTL = 2.0
#: Seconds of a steady dashboard before a fault (its snapshots settle).
STEADY = 1.0
#: How long a sign may take to show before the trial gives up on it (counted as not shown).
WAIT = 60.0

Snapshot = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Seen:
    """A snapshot as it arrived: ``time.monotonic()`` and ``time.time()`` at its arrival."""

    mono: float
    wall: float
    data: Snapshot


class Watcher:
    """The dashboard's socket on the agent at ``address``, read in a thread of its own, as a
    page reads it: the token in the first frame, then every snapshot the agent sends."""

    def __init__(self, address: str, token: str) -> None:
        self.url = f"ws://{address}/v1/ui/ws"
        self._token = token
        self.seen: list[Seen] = []
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="dashboard-socket")

    def __enter__(self) -> Self:
        self._thread.start()
        wait_for(lambda: self.seen or self.error, timeout=30, what=f"a snapshot from {self.url}")
        if self.error is not None:
            raise self.error
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:  # kept for the caller: a socket that fails fails the trial
            self.error = exc

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        stopping = asyncio.create_task(self._stop.wait())
        async with connect(self.url, max_size=None, open_timeout=10) as ws:
            await ws.send(json.dumps({"type": "auth", "token": self._token}))
            while True:
                receiving = asyncio.ensure_future(ws.recv())
                await asyncio.wait({receiving, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not receiving.done():
                    receiving.cancel()
                    return
                # The time it arrived, before it is parsed.
                mono, wall = time.monotonic(), time.time()
                message = json.loads(receiving.result())
                if message.get("type") == "snapshot":
                    self.seen.append(Seen(mono, wall, message["data"]))

    def first(self, shows: Callable[[Snapshot], object], after: float) -> Seen | None:
        """The first snapshot that arrived after ``after`` (monotonic) and ``shows`` it."""
        return next((s for s in list(self.seen) if s.mono >= after and shows(s.data)), None)

    @classmethod
    def once_up(cls, node: LocalNode, token: str, timeout: float = 120.0) -> Watcher:
        """A watcher of ``node`` once its API answers (an agent is live in the store, and
        may be a controller's pick, before it listens)."""
        wait_for(lambda: node.status() is not None, timeout=timeout, what=f"{node.id}'s API")
        return cls(node.address, token)

    def wait(self, shows: Callable[[Snapshot], object], after: float, timeout: float) -> Seen:
        return wait_for(
            lambda: self.first(shows, after), timeout=timeout, interval=0.02, what="a snapshot"
        )

    def since(self, shows: Callable[[Snapshot], object], after: float) -> float | None:
        """Seconds from ``after`` to the first snapshot that ``shows`` it (None: none did)."""
        s = self.first(shows, after)
        return None if s is None else s.mono - after


#: Print one line per snapshot received after each fault (``--trace``).
TRACE = False


def _trace(w: Watcher, after: float, what: Callable[[Snapshot], str]) -> None:
    if not TRACE:
        return
    for s in w.seen:
        if s.mono >= after - STEADY:
            errors = ",".join(sorted(s.data["errors"])) or "-"
            print(f"  {s.mono - after:+7.2f} s  errors {errors}  {what(s.data)}", flush=True)


def _nodes(d: Snapshot) -> str:
    states = " ".join(f"{n['id']}={n['state']}" for n in d["nodes"])
    return f"controller {_controller(d)}  {states}"


def _node_state(data: Snapshot, node: str) -> str | None:
    return next((n["state"] for n in data["nodes"] if n["id"] == node), None)


def _controller(data: Snapshot) -> str | None:
    ctl = data.get("controller")
    return None if ctl is None else str(ctl["id"])


# -- 1. an agent killed ----------------------------------------------------------------------


def _agent_trial(c: LocalCluster, k: int) -> dict[str, Any]:
    ctl, _ = c.wait_for(c.controller, timeout=60)
    c.wait_for(lambda: list(c.states().values()) == ["live"] * 3, timeout=60)
    watched = next(n for n in c.nodes if n != ctl)

    def steady(d: Snapshot) -> bool:
        return _controller(d) == ctl and [n["state"] for n in d["nodes"]] == ["live"] * 3

    def suspect(d: Snapshot) -> bool:
        return _node_state(d, ctl) == "suspect"

    def dead(d: Snapshot) -> bool:
        return _node_state(d, ctl) == "dead"

    def new_controller(d: Snapshot) -> bool:
        return _controller(d) not in (None, ctl)

    with Watcher.once_up(c.node(watched), c.token) as w:
        w.wait(steady, 0.0, timeout=30)
        time.sleep(STEADY)
        kill = time.monotonic()
        c.kill(ctl)
        w.wait(dead, kill, timeout=WAIT)
    _trace(w, kill, _nodes)
    row: dict[str, Any] = {
        "suspect": w.since(suspect, kill),
        "controller": w.since(new_controller, kill),
        "dead": w.since(dead, kill),
    }
    print(f"agent trial {k}: {ctl} killed, watched on {watched}: {_line(row)}", flush=True)
    c.node(ctl).start()
    return row


def agent_killed(trials: int, directory: Path) -> list[dict[str, Any]]:
    with LocalCluster(3, None, directory / "agents", ttl=TTL) as c:
        return [_agent_trial(c, k) for k in range(trials)]


# -- 2. a set's root lost, automatic failover on ---------------------------------------------


def tree_top(s: Snapshot) -> str | None:
    """The member the page draws at the top of the set's tree, by the page's own rule
    (``tree()`` in baton/node/ui/app.js): the members whose provider is not in the set, sorted
    with its comparator. CPython's sort is the same TimSort as the browser's, so the order of
    two members that both say ``root`` (a dead old root and the new one) comes out as it does
    in the page."""
    members = s.get("members") or []
    names = {m["name"] for m in members}
    tops = [m for m in members if not (m["provider"] and m["provider"] in names)]

    def compare(a: dict[str, Any], b: dict[str, Any]) -> int:
        if a["role"] == "root":
            return -1
        if b["role"] == "root":
            return 1
        return (str(a["name"]) > str(b["name"])) - (str(a["name"]) < str(b["name"]))

    tops.sort(key=functools.cmp_to_key(compare))
    return str(tops[0]["name"]) if tops else None


def _set(data: Snapshot) -> Snapshot | None:
    return next((s for s in data["sets"] if s["set"] == auto_failover.SET), None)


def _member(data: Snapshot, name: str) -> Snapshot | None:
    s = _set(data)
    return None if s is None else next((m for m in s["members"] if m["name"] == name), None)


def _root_trial(
    c: LocalCluster,
    loc: dict[str, str],
    writer: auto_failover.SteadyWriter,
    directory: Path,
    k: int,
    *,
    saved: set[int],
    steady: float,
) -> dict[str, Any]:
    n = len(loc)
    old = auto_failover.root_of(loc)
    names = list(loc)
    host = f"n{names.index(old)}"
    watched = f"n{(names.index(old) + 1) % n}"

    def old_root_shown(d: Snapshot) -> bool:
        return (_set(d) or {}).get("root") == old

    with Watcher.once_up(c.node(watched), c.token) as w:
        w.wait(old_root_shown, 0.0, timeout=120)
        t = auto_failover.trial(
            c, loc, writer, directory, k, sync=0, saved_before=saved, steady=steady
        )
    kill, new = t.killed_at, t.new

    def shows(d: Snapshot) -> str:
        s = _set(d) or {}
        members = " ".join(
            f"{m['name']}:{m['role']}{'/dead' if m['dead'] else ''}"
            f"{'' if m['reachable'] else '/unreachable'}:{(m['service'] or {}).get('state')}"
            for m in s.get("members", [])
        )
        return f"{_nodes(d)}  root {s.get('root')} top {tree_top(s)}  {members}"

    _trace(w, kill, shows)

    def suspect(d: Snapshot) -> bool:
        return _node_state(d, host) == "suspect"

    def worker_stopped(d: Snapshot) -> bool:
        m = _member(d, old)
        return m is not None and (m["service"] or {}).get("state") != "running"

    def unreachable(d: Snapshot) -> bool:
        return (_member(d, old) or {}).get("reachable") is False

    def tagged_dead(d: Snapshot) -> bool:
        return (_member(d, old) or {}).get("dead") is True

    def new_root(d: Snapshot) -> bool:
        return (_set(d) or {}).get("root") == new

    def on_top(d: Snapshot) -> bool:
        s = _set(d)
        return s is not None and tree_top(s) == new

    def dead_on_top(d: Snapshot) -> bool:
        s = _set(d)
        return s is not None and s.get("root") == new and tree_top(s) == old

    def root_line(d: Snapshot) -> bool:
        return any(
            e["kind"] == "root" and e["name"] == auto_failover.SET
            and e["leader"] == new and not e["held"]
            for e in d["timeline"]
        )  # fmt: skip

    row: dict[str, Any] = {
        "old": old,
        "new": new,
        "failover": t.write_s,
        "suspect": w.since(suspect, kill),
        "worker": w.since(worker_stopped, kill),
        "unreachable": w.since(unreachable, kill),
        "dead": w.since(tagged_dead, kill),
        "root": w.since(new_root, kill),
        "top": w.since(on_top, kill),
        "timeline": w.since(root_line, kill),
        # The dead old root drawn above the new one while both say "root" (until resurrect).
        "dead_on_top": w.since(dead_on_top, kill),
    }
    print(f"root trial {k}: {old} -> {new}, watched on {watched}: {_line(row)}", flush=True)
    return row


def root_lost(trials: int, directory: Path, steady: float) -> list[dict[str, Any]]:
    directory.mkdir(parents=True, exist_ok=True)
    with auto_failover.running(directory, 3) as (c, loc):
        writer = auto_failover.SteadyWriter(list(loc.values()))
        writer.start()
        saved: set[int] = set()
        try:
            return [
                _root_trial(c, loc, writer, directory, k, saved=saved, steady=steady)
                for k in range(trials)
            ]
        finally:
            writer.halt.set()
            writer.join(10)


# -- 3. the store's master switched ----------------------------------------------------------


class StoreCluster:
    """``n`` agents on a Redis store with store failover: each agent's store follows its
    host's master file, kept by the client role the agent runs; ``n0`` also runs the
    configuration server (default timings: what a user runs)."""

    def __init__(self, directory: Path, group: RedisGroup, n: int = 3) -> None:
        self.dir = directory
        self.group = group
        self.token_file = directory / "token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
        self.token = self.token_file.read_text().strip()
        self.ids = [f"n{i}" for i in range(n)]
        self.ports = {i: free_port() for i in self.ids}
        self.client_ports = {i: free_port() for i in self.ids}
        self.procs: dict[str, Proc] = {}

    def address(self, node: str) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def master_file(self, node: str) -> Path:
        return self.dir / node / "redis-master"

    def _config(self, node: str) -> Path:
        clients = ", ".join(f'{i} = "127.0.0.1:{self.client_ports[i]}"' for i in self.ids)
        servers = ", ".join(f'"{a}"' for a in self.group.addresses)
        text = (
            f'[redis_failover]\nclient_id = "{node}"\nmaster_file = "{self.master_file(node)}"\n'
            f'listen = "127.0.0.1:{self.client_ports[node]}"\ntoken_file = "{self.token_file}"\n'
        )
        if node == self.ids[0]:
            text += (
                f"[redis_failover.server]\nredis_servers = [{servers}]\nclients = {{ {clients} }}\n"
                f'server_id = "{node}"\ntoken_file = "{self.token_file}"\n'
            )
        path = self.dir / node / "node.toml"
        path.write_text(text)
        return path

    def start(self) -> Self:
        baton = str(Path(sys.executable).with_name("baton"))
        for node in self.ids:
            (self.dir / node).mkdir(parents=True, exist_ok=True)
            # The file names the master before the agent starts: the agent's store reads it
            # before the agent starts the client role that keeps it (an empty file would make
            # the agent wait for a role that only starts once the store answers).
            self.master_file(node).write_text(f"{self.group.addresses[0]}\n")
            env = {
                "BATON_NODE_ID": node,
                "BATON_STORE": f"redis+masterfile://{self.master_file(node)}?db=0",
                "BATON_TOKEN_FILE": str(self.token_file),
                "BATON_DATA_DIR": str(self.dir / node),
                "BATON_LISTEN": self.address(node),
                "BATON_TTL": str(TTL),
                "BATON_RECONCILE_INTERVAL": "0.5",
            }
            argv = [baton, "node", "--config", str(self._config(node))]
            self.procs[node] = Proc(node, argv, self.dir / f"{node}.log", env=env)
        for node in self.ids:
            url = f"http://{self.address(node)}/healthz"
            self.procs[node].wait_ready(
                functools.partial(_answers, url), timeout=120, what=f"{node} to answer"
            )
        return self

    def stop(self) -> None:
        for p in self.procs.values():
            p.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _failover(data: Snapshot) -> Snapshot:
    sf: Snapshot = data["store_failover"]
    return sf


def _switched(data: Snapshot, prior: object) -> Snapshot | None:
    """The newest round the page shows, when it is a switch other than ``prior``'s."""
    rounds = _failover(data)["rounds"]
    last: Snapshot | None = rounds[0] if rounds else None
    if last and last["token"] != prior and last["outcome"] == "switched":
        return last
    return None


def _sign(data: Snapshot, old: str, prior: Snapshot) -> str:
    """What the store-failover view shows changed since ``prior`` (the server's status before
    the kill), as words ("": nothing)."""
    sf = _failover(data)
    server, client = sf["server"] or {}, sf["client"] or {}
    changed = {
        "master": server.get("master") != old,
        "generation": server.get("generation") != prior["generation"],
        "alerts": server.get("alerts") != prior.get("alerts"),
        "file": client.get("master") != old,
        "round": bool(sf["rounds"]),
    }
    return ",".join(k for k, v in changed.items() if v)


def _store_trial(k: int, d: Path) -> dict[str, Any]:
    with RedisGroup(d / "redis", 3) as group, StoreCluster(d, group) as sc:
        old = str(group.addresses[0])

        def steady(data: Snapshot) -> bool:
            sf = _failover(data)
            server, client = sf["server"] or {}, sf["client"] or {}
            return (
                server.get("master") == old and client.get("master") == old
                and not server.get("alerts")
                and [n["state"] for n in data["nodes"]] == ["live"] * 3
                and data["controller"] is not None and not data["errors"]
            )  # fmt: skip

        with Watcher(sc.address("n0"), sc.token) as w:
            w.wait(steady, 0.0, timeout=120)
            time.sleep(STEADY)
            prior: Snapshot = _failover(w.seen[-1].data)["server"]
            prior_round = (prior.get("last_round") or {}).get("token")
            kill_wall, kill = time.time(), time.monotonic()
            group.servers[0].kill()
            seen = w.wait(lambda data: _switched(data, prior_round), kill, timeout=WAIT)
            done = _switched(seen.data, prior_round)
            assert done is not None
            new = str(done["new"])

            def master_shown(data: Snapshot) -> bool:
                return (_failover(data)["server"] or {}).get("master") == new

            def file_shown(data: Snapshot) -> bool:
                return (_failover(data)["client"] or {}).get("master") == new

            w.wait(master_shown, kill, timeout=WAIT)
            w.wait(file_shown, kill, timeout=WAIT)
            time.sleep(3 * TTL)  # what the rest of the page shows meanwhile

        def shows(data: Snapshot) -> str:
            sf = _failover(data)
            server, client = sf["server"] or {}, sf["client"] or {}
            rounds = len(sf["rounds"])
            return (
                f"{_nodes(data)}  server master {server.get('master')} failures "
                f"{server.get('failures')} generation {server.get('generation')} rounds "
                f"{rounds}  file {client.get('master')}  alerts {server.get('alerts')}"
            )

        _trace(w, kill, shows)

        def sign(data: Snapshot) -> bool:
            # What the page's store-failover view shows (baton/node/ui/app.js,
            # renderFailover): not the count of failed checks, which the snapshot carries.
            return bool(_sign(data, old, prior))

        after = [s for s in w.seen if s.mono >= kill]
        erred = [s for s in after if s.data["errors"]]
        started = done["at"] - done["seconds"]
        row: dict[str, Any] = {
            "old": old,
            "new": new,
            "detected": started - kill_wall,
            "round_s": float(done["seconds"]),
            "round_end": done["at"] - kill_wall,
            "sign": w.since(sign, kill),
            "sign_was": _sign(w.wait(sign, kill, timeout=1).data, old, prior),
            "round": seen.mono - kill,
            "after_end": seen.wall - done["at"],
            "master": w.since(master_shown, kill),
            "file": w.since(file_shown, kill),
            "generation": (
                prior.get("generation"),
                (_failover(seen.data)["server"] or {}).get("generation"),
            ),
            "errors": sorted({p for s in erred for p in s.data["errors"]}),
            "errors_from": erred[0].mono - kill if erred else None,
            "errors_to": erred[-1].mono - kill if erred else None,
            "not_live": sorted(
                {n["id"] for s in after for n in s.data["nodes"] if n["state"] != "live"}
            ),
        }
    print(f"store trial {k}: {old} -> {new}: {_line(row)}", flush=True)
    return row


def store_switched(trials: int, directory: Path) -> list[dict[str, Any]]:
    out = []
    for k in range(trials):
        d = directory / f"store-{k}"
        d.mkdir(parents=True)
        out.append(_store_trial(k, d))
    return out


# -- the report ------------------------------------------------------------------------------


def _line(row: dict[str, Any]) -> str:
    parts = []
    for key, value in row.items():
        if isinstance(value, float):
            parts.append(f"{key} {value:.2f} s")
        elif value is None:
            parts.append(f"{key} -")
        elif key not in {"old", "new"}:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def summary(name: str, rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """One markdown row per measured sign: p50 and max over the trials that showed it."""
    out = []
    for key in keys:
        got = [r[key] for r in rows if isinstance(r.get(key), float)]
        if not got:
            out.append(f"| {name} | {key} | not shown in {len(rows)} | - | - |")
            continue
        p50 = quantile(got, 0.5)
        out.append(
            f"| {name} | {key} | {len(got)} of {len(rows)} | {p50:.2f} s | {max(got):.2f} s |"
        )
    return out


@contextlib.contextmanager
def _directory(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        yield Path(tmp)


@dataclass
class Results:
    agent: list[dict[str, Any]] = field(default_factory=list)
    root: list[dict[str, Any]] = field(default_factory=list)
    store: list[dict[str, Any]] = field(default_factory=list)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--root-trials", type=int, help="trials of the root case (default --trials)")
    ap.add_argument("--only", default="agent,root,store", help="cases, comma-separated")
    ap.add_argument("--steady", type=float, default=3.0, help="root case: seconds of writes")
    ap.add_argument("--keep", type=Path, help="keep the clusters' files (logs) in this directory")
    ap.add_argument("--trace", action="store_true", help="print what each snapshot showed")
    args = ap.parse_args()
    global TRACE  # noqa: PLW0603 (a switch for the whole run)
    TRACE = args.trace
    cases = set(args.only.split(","))
    res = Results()
    with _directory(args.keep) as directory:
        if "agent" in cases:
            res.agent = agent_killed(args.trials, directory / "agent")
        if "store" in cases:
            res.store = store_switched(args.trials, directory / "store")
        if "root" in cases:
            root_trials = args.trials if args.root_trials is None else args.root_trials
            res.root = root_lost(root_trials, directory / "root", args.steady)
    print(f"\nload average at the end: {loadavg():.1f}")
    print("| incident | shown | trials | p50 | max |")
    print("|---|---|---|---|---|")
    rows = []
    if res.agent:
        rows += summary("agent killed", res.agent, ["suspect", "controller", "dead"])
    if res.root:
        signs = ["failover", "suspect", "worker", "unreachable", "dead", "root", "top"]
        rows += summary("root lost", res.root, [*signs, "timeline", "dead_on_top"])
    if res.store:
        signs = ["errors_from", "detected", "round_end", "sign", "round", "after_end", "master"]
        signs.append("file")
        rows += summary("store master switched", res.store, signs)
    for line in rows:
        print(line)


if __name__ == "__main__":
    main()
