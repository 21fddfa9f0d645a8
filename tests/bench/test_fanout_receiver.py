"""The fan-out benchmark's raw receiver: its frame parser, its masking, and one connection driven
through a socket pair whose other end is the ``websockets`` sans-I/O server (an independent
implementation: it refuses unmasked client frames and checks what the client sends)."""

from __future__ import annotations

import json
import multiprocessing as mp
import socket
import time
from collections.abc import Iterator

import pytest
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

from bench.channels_fanout import (
    OP_BINARY,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameReader,
    RawReceiver,
    mask_frame,
)


def server_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A frame as a server sends it (unmasked), built by hand for every length form."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    if n < 126:
        head = bytes((b0, n))
    elif n < 1 << 16:
        head = bytes((b0, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((b0, 127)) + n.to_bytes(8, "big")
    return head + payload


def test_several_frames_in_one_read_and_every_length_form() -> None:
    small, mid, big = b"a" * 125, b"b" * 300, bytes(range(256)) * 300  # 7, 16, 64-bit lengths
    data = (
        server_frame(OP_TEXT, small)
        + server_frame(OP_BINARY, mid)
        + server_frame(OP_TEXT, big)
        + server_frame(OP_PONG, b"")
    )
    reader = FrameReader()
    assert reader.feed(data) == [(OP_TEXT, small), (OP_BINARY, mid), (OP_TEXT, big), (OP_PONG, b"")]
    assert not reader.buf


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_frames_split_across_reads(size: int) -> None:
    payloads = [b"x" * 10, b"y" * 200, b"z" * 70_000]
    data = b"".join(server_frame(OP_TEXT, p) for p in payloads)
    reader = FrameReader()
    got: list[tuple[int, bytes]] = []
    # Through one buffer overwritten by every read, as the receiver reads: what the reader
    # keeps must be copies.
    shared = bytearray(size)
    view = memoryview(shared)
    for i in range(0, len(data), size):
        chunk = data[i : i + size]
        shared[: len(chunk)] = chunk
        got += reader.feed(view[: len(chunk)])
        shared[:] = b"\xff" * size
    assert got == [(OP_TEXT, p) for p in payloads]
    assert not reader.buf


def test_fragments_joined_with_a_control_frame_between() -> None:
    data = (
        server_frame(OP_TEXT, b"hel", fin=False)
        + server_frame(OP_PING, b"p")
        + server_frame(0x0, b"lo ", fin=False)
        + server_frame(0x0, b"world")
    )
    assert FrameReader().feed(data) == [(OP_PING, b"p"), (OP_TEXT, b"hello world")]


def test_a_masked_server_frame_is_unmasked() -> None:
    # A server must not mask, but a masked frame is still read right.
    frame = mask_frame(OP_TEXT, b"hello")
    assert FrameReader().feed(frame) == [(OP_TEXT, b"hello")]


@pytest.mark.parametrize("n", [0, 5, 125, 126, 300, 65_535, 65_536, 100_000])
def test_client_frames_are_masked_as_a_server_requires(n: int) -> None:
    payload = bytes(i % 251 for i in range(n))
    frame = mask_frame(OP_TEXT, payload)
    assert frame[1] & 0x80, "the MASK bit"
    server = ServerProtocol(state=State.OPEN)
    server.receive_data(frame)
    events = server.events_received()
    assert server.state is State.OPEN
    assert len(events) == 1
    assert isinstance(events[0], Frame)
    assert (events[0].opcode, bytes(events[0].data)) == (Opcode.TEXT, payload)


class Peer:
    """The server end of a socket pair, spoken through the sans-I/O server."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.proto = ServerProtocol()

    def send_out(self, extra: bytes = b"") -> None:
        self.sock.sendall(b"".join(self.proto.data_to_send()) + extra)

    def events(self, rx: RawReceiver, want: int) -> list[object]:
        """Pump the receiver until the server has read ``want`` events."""
        got: list[object] = []
        deadline = time.monotonic() + 5
        while len(got) < want and time.monotonic() < deadline:
            rx.pump(0.01)
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                continue
            self.proto.receive_data(data)
            got += self.proto.events_received()
        return got


@pytest.fixture
def pair() -> Iterator[tuple[RawReceiver, Peer]]:
    mine, theirs = mp.Pipe()
    rx = RawReceiver([], "s3cret", "tick:x", theirs)
    client, server = socket.socketpair()
    client.setblocking(False)
    server.setblocking(False)
    rx.adopt("ws://127.0.0.1:9/v1/channels/ws", client)
    yield rx, Peer(server)
    rx.close_all()
    server.close()
    mine.close()
    theirs.close()


def pub(offset: int, ts: float) -> str:
    return json.dumps(
        {"type": "pub", "channel": "tick:x", "epoch": 1, "offset": offset, "data": {}, "ts": ts}
    )


def test_handshake_frames_ping_and_close_through_a_real_socket(
    pair: tuple[RawReceiver, Peer],
) -> None:
    rx, peer = pair
    (conn,) = rx.conns
    (request,) = peer.events(rx, 1)
    assert isinstance(request, Request)
    assert request.path == "/v1/channels/ws"
    assert request.headers["authorization"] == "Bearer s3cret"
    assert "Sec-WebSocket-Extensions" not in request.headers, "no permessage-deflate"
    response = peer.proto.accept(request)
    peer.proto.send_response(response)
    # The first frames in the same write as the response's head: they are the frame reader's.
    subscribed = json.dumps({"type": "subscribed", "channel": "tick:x", "epoch": 1, "offset": 0})
    peer.send_out(server_frame(OP_TEXT, subscribed.encode()))
    for _ in range(50):
        rx.pump(0.01)
        if rx.result.subscribed:
            break
    assert conn.proto is None
    assert rx.result.subscribed == 1
    assert rx.result.closed == 0

    # Inside the window: a batched message (one frame per line) with a gap after offset 2.
    rx.start, rx.end = time.time() - 10, time.time() + 10
    ts = time.time() - 0.01
    batch = "\n".join([pub(1, ts), pub(2, ts), pub(5, ts)])
    peer.proto.send_text(batch.encode())
    peer.send_out()
    # A ping is answered with a masked pong carrying its payload (the server would refuse an
    # unmasked one).
    peer.proto.send_ping(b"are you there")
    peer.send_out()
    (pong,) = peer.events(rx, 1)
    assert isinstance(pong, Frame)
    assert (pong.opcode, bytes(pong.data)) == (Opcode.PONG, b"are you there")
    assert rx.result.frames == 3
    assert rx.result.missing == 2
    assert sum(rx.result.bins.values()) == 3
    assert set(rx.latest) == {(1, 1), (1, 2), (1, 5)}

    # A close: echoed, counted closed once, not read any more.
    peer.proto.send_close(4429, "too slow")
    peer.send_out()
    (close,) = peer.events(rx, 1)
    assert isinstance(close, Frame)
    assert close.opcode == Opcode.CLOSE
    assert int.from_bytes(close.data[:2], "big") == 4429
    assert rx.result.closed == 1
    assert conn.sock.fileno() == -1


def test_a_refused_handshake_counts_closed(pair: tuple[RawReceiver, Peer]) -> None:
    rx, peer = pair
    (request,) = peer.events(rx, 1)
    assert isinstance(request, Request)
    peer.proto.send_response(peer.proto.reject(403, "no\n"))
    peer.send_out()
    for _ in range(50):
        rx.pump(0.01)
        if rx.result.closed:
            break
    assert rx.result.closed == 1
    assert rx.result.subscribed == 0
