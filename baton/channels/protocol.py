"""The channel protocol: JSON text frames over one WebSocket (``/v1/channels/ws`` on every node).

Client to node (one JSON object per frame, at most ``max_frame`` bytes)::

    {"type": "auth", "token": "..."}            first frame, when no Authorization header
    {"type": "subscribe", "channel": "tick:clock", "since": {"epoch": E, "offset": O}}
    {"type": "unsubscribe", "channel": "tick:clock"}
    {"type": "publish", "channel": "tick:clock", "data": ...}

Node to client (a text message holds one frame, or several separated by newlines: a node
batches what is queued for a connection when it falls behind, as Centrifugo's JSON protocol
does; see :func:`frames`)::

    {"type": "subscribed", "channel": C, "epoch": E, "offset": O, "recovered": bool, "data": ...}
    {"type": "pub", "channel": C, "epoch": E, "offset": O, "data": ..., "ts": unix time}
    {"type": "gap", "channel": C, "epoch": E, "offset": O, "reason": "..."}
    {"type": "unsubscribed", "channel": C, "code": N, "reason": "..."}
    {"type": "refused", "channel": C, "code": N, "reason": "..."}   a publish was refused

``subscribed`` may come again for a channel at any time, with a higher epoch: the channel's
leader changed, so start over from its ``data`` (publications continue after its ``offset``).
With ``recovered: true`` (``since`` was in the same epoch and still in the leader's history)
there is no data, ``offset`` is the one ``since`` gave, and the missed publications follow.
``gap``: the upstream failed and was restarted, so publications may be missing before this
offset.

Closing codes: connection (WebSocket close) 4000 bad frame (not JSON, not an object, unknown
type, bad field), 4001 unauthorized (wrong or missing token), 1009 frame too large, 1001 the
node is stopping; subscription (``unsubscribed``) 4400 malformed channel, 4404 unknown
namespace, 4403 refused by the handler, 4503 the leader did not answer or changed meanwhile
(subscribe again), 4429 the subscriber fell too far behind (subscribe again with ``since``),
4100 the upstream finished. Every reason is one line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from baton.errors import BadFrame

#: Frames larger than this close the connection (code 1009).
MAX_FRAME = 64 * 1024

CLOSE_GOING_AWAY = 1001
CLOSE_TOO_BIG = 1009
CLOSE_BAD_FRAME = 4000
CLOSE_UNAUTHORIZED = 4001

#: ``unsubscribed`` codes beside the error classes' own (see :mod:`baton.errors`).
UNSUB_TOO_SLOW = 4429
UNSUB_CLIENT = 1000

#: The largest epoch or offset a frame may carry (exact in every JSON implementation).
MAX_INT = 2**53


@dataclass(frozen=True, slots=True)
class Since:
    epoch: int
    offset: int


@dataclass(frozen=True, slots=True)
class Auth:
    token: str


@dataclass(frozen=True, slots=True)
class Subscribe:
    channel: str
    since: Since | None = None
    #: Set by a node relaying to this leader (cluster token only): the epoch it follows,
    #: and the node's id (a leader that stops hands the channel to a relaying node).
    relay: int | None = None
    node: str | None = None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    channel: str


@dataclass(frozen=True, slots=True)
class Publish:
    channel: str
    data: Any


Frame = Auth | Subscribe | Unsubscribe | Publish


def _int(obj: dict[str, Any], key: str, where: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise BadFrame(f"bad frame: {where}.{key} must be an integer from 0 to 2**53")
    return value


def _channel(obj: dict[str, Any]) -> str:
    channel = obj.get("channel")
    if not isinstance(channel, str) or not channel:
        raise BadFrame(f"bad frame: {obj['type']} needs a channel (a string like 'tick:clock')")
    return channel


def parse_frame(raw: str | bytes, max_frame: int = MAX_FRAME) -> Frame:
    """Read one client frame, or raise :class:`BadFrame` whose ``code`` closes the connection
    and whose message is the one-line reason."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_frame:
        raise BadFrame(f"frame of {size} bytes exceeds the limit of {max_frame}", CLOSE_TOO_BIG)
    if isinstance(raw, bytes):
        raise BadFrame("bad frame: send JSON as text frames, not binary")
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadFrame("bad frame: not valid JSON") from None
    if not isinstance(obj, dict):
        raise BadFrame("bad frame: expected a JSON object with a 'type'")
    kind = obj.get("type")
    if kind == "subscribe":
        since = obj.get("since")
        parsed: Since | None = None
        if since is not None:
            if not isinstance(since, dict):
                raise BadFrame('bad frame: since must be {"epoch": E, "offset": O}')
            parsed = Since(_int(since, "epoch", "since"), _int(since, "offset", "since"))
        relay = _int(obj, "relay", "subscribe") if obj.get("relay") is not None else None
        node = obj.get("node")
        if node is not None and not (isinstance(node, str) and 0 < len(node) <= 64):
            raise BadFrame("bad frame: subscribe.node must be a node id")
        return Subscribe(_channel(obj), parsed, relay, node)
    if kind == "unsubscribe":
        return Unsubscribe(_channel(obj))
    if kind == "publish":
        if "data" not in obj:
            raise BadFrame("bad frame: publish needs data")
        return Publish(_channel(obj), obj["data"])
    if kind == "auth":
        token = obj.get("token")
        if not isinstance(token, str):
            raise BadFrame("bad frame: auth needs a token (a string)")
        return Auth(token)
    shown = kind if isinstance(kind, str) and len(kind) < 40 else "?"
    raise BadFrame(
        f"bad frame: unknown type {shown!r}; use subscribe, unsubscribe, publish or auth"
    )


def frames(message: str | bytes) -> list[dict[str, Any]]:
    """The frames of one message from a node (one per line; JSON text never holds a raw
    newline)."""
    text = message.decode() if isinstance(message, bytes) else message
    return [json.loads(line) for line in text.split("\n") if line]


def dumps(frame: dict[str, Any]) -> str:
    """A node's frame as text (compact)."""
    return json.dumps(frame, separators=(",", ":"))


__all__ = [
    "MAX_FRAME",
    "Auth",
    "Frame",
    "Publish",
    "Since",
    "Subscribe",
    "Unsubscribe",
    "dumps",
    "frames",
    "parse_frame",
]
