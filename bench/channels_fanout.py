"""Live channels' fan-out, measured so that the server is what is measured (issue 33).

**baton**: ``--nodes`` ``baton node`` processes (SQLite store), one channel
``tick:fanout,every=1/R``; ``--subscribers`` WebSocket subscribers spread evenly over the nodes,
run in ``--receivers`` separate processes (so no single receiving process is the bottleneck).

**floor**: the same receiver processes connect to one process running a plain ``websockets``
server (no compression) that sends the same frames (same JSON shape and size, encoded once per
publication) to every connection with ``websockets.broadcast()``: the cheapest Python fan-out
there is.

Figures over a window after a warm-up:

* **end to end**: from the upstream yielding a publication (its ``ts``) to a receiver reading
  it, per frame (p50/p99), and per publication to the *last* receiver that read it (p99);
* **server-side fan-out** (baton): from the upstream yielding a publication to the last frame
  of it handed to a socket on each node, read from the nodes' ``baton_channel_fanout_seconds``
  histogram (p99 is the upper bound of the bucket it falls in); for the floor, from the same
  instant to ``broadcast()`` returning;
* **CPU per delivered frame**: the serving processes' CPU time (utime + stime, all nodes for
  baton) over the window divided by the frames the receivers read in it.

``python -m bench.channels_fanout --subscribers 10000 --nodes 3 --rate 10 --receivers 4``;
``--mode floor`` for the broadcast floor alone, ``--mode both`` for the two in a row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from baton.local.cluster import LocalCluster
from baton.local.waiting import wait_for
from bench.common import loadavg, quantile, temp_dir

#: The nodes' lease ttl by default: longer than section 10's 5 s, so that a loaded machine's
#: event-loop stalls during a subscribe burst do not make the nodes lose their leases (what is
#: measured here is the fan-out, not lease stability).
TTL = 10.0
#: End-to-end latencies are counted in bins of this many seconds (merged over processes).
BIN = 0.0005
#: Connections opened at once by one receiver process.
WAVE = 100
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def raise_nofile() -> int:
    """Raise this process's open-file limit to its hard limit (children inherit it): 10,000
    sockets do not fit in the usual soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


# -- the receivers (each in a process of its own) -----------------------------------------------


@dataclass
class Received:
    """What one receiver process read in the window."""

    frames: int = 0
    missing: int = 0
    closed: int = 0
    subscribed: int = 0
    #: Latency histogram: bin index (latency // BIN) -> count.
    bins: dict[int, int] = field(default_factory=dict)
    #: Per publication (epoch, offset) as "e:o": the largest latency any receiver here saw.
    last: dict[str, float] = field(default_factory=dict)
    cpu_s: float = 0.0


def _receiver_main(urls: list[str], token: str, channel: str, pipe: Connection) -> None:
    raise_nofile()
    asyncio.run(_receive(urls, token, channel, pipe))


async def _receive(urls: list[str], token: str, channel: str, pipe: Connection) -> None:
    import orjson
    from websockets.asyncio.client import connect

    out = Received()
    window = [float("inf"), float("-inf")]
    subscribed = asyncio.Event()
    opened = 0
    all_opened = asyncio.Event()
    go = asyncio.Event()
    request = json.dumps({"type": "subscribe", "channel": channel})

    ready = [asyncio.Event() for _ in urls]

    async def one(i: int, url: str) -> None:
        nonlocal opened
        last: dict[int, int] = {}
        try:
            async with connect(
                url,
                additional_headers={"authorization": f"Bearer {token}"},
                open_timeout=120,
                max_queue=None,
            ) as ws:
                opened += 1
                ready[i].set()
                if opened == len(urls):
                    all_opened.set()
                await go.wait()
                await ws.send(request)
                async for message in ws:
                    now = time.time()
                    for line in (message if isinstance(message, str) else message.decode()).split(
                        "\n"
                    ):
                        frame = orjson.loads(line)
                        if frame["type"] == "subscribed":
                            out.subscribed += 1
                            if out.subscribed == len(urls):
                                subscribed.set()
                            continue
                        if frame["type"] != "pub":
                            continue
                        epoch, offset = frame["epoch"], frame["offset"]
                        if epoch in last and offset > last[epoch] + 1:
                            out.missing += offset - last[epoch] - 1
                        last[epoch] = offset
                        if window[0] <= now < window[1]:
                            latency = now - frame["ts"]
                            out.frames += 1
                            b = int(latency / BIN)
                            out.bins[b] = out.bins.get(b, 0) + 1
                            key = f"{epoch}:{offset}"
                            if latency > out.last.get(key, 0.0):
                                out.last[key] = latency
        except Exception:
            out.closed += 1
            ready[i].set()

    loop = asyncio.get_running_loop()
    tasks = []
    for i in range(0, len(urls), WAVE):
        tasks += [asyncio.create_task(one(i + k, u)) for k, u in enumerate(urls[i : i + WAVE])]
        await asyncio.gather(*(e.wait() for e in ready[i : i + WAVE]))
    await asyncio.wait_for(all_opened.wait(), 120)
    pipe.send("opened")
    await loop.run_in_executor(None, pipe.recv)  # "go"
    go.set()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(subscribed.wait(), 300)
    pipe.send(("subscribed", out.subscribed))
    start, end = await loop.run_in_executor(None, pipe.recv)
    window[0], window[1] = start, end
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, end - time.time()) + 1.0)
    out.cpu_s = time.process_time() - cpu0
    pipe.send(asdict(out))
    await loop.run_in_executor(None, pipe.recv)  # "stop"
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Receivers:
    """``processes`` receiver processes sharing ``urls`` between them."""

    def __init__(self, urls: Sequence[str], token: str, channel: str, processes: int) -> None:
        ctx = mp.get_context("spawn")
        self.pipes: list[Connection] = []
        self.procs: list[Any] = []
        for k in range(processes):
            mine, theirs = ctx.Pipe()
            share = list(urls[k::processes])
            p = ctx.Process(target=_receiver_main, args=(share, token, channel, theirs))
            p.start()
            self.pipes.append(mine)
            self.procs.append(p)

    def wait(self, what: str, timeout: float) -> list[Any]:
        out = []
        for pipe in self.pipes:
            if not pipe.poll(timeout):
                raise TimeoutError(f"a receiver process did not report {what!r} in {timeout} s")
            out.append(pipe.recv())
        return out

    def tell(self, message: Any) -> None:
        for pipe in self.pipes:
            pipe.send(message)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.tell("stop")
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()


# -- the measurement ---------------------------------------------------------------------------


@dataclass
class Result:
    mode: str
    subscribers: int
    nodes: int
    rate: float
    receivers: int
    window: float
    subscribed: int = 0
    subscribe_s: float = 0.0
    frames: int = 0
    missing: int = 0
    closed: int = 0
    e2e_p50_ms: float = float("nan")
    e2e_p99_ms: float = float("nan")
    e2e_last_p99_ms: float = float("nan")
    server_p99_ms: float = float("nan")
    server_p50_ms: float = float("nan")
    server_cpu_s: float = 0.0
    us_per_frame: float = float("nan")
    receiver_cpu_pct: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)


def _merge(result: Result, parts: list[dict[str, Any]]) -> None:
    bins: dict[int, int] = {}
    last: dict[str, float] = {}
    for part in parts:
        result.frames += part["frames"]
        result.missing += part["missing"]
        result.closed += part["closed"]
        result.receiver_cpu_pct += 100 * part["cpu_s"] / result.window
        for b, n in part["bins"].items():
            bins[int(b)] = bins.get(int(b), 0) + n
        for key, lat in part["last"].items():
            last[key] = max(lat, last.get(key, 0.0))
    total = sum(bins.values())
    if total:
        for q, name in ((0.5, "e2e_p50_ms"), (0.99, "e2e_p99_ms")):
            seen = 0
            for b in sorted(bins):
                seen += bins[b]
                if seen >= q * total:
                    setattr(result, name, (b + 1) * BIN * 1000)
                    break
    if last:
        # Publications seen at both ends of the window are cut short: only whole ones count.
        result.e2e_last_p99_ms = quantile(list(last.values()), 0.99) * 1000


def _metrics_text(c: LocalCluster, node: str) -> str:
    """A node's ``/metrics``, asked again while a loaded node is slow to answer."""
    import httpx

    for _ in range(5):
        with contextlib.suppress(httpx.TimeoutException):
            return httpx.get(
                f"{c.node(node).url}/metrics",
                headers={"authorization": f"Bearer {c.token}"},
                timeout=30,
            ).text
    raise TimeoutError(f"node {node} did not answer /metrics")


def _hist(text: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts of a histogram in a Prometheus text exposition."""
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.split()[-1])
    return out


def _hist_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding the ``q`` quantile of what was observed between
    ``before`` and ``after``."""
    bounds = sorted(after)
    delta = {b: after[b] - before.get(b, 0.0) for b in bounds}
    total = delta[bounds[-1]] if bounds else 0.0
    if not total:
        return float("nan")
    for b in bounds:
        if delta[b] >= q * total:
            return b
    return float("inf")


def _window(
    rx: Receivers,
    result: Result,
    warmup: float,
    pids: Sequence[int],
    mark: Callable[[], None] = lambda: None,
) -> tuple[float, float]:
    """Open, subscribe, warm up, then measure over the window; the (start, end) wall times.
    ``mark`` is called as the window starts and as it ends."""
    rx.wait("opened", 300)
    started = time.monotonic()
    rx.tell("go")
    counts = rx.wait("subscribed", 400)
    result.subscribe_s = time.monotonic() - started
    result.subscribed = sum(n for _, n in counts)
    time.sleep(warmup)
    start = time.time() + 0.5
    end = start + result.window
    rx.tell((start, end))
    time.sleep(max(0.0, start - time.time()))
    cpu0 = sum(_cpu_s(p) for p in pids)
    load0 = loadavg()
    mark()
    time.sleep(max(0.0, end - time.time()))
    result.server_cpu_s = sum(_cpu_s(p) for p in pids) - cpu0
    mark()
    result.load = (load0, loadavg())
    _merge(result, rx.wait("results", result.window + 120))
    if result.frames:
        result.us_per_frame = 1e6 * result.server_cpu_s / result.frames
    return start, end


def run_baton(
    *,
    subscribers: int,
    nodes: int,
    rate: float,
    receivers: int,
    window: float,
    warmup: float,
    ttl: float = TTL,
) -> Result:
    from baton.channels.client import ws_url

    res = Result("baton", subscribers, nodes, rate, receivers, window)
    every = f"{1 / rate:.4f}".rstrip("0")
    channel = f"tick:fanout,every={every}"
    with temp_dir("fanout") as tmp, LocalCluster(nodes, None, tmp, ttl=ttl) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * nodes, timeout=60)
        wait_for(lambda: all(n.status() for n in c.nodes.values()), timeout=60)
        names = list(c.nodes)
        urls = [ws_url(c.node(names[i % nodes]).url) for i in range(subscribers)]
        pids = [n.proc.popen.pid for n in c.nodes.values() if n.proc]
        rx = Receivers(urls, c.token, channel, receivers)
        try:
            metric = "baton_channel_fanout_seconds"
            reads: list[dict[str, dict[float, float]]] = []

            def mark() -> None:
                reads.append({n: _hist(_metrics_text(c, n), metric) for n in names})

            _window(rx, res, warmup, pids, mark)
            # The window's publications: the histogram read as it starts and as it ends.
            before, after = reads
            merged_b: dict[float, float] = {}
            merged_a: dict[float, float] = {}
            for n in names:
                for k, v in before[n].items():
                    merged_b[k] = merged_b.get(k, 0.0) + v
                for k, v in after[n].items():
                    merged_a[k] = merged_a.get(k, 0.0) + v
            res.server_p99_ms = _hist_quantile(merged_b, merged_a, 0.99) * 1000
            res.server_p50_ms = _hist_quantile(merged_b, merged_a, 0.5) * 1000
        finally:
            rx.close()
    return res


# -- the floor: websockets.broadcast() in one process ---------------------------------------------


def _floor_server(port_pipe: Connection, subscribers: int, rate: float) -> None:
    raise_nofile()
    asyncio.run(_floor(port_pipe, subscribers, rate))


async def _floor(pipe: Connection, subscribers: int, rate: float) -> None:
    from websockets.asyncio.server import ServerConnection, broadcast, serve

    conns: set[ServerConnection] = set()
    ready = asyncio.Event()
    subscribed = '{"type":"subscribed","channel":"tick:fanout","epoch":1,"offset":0}'

    async def handler(ws: ServerConnection) -> None:
        await ws.recv()  # the subscribe frame
        await ws.send(subscribed)
        conns.add(ws)
        if len(conns) >= subscribers:
            ready.set()
        try:
            await ws.wait_closed()
        finally:
            conns.discard(ws)

    fanout: list[float] = []
    loop = asyncio.get_running_loop()
    async with serve(handler, "127.0.0.1", 0, compression=None, max_queue=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        pipe.send(port)
        await ready.wait()
        every = 1 / rate
        n = 0
        start = time.monotonic()
        while not pipe.poll():
            await asyncio.sleep(max(0.0, start + (n + 1) * every - time.monotonic()))
            n += 1
            ts = time.time()
            # The same frame as the tick handler's, encoded once per publication.
            data = {"n": n, "at": ts}
            text = json.dumps(
                {"type": "pub", "channel": "tick:fanout,every=0.1", "epoch": 1, "offset": n,
                 "data": data, "ts": ts},
                separators=(",", ":"),
            )  # fmt: skip
            broadcast(conns, text)
            fanout.append(time.time() - ts)
        pipe.recv()
        pipe.send(fanout)
    del loop


def run_floor(
    subscribers: int, rate: float, receivers: int, window: float, warmup: float
) -> Result:
    res = Result("floor", subscribers, 1, rate, receivers, window)
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    server = ctx.Process(target=_floor_server, args=(theirs, subscribers, rate))
    server.start()
    try:
        port = mine.recv()
        urls = [f"ws://127.0.0.1:{port}/"] * subscribers
        rx = Receivers(urls, "floor", "tick:fanout", receivers)
        try:
            start, end = _window(rx, res, warmup, [server.pid or 0])
            mine.send("done")
            fanout = mine.recv()
            # The broadcast times of the window's publications (one per 1/rate s, the last
            # ones): the ``fanout`` list holds every publication since the first subscriber.
            inside = fanout[-int(res.window * rate) :]
            res.server_p50_ms = quantile(inside, 0.5) * 1000
            res.server_p99_ms = quantile(inside, 0.99) * 1000
            del start, end
        finally:
            rx.close()
    finally:
        server.join(10)
        if server.is_alive():
            server.kill()
    return res


# -- output ------------------------------------------------------------------------------------


def table(results: Sequence[Result]) -> list[str]:
    out = [
        "| mode | N | nodes | R/s | receiver processes | subscribed in | frames read | missing "
        "| closed | end-to-end p50 / p99 (per frame) | end-to-end p99 (last receiver of a "
        "publication) | server fan-out p50 / p99 | server CPU | µs CPU per frame | receivers' "
        "CPU | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        out.append(
            f"| {r.mode} | {r.subscribers:,} | {r.nodes} | {r.rate:g} | {r.receivers} | "
            f"{r.subscribe_s:.1f} s | {r.frames:,} | {r.missing} | {r.closed} | "
            f"{r.e2e_p50_ms:.1f} / {r.e2e_p99_ms:.1f} ms | {r.e2e_last_p99_ms:.1f} ms | "
            f"{r.server_p50_ms:.1f} / {r.server_p99_ms:.1f} ms | "
            f"{100 * r.server_cpu_s / r.window:.0f}% | {r.us_per_frame:.1f} | "
            f"{r.receiver_cpu_pct:.0f}% | {r.load[0]:.1f}-{r.load[1]:.1f} |"
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.channels_fanout")
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rate", type=float, default=10.0, help="publications per second")
    parser.add_argument("--receivers", type=int, default=4, help="receiver processes")
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--ttl", type=float, default=TTL, help="the nodes' lease ttl")
    parser.add_argument("--mode", choices=("baton", "floor", "both"), default="both")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    limit = raise_nofile()
    if limit < args.subscribers + 1000:
        parser.error(f"the open-file limit is {limit}: too low for {args.subscribers} sockets")
    results: list[Result] = []
    if args.mode in ("baton", "both"):
        results.append(
            run_baton(
                subscribers=args.subscribers,
                nodes=args.nodes,
                rate=args.rate,
                receivers=args.receivers,
                window=args.window,
                warmup=args.warmup,
                ttl=args.ttl,
            )
        )
        print("\n".join(table(results)), flush=True)
    if args.mode in ("floor", "both"):
        results.append(
            run_floor(args.subscribers, args.rate, args.receivers, args.window, args.warmup)
        )
    print("\n".join(table(results)))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
