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
  baton) over the window divided by the frames the receivers read in it;
* **receiver CPU per frame**: the receiver processes' own CPU over the window per frame read,
  what the measuring takes from the (shared) machine.

The receivers (``--receiver``): **raw** (the default) holds a process's share of the
subscribers as non-blocking sockets in one ``selectors`` loop, does the opening handshake with
the ``websockets`` sans-I/O client and reads frames with a minimal parser of its own;
**websockets** is the library's asyncio client, a task per connection, kept to compare. Both
speak the same pipe protocol to the parent.

``python -m bench.channels_fanout --subscribers 10000 --nodes 3 --rate 10 --receivers 4``;
``--mode floor`` for the broadcast floor alone, ``--mode both`` for the two in a row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import gc
import json
import multiprocessing as mp
import os
import resource
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from orjson import loads
from websockets.client import ClientProtocol
from websockets.protocol import State
from websockets.uri import parse_uri

from baton.errors import ChannelError, ChannelUnavailable
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
#: Seconds before a subscribe answered with a retryable refusal is sent again.
RETRY_AFTER = 0.5
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
    #: ``unsubscribed`` answers by code (as text): a retryable one (the leader did not answer
    #: a forwarded subscribe in time) is asked again, as baton's own client does.
    refused: dict[str, int] = field(default_factory=dict)


#: ``--receiver``: ``raw`` (the default), plain sockets in one selector loop per process
#: (:class:`RawReceiver`); ``websockets``, the library's asyncio client with a task per
#: connection (``_receive``), several times the raw one's CPU per frame, kept to compare.
RECEIVER_KINDS = ("raw", "websockets")


def _receiver_main(
    urls: list[str], token: str, channel: str, pipe: Connection, *, kind: str = "raw", nice: int = 0
) -> None:
    raise_nofile()
    if nice:
        # Below the servers' priority the receivers take only what the servers leave, as they
        # would on hosts of their own: the measure of the server, not of the contention.
        os.nice(nice)
    if kind == "raw":
        RawReceiver(urls, token, channel, pipe).run()
    else:
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
    # CPU over the window itself (the frames counted are the window's), as the raw receiver.
    await asyncio.sleep(max(0.0, start - time.time()))
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, end - time.time()))
    out.cpu_s = time.process_time() - cpu0
    await asyncio.sleep(1.0)
    pipe.send(asdict(out))
    await loop.run_in_executor(None, pipe.recv)  # "stop"
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


# -- the raw receiver: every socket of a process in one selector loop ----------------------------

#: One read per readable socket takes up to this much: a subscriber that fell behind gets its
#: backlog in one call rather than in many. Read into one buffer allocated once per process:
#: ``recv(256 KiB)`` allocates its result at that size first, above glibc's mmap threshold, so
#: every call costs an mmap, an mremap and a munmap (14 µs of system time per read measured
#: here against 2 µs for ``recv_into``).
RECV_SIZE = 256 * 1024
#: A connection not open after this long is given up and counted closed (the asyncio
#: receiver's ``open_timeout``).
OPEN_TIMEOUT = 120.0
#: A handshake response head longer than this is not a WebSocket server's.
MAX_HEAD = 64 * 1024

# Opcodes (RFC 6455 section 5.2).
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

# A raw connection's states.
_CONNECTING, _HANDSHAKE, _OPEN, _CLOSED = range(4)
# Its subscription: not asked yet, asked, answered with ``subscribed``.
_UNASKED, _ASKED, _ANSWERED = range(3)


def xor_mask(payload: bytes, key: bytes) -> bytes:
    """``payload`` XORed with the 4-byte ``key`` repeated (RFC 6455 section 5.3): one integer
    operation over the whole payload instead of a Python loop over its bytes."""
    n = len(payload)
    if not n:
        return b""
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


def mask_frame(opcode: int, payload: bytes) -> bytes:
    """One final frame as a client must send it: masked with a fresh random key."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 1 << 16:
        head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    key = os.urandom(4)
    return head + key + xor_mask(payload, key)


class FrameReader:
    """The frames of one server-to-client stream, parsed from bytes as they arrive.

    Cheaper per frame than the sans-I/O parser, which runs a generator step per read and builds
    a ``Frame`` per frame: this one is a loop over the received bytes. Bytes of a frame not
    whole yet wait in ``buf`` for the next read.
    """

    __slots__ = ("buf", "part_op", "parts")

    def __init__(self) -> None:
        self.buf = bytearray()
        #: A fragmented message under way (FIN=0): its opcode and the payloads so far.
        self.part_op = 0
        self.parts: list[bytes] = []

    def feed(self, data: bytes | memoryview) -> list[tuple[int, bytes]]:
        """The whole messages (text or binary, fragments joined) and control frames that
        ``data`` completes, in order, as ``(opcode, payload)``. ``data`` may be a view of a
        buffer the next read overwrites: what is kept is copied."""
        buf = self.buf
        view: bytes | bytearray | memoryview
        if buf:
            buf += data
            view = buf
        else:
            # The usual case, whole frames in one read: parse the received bytes themselves
            # rather than a copy of them.
            view = data
        out: list[tuple[int, bytes]] = []
        n = len(view)
        pos = 0
        while n - pos >= 2:
            b0 = view[pos]
            b1 = view[pos + 1]
            length = b1 & 0x7F
            p = pos + 2
            if length == 126:
                if n - p < 2:
                    break
                length = (view[p] << 8) | view[p + 1]
                p += 2
            elif length == 127:
                if n - p < 8:
                    break
                length = int.from_bytes(view[p : p + 8], "big")
                p += 8
            key = b""
            if b1 & 0x80:
                # Servers do not mask (RFC 6455 section 5.1); unmasked anyway if one did.
                if n - p < 4:
                    break
                key = bytes(view[p : p + 4])
                p += 4
            end = p + length
            if end > n:
                break
            payload = bytes(view[p:end])
            if key:
                payload = xor_mask(payload, key)
            pos = end
            opcode = b0 & 0x0F
            if opcode & 0x8:
                # Control frames are never fragmented and may come between a message's
                # fragments.
                out.append((opcode, payload))
            elif opcode == OP_CONT:
                self.parts.append(payload)
                if b0 & 0x80:
                    out.append((self.part_op, b"".join(self.parts)))
                    self.parts = []
            elif b0 & 0x80:
                out.append((opcode, payload))
            else:
                self.part_op = opcode
                self.parts = [payload]
        if buf:
            del buf[:pos]
        elif pos < n:
            buf += view[pos:]
        return out


class _RawConn:
    """One subscriber's socket and what is known of its stream."""

    __slots__ = ("deadline", "last", "out", "proto", "reader", "sock", "state", "sub", "url")

    def __init__(self, url: str, sock: socket.socket, deadline: float) -> None:
        self.url = url
        self.sock = sock
        self.state = _CONNECTING
        self.deadline = deadline
        #: The handshake in progress (dropped once the connection is open).
        self.proto: ClientProtocol | None = None
        self.reader = FrameReader()
        #: Bytes the socket would not take yet (sent when it becomes writable).
        self.out = bytearray()
        #: Per epoch, the offset of the last publication read (for gaps).
        self.last: dict[int, int] = {}
        self.sub = _UNASKED


class RawReceiver:
    """A receiver process's share of the subscribers as non-blocking sockets multiplexed by
    one selector, with the pipe to the parent in the same selector: the sockets are read while
    the process waits for the parent's next word, so the server never sees a subscriber stall
    because its receiver was waiting for something else."""

    def __init__(self, urls: Sequence[str], token: str, channel: str, pipe: Connection) -> None:
        self.urls = list(urls)
        self.token = token
        self.channel = channel
        self.request = json.dumps({"type": "subscribe", "channel": channel}).encode()
        self.pipe = pipe
        self.sel = selectors.DefaultSelector()
        self.sel.register(pipe.fileno(), selectors.EVENT_READ, None)
        self.inbox: deque[Any] = deque()
        self.conns: list[_RawConn] = []
        self.result = Received()
        #: The window (wall times); nothing is recorded until the parent sends it.
        self.start = float("inf")
        self.end = float("-inf")
        #: ``Received.last`` keyed by ``(epoch, offset)``: no string built per frame.
        self.latest: dict[tuple[int, int], float] = {}
        #: Connections asked to subscribe that have neither answered nor closed.
        self.unanswered = 0
        self._addrs: dict[tuple[str, int], tuple[int, Any]] = {}
        #: Subscribes to send again (when, which), oldest first.
        self.retries: deque[tuple[float, _RawConn]] = deque()
        #: Every socket is read into this (see :data:`RECV_SIZE`).
        self.rbuf = bytearray(RECV_SIZE)
        self.rview = memoryview(self.rbuf)

    # -- the phases, in the order of the pipe protocol

    def run(self) -> None:
        self.open_all()
        # What was allocated so far lives to the end: keep the cyclic collector from walking
        # it over and over while frames are read.
        gc.freeze()
        self.pipe.send("opened")
        self.next_message()  # "go"
        for conn in self.conns:
            if conn.state == _OPEN:
                conn.sub = _ASKED
                self.unanswered += 1
                self.send(conn, mask_frame(OP_TEXT, self.request))
        give_up = time.monotonic() + 300
        while self.unanswered and time.monotonic() < give_up:
            self.pump(1.0)
        self.pipe.send(("subscribed", self.result.subscribed))
        self.start, self.end = self.next_message()
        self.pump_until(self.start)
        cpu0 = time.process_time()
        self.pump_until(self.end)
        self.result.cpu_s = time.process_time() - cpu0
        self.pump_until(self.end + 1.0)
        self.result.last = {f"{e}:{o}": lat for (e, o), lat in self.latest.items()}
        self.pipe.send(asdict(self.result))
        self.next_message()  # "stop"
        self.close_all()

    def open_all(self) -> None:
        """Connect in waves of :data:`WAVE`, each settled (open, or given up) before the next,
        so that the servers' accept backlogs are not overrun."""
        for i in range(0, len(self.urls), WAVE):
            wave = [self.connect(url) for url in self.urls[i : i + WAVE]]
            while True:
                pending = [c for c in wave if c.state in (_CONNECTING, _HANDSHAKE)]
                if not pending:
                    break
                now = time.monotonic()
                for c in pending:
                    if now > c.deadline:
                        self.drop(c)
                self.pump(1.0)

    def next_message(self) -> Any:
        while not self.inbox:
            self.pump(1.0)
        return self.inbox.popleft()

    def pump_until(self, wall: float) -> None:
        while (left := wall - time.time()) > 0:
            self.pump(min(left, 1.0))

    def close_all(self) -> None:
        goodbye = (1000).to_bytes(2, "big")
        for conn in self.conns:
            if conn.state == _CLOSED:
                continue
            if conn.state == _OPEN:
                with contextlib.suppress(OSError):
                    conn.sock.send(mask_frame(OP_CLOSE, goodbye))
            conn.state = _CLOSED
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(conn.sock)
            conn.sock.close()
        self.sel.close()

    # -- the loop

    def pump(self, timeout: float) -> None:
        """One select: read what arrived, write what waited, take the parent's messages,
        and ask again the subscribes that are due."""
        if self.retries:
            timeout = min(timeout, max(0.0, self.retries[0][0] - time.monotonic()))
        for key, mask in self.sel.select(timeout):
            conn = key.data
            if conn is None:
                self.inbox.append(self.pipe.recv())
                continue
            if mask & selectors.EVENT_READ:
                self.on_read(conn)
            if mask & selectors.EVENT_WRITE and conn.state != _CLOSED:
                self.on_write(conn)
        now = time.monotonic()
        while self.retries and self.retries[0][0] <= now:
            _, conn = self.retries.popleft()
            if conn.state == _OPEN and conn.sub == _ASKED:
                self.send(conn, mask_frame(OP_TEXT, self.request))

    def connect(self, url: str) -> _RawConn:
        uri = parse_uri(url)
        if uri.secure:
            raise ValueError(f"{url}: the raw receiver speaks ws:// only")
        family, addr = self._resolve(uri.host, uri.port)
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        # The subscribe frame and pongs are tiny: out at once rather than after Nagle's wait.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = sock.connect_ex(addr)
        conn = self.adopt(url, sock)
        if err not in (0, errno.EINPROGRESS):
            self.drop(conn)
        return conn

    def adopt(self, url: str, sock: socket.socket) -> _RawConn:
        """Take a socket being connected (or connected) to ``url``: its handshake starts when
        it is writable."""
        conn = _RawConn(url, sock, time.monotonic() + OPEN_TIMEOUT)
        self.conns.append(conn)
        self.sel.register(sock, selectors.EVENT_WRITE, conn)
        return conn

    def _resolve(self, host: str, port: int) -> tuple[int, Any]:
        known = self._addrs.get((host, port))
        if known is None:
            family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            known = self._addrs[(host, port)] = (family, addr)
        return known

    def on_write(self, conn: _RawConn) -> None:
        if conn.state != _CONNECTING:
            self.flush(conn)
            return
        if conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.drop(conn)
            return
        # No ``extensions``: the request offers none, so no permessage-deflate.
        proto = ClientProtocol(parse_uri(conn.url))
        request = proto.connect()
        request.headers["authorization"] = f"Bearer {self.token}"
        proto.send_request(request)
        conn.proto = proto
        conn.state = _HANDSHAKE
        self.sel.modify(conn.sock, selectors.EVENT_READ, conn)
        self.send(conn, b"".join(proto.data_to_send()))

    def on_read(self, conn: _RawConn) -> None:
        try:
            n = conn.sock.recv_into(self.rbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.drop(conn)
            return
        if not n:
            self.drop(conn)
        elif conn.state == _OPEN:
            self.handle(conn, self.rview[:n])
        elif conn.state == _HANDSHAKE:
            self.handshake(conn, self.rview[:n])

    def handshake(self, conn: _RawConn, data: memoryview) -> None:
        """The response's head goes to the sans-I/O client, which checks it (status 101,
        ``Upgrade``, ``Connection``, ``Sec-WebSocket-Accept``, no extension); what follows it
        is already frames, for the frame reader."""
        buf = conn.reader.buf
        buf += data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self.drop(conn)
            return
        end += 4
        proto = conn.proto
        assert proto is not None
        proto.receive_data(bytes(buf[:end]))
        proto.events_received()
        del buf[:end]
        conn.proto = None
        # A refusal (not 101) leaves the client waiting for the body: not open either.
        if proto.state is not State.OPEN or proto.handshake_exc is not None:
            self.drop(conn)
            return
        conn.state = _OPEN
        if buf:
            self.handle(conn, b"")

    def handle(self, conn: _RawConn, data: bytes | memoryview) -> None:
        """The frames ``data`` completes, all stamped with one reading of the clock."""
        now = time.time()
        for opcode, payload in conn.reader.feed(data):
            if opcode in (OP_TEXT, OP_BINARY):
                try:
                    self.message(conn, payload, now)
                except (ValueError, KeyError, TypeError):
                    # Not the protocol's frames: what the asyncio receiver does (its task
                    # ends, counted closed).
                    self.drop(conn)
                    return
            elif opcode == OP_PING:
                self.send(conn, mask_frame(OP_PONG, payload))
            elif opcode == OP_CLOSE:
                # Echo the code (RFC 6455 section 5.5.1), then read no more of it.
                self.send(conn, mask_frame(OP_CLOSE, payload[:2]))
                self.drop(conn)
            if conn.state == _CLOSED:
                return

    def message(self, conn: _RawConn, payload: bytes, now: float) -> None:
        """A text message: one protocol frame per line (a subscriber that fell behind gets
        its frames batched), each counted as the asyncio receiver counts it."""
        out = self.result
        for line in payload.split(b"\n"):
            frame = loads(line)
            kind = frame["type"]
            if kind == "pub":
                epoch = frame["epoch"]
                offset = frame["offset"]
                last = conn.last
                prev = last.get(epoch)
                if prev is not None and offset > prev + 1:
                    out.missing += offset - prev - 1
                last[epoch] = offset
                if self.start <= now < self.end:
                    latency = now - frame["ts"]
                    out.frames += 1
                    b = int(latency / BIN)
                    bins = out.bins
                    bins[b] = bins.get(b, 0) + 1
                    key = (epoch, offset)
                    if latency > self.latest.get(key, 0.0):
                        self.latest[key] = latency
            elif kind == "subscribed":
                out.subscribed += 1
                if conn.sub == _ASKED:
                    conn.sub = _ANSWERED
                    self.unanswered -= 1
            elif kind == "unsubscribed":
                code = frame["code"]
                out.refused[str(code)] = out.refused.get(str(code), 0) + 1
                if conn.sub == _ASKED and isinstance(
                    ChannelError.from_code(code, ""), ChannelUnavailable
                ):
                    # Still asked: subscribe again after a pause, as baton's client would.
                    self.retries.append((time.monotonic() + RETRY_AFTER, conn))
                elif conn.sub == _ASKED:
                    self.drop(conn)

    def send(self, conn: _RawConn, data: bytes) -> None:
        if conn.out:
            conn.out += data
            return
        try:
            sent = conn.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.drop(conn)
            return
        if sent < len(data):
            conn.out += data[sent:]
            self.sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def flush(self, conn: _RawConn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.drop(conn)
            return
        del conn.out[:sent]
        if not conn.out:
            self.sel.modify(conn.sock, selectors.EVENT_READ, conn)

    def drop(self, conn: _RawConn) -> None:
        """The connection is over (closed, failed, given up): counted closed, once."""
        if conn.state == _CLOSED:
            return
        conn.state = _CLOSED
        conn.proto = None
        self.result.closed += 1
        if conn.sub == _ASKED:
            self.unanswered -= 1
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        conn.sock.close()


class Receivers:
    """``processes`` receiver processes sharing ``urls`` between them."""

    def __init__(
        self,
        urls: Sequence[str],
        token: str,
        channel: str,
        processes: int,
        *,
        kind: str = "raw",
        nice: int = 0,
    ) -> None:
        ctx = mp.get_context("spawn")
        self.pipes: list[Connection] = []
        self.procs: list[Any] = []
        for k in range(processes):
            mine, theirs = ctx.Pipe()
            share = list(urls[k::processes])
            p = ctx.Process(
                target=_receiver_main,
                args=(share, token, channel, theirs),
                kwargs={"kind": kind, "nice": nice},
            )
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
    #: Which receiver read the frames (``--receiver``).
    receiver: str = "raw"
    #: The receiver processes' CPU over the window, and per frame they read in it: how much of
    #: the machine the measuring takes from what is measured.
    receiver_cpu_s: float = 0.0
    receiver_us_per_frame: float = float("nan")
    #: The receiver processes' ``nice`` increment (``--receiver-nice``; 0: the servers' own).
    receiver_nice: int = 0
    #: ``unsubscribed`` answers the receivers got, by code (4503s were asked again).
    refused: dict[str, int] = field(default_factory=dict)
    #: Per publication in the window, ``[offset, ms]`` to its last receiver, in offset order:
    #: whether the tail comes at a period (a collection, a renewal) or at random.
    series: list[tuple[int, float]] = field(default_factory=list)


def _merge(result: Result, parts: list[dict[str, Any]]) -> None:
    bins: dict[int, int] = {}
    last: dict[str, float] = {}
    for part in parts:
        result.frames += part["frames"]
        result.missing += part["missing"]
        result.closed += part["closed"]
        result.receiver_cpu_s += part["cpu_s"]
        for code, n in part.get("refused", {}).items():
            result.refused[code] = result.refused.get(code, 0) + n
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
        offsets = sorted((int(k.rsplit(":", 1)[1]), v) for k, v in last.items())
        result.series = [(o, round(v * 1000, 1)) for o, v in offsets]


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
        result.receiver_us_per_frame = 1e6 * result.receiver_cpu_s / result.frames
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
    receiver: str = "raw",
    nice: int = 0,
) -> Result:
    from baton.channels.client import ws_url

    res = Result(
        "baton", subscribers, nodes, rate, receivers, window, receiver=receiver, receiver_nice=nice
    )
    every = f"{1 / rate:.4f}".rstrip("0")
    channel = f"tick:fanout,every={every}"
    with temp_dir("fanout") as tmp, LocalCluster(nodes, None, tmp, ttl=ttl) as c:
        wait_for(lambda: list(c.states().values()) == ["live"] * nodes, timeout=60)
        wait_for(lambda: all(n.status() for n in c.nodes.values()), timeout=60)
        names = list(c.nodes)
        urls = [ws_url(c.node(names[i % nodes]).url) for i in range(subscribers)]
        pids = [n.proc.popen.pid for n in c.nodes.values() if n.proc]
        rx = Receivers(urls, c.token, channel, receivers, kind=receiver, nice=nice)
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
    subscribers: int,
    rate: float,
    receivers: int,
    window: float,
    warmup: float,
    *,
    receiver: str = "raw",
    nice: int = 0,
) -> Result:
    res = Result(
        "floor", subscribers, 1, rate, receivers, window, receiver=receiver, receiver_nice=nice
    )
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    server = ctx.Process(target=_floor_server, args=(theirs, subscribers, rate))
    server.start()
    try:
        port = mine.recv()
        urls = [f"ws://127.0.0.1:{port}/"] * subscribers
        rx = Receivers(urls, "floor", "tick:fanout", receivers, kind=receiver, nice=nice)
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
        "CPU | receiver µs CPU per frame | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        nice = f", nice {r.receiver_nice}" if r.receiver_nice else ""
        out.append(
            f"| {r.mode} | {r.subscribers:,} | {r.nodes} | {r.rate:g} | "
            f"{r.receivers} ({r.receiver}{nice}) | "
            f"{r.subscribe_s:.1f} s | {r.frames:,} | {r.missing} | {r.closed} | "
            f"{r.e2e_p50_ms:.1f} / {r.e2e_p99_ms:.1f} ms | {r.e2e_last_p99_ms:.1f} ms | "
            f"{r.server_p50_ms:.1f} / {r.server_p99_ms:.1f} ms | "
            f"{100 * r.server_cpu_s / r.window:.0f}% | {r.us_per_frame:.1f} | "
            f"{r.receiver_cpu_pct:.0f}% | {r.receiver_us_per_frame:.1f} | "
            f"{r.load[0]:.1f}-{r.load[1]:.1f} |"
        )
    for r in results:
        if r.refused:
            codes = ", ".join(f"{n:,} x {code}" for code, n in sorted(r.refused.items()))
            out.append(f"\n{r.mode}: subscribes answered `unsubscribed`: {codes}")
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
    parser.add_argument(
        "--receiver",
        choices=RECEIVER_KINDS,
        default="raw",
        help="raw: plain sockets in one selector loop per process (cheapest); websockets: the "
        "asyncio client, a task per connection",
    )
    parser.add_argument(
        "--receiver-nice",
        type=int,
        default=0,
        metavar="N",
        help="run the receivers N nice steps below the servers, so they use only what the "
        "servers leave of the machine, as on hosts of their own (0: the same priority)",
    )
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
                receiver=args.receiver,
                nice=args.receiver_nice,
            )
        )
        print("\n".join(table(results)), flush=True)
    if args.mode in ("floor", "both"):
        results.append(
            run_floor(
                args.subscribers,
                args.rate,
                args.receivers,
                args.window,
                args.warmup,
                receiver=args.receiver,
                nice=args.receiver_nice,
            )
        )
    print("\n".join(table(results)))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
