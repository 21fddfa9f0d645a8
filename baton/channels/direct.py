"""Prebuilt frames written straight to a channel WebSocket's socket.

A publication goes to thousands of subscribers as the same bytes: a server's frames are not
masked, and nodes negotiate no compression, so the WebSocket frame of a publication is one
byte string whoever receives it. The ASGI path builds that frame again for every subscriber
(Starlette's message, the server's frame object, its serialisation), which was most of the
fan-out's CPU. This module lets the node build it once and hand it to each socket.

It is a WebSocket protocol class for uvicorn (``uvicorn.Config(ws=...)``, the server's own
point of extension) that offers, through the ASGI scope's ``extensions`` (the spec's place for
what a server offers beyond it), one call: write these frame bytes now, if the connection is in
a state where the protocol itself would have written them the same way. When it is not (not
open, a close sent or received, the socket's buffer above its high-water mark), the call says
so and the caller takes the ordinary path, which waits or fails as the protocol decides. A
server without the extension (tests' in-process clients, another ASGI server) gives no such
call, and every frame takes the ordinary path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State

#: The scope extension's key; its value is a :data:`WriteFrame`.
EXTENSION = "baton.prebuilt_frames"

#: Writes a prebuilt frame now and returns True, or returns False (nothing written).
WriteFrame = Callable[[bytes], bool]


def text_frame(text: str) -> bytes:
    """``text`` as one unmasked, final, uncompressed WebSocket text frame (a server's frame)."""
    return Frame(Opcode.TEXT, text.encode()).serialize(mask=False)


class FrameCache:
    """The frame of the last text asked for: a fan-out asks for the same text object once per
    subscriber, so one entry, matched by identity, builds it once per publication."""

    __slots__ = ("_frame", "_text")

    def __init__(self) -> None:
        self._text: str | None = None
        self._frame = b""

    def frame(self, text: str) -> bytes:
        if text is not self._text:
            self._frame = text_frame(text)
            self._text = text
        return self._frame


class PrebuiltFrameProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, plus :data:`EXTENSION` in each scope."""

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:  # None when the handshake was refused
            scope["extensions"][EXTENSION] = self.write_prebuilt

    def write_prebuilt(self, frame: bytes) -> bool:
        """Write ``frame`` if the protocol would write a data frame now as it is; else False.

        The conditions are the protocol's own for a text message (open, nothing half sent,
        no extension that would change the bytes), the server's (the handshake done, no
        close sent, not disconnected) and flow control's (the transport has not asked the
        writer to pause): a subscriber that is behind takes the ordinary path, which waits.
        """
        conn = self.conn
        if (
            not self.handshake_complete
            or self.close_sent
            or self.disconnected
            or not self.writable.is_set()
            or conn.state is not State.OPEN
            or conn.extensions
            or conn.expect_continuation_frame
            or conn.writes  # bytes the protocol has not handed over yet go first
            or self.transport.is_closing()
        ):
            return False
        self.transport.write(frame)
        return True


def writer_of(scope: Mapping[str, Any]) -> WriteFrame | None:
    """The connection's :data:`WriteFrame`, if its server offers one."""
    found = scope.get("extensions", {}).get(EXTENSION)
    return found if callable(found) else None


__all__ = [
    "EXTENSION",
    "FrameCache",
    "PrebuiltFrameProtocol",
    "WriteFrame",
    "text_frame",
    "writer_of",
]
