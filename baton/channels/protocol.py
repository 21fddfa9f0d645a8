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
4100 the upstream finished. Every reason is one line. The codes turn back into error classes in
one place, :meth:`baton.errors.ChannelError.from_code`.

Every frame is a pydantic model, one per ``type`` (the discriminator), read by
:func:`parse_frame` (a client's, strictly: a bad one is a :class:`~baton.errors.BadFrame`) or
:func:`parse_node_frame` (a node's), and written by :func:`dumps` in the exact bytes above:
compact JSON, keys in the order shown, optional keys left out when unset. Between nodes, a
follower asks the leader for a subscriber's initial data with :class:`ForwardedSubscribe`
(``POST /v1/channels/subscribe``), answered by :class:`Survey` or :class:`SurveyRefusal`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, TypeAdapter
from pydantic import ValidationError as _Invalid

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

Count = Annotated[StrictInt, Field(ge=0, le=MAX_INT)]


class _Frame(BaseModel):
    """A frame: its fields in wire order; ``_OPTIONAL`` are left out when None."""

    # Unknown keys are ignored, as a newer peer may send more than this one knows.
    model_config = ConfigDict(frozen=True, extra="ignore")
    _OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    def wire(self) -> dict[str, Any]:
        """The frame as the JSON object that goes on the wire."""
        out = self.model_dump()
        for key in self._OPTIONAL:
            if out.get(key, 0) is None:
                del out[key]
        return out


# -- client to node ---------------------------------------------------------------------------


class Since(_Frame):
    """Where a subscriber left off: the last epoch and offset it saw."""

    epoch: Count
    offset: Count


class Auth(_Frame):
    type: Literal["auth"] = "auth"
    token: StrictStr


class Subscribe(_Frame):
    _OPTIONAL = frozenset({"relay", "node", "since"})
    type: Literal["subscribe"] = "subscribe"
    channel: Annotated[StrictStr, Field(min_length=1)]
    #: Set by a node relaying to this leader (cluster token only): the epoch it follows,
    #: and the node's id (a leader that stops hands the channel to a relaying node).
    relay: Count | None = None
    node: Annotated[StrictStr, Field(min_length=1, max_length=64)] | None = None
    since: Since | None = None


class Unsubscribe(_Frame):
    type: Literal["unsubscribe"] = "unsubscribe"
    channel: Annotated[StrictStr, Field(min_length=1)]


class Publish(_Frame):
    type: Literal["publish"] = "publish"
    channel: Annotated[StrictStr, Field(min_length=1)]
    data: Any


Frame = Annotated[Auth | Subscribe | Unsubscribe | Publish, Field(discriminator="type")]
_CLIENT: TypeAdapter[Frame] = TypeAdapter(Frame)

#: What a bad field is told, by its place in the frame (the frame's type first).
_HINTS: dict[tuple[str | int, ...], str] = {
    ("since",): 'since must be {"epoch": E, "offset": O}',
    ("since", "epoch"): "since.epoch must be an integer from 0 to 2**53",
    ("since", "offset"): "since.offset must be an integer from 0 to 2**53",
    ("relay",): "subscribe.relay must be an integer from 0 to 2**53",
    ("node",): "subscribe.node must be a node id",
    ("data",): "publish needs data",
    ("token",): "auth needs a token (a string)",
}


#: Which bad field is named when several are: the order the fields were always checked in.
_ORDER = ("since", "relay", "node", "data", "channel", "token")


def _field(loc: tuple[str | int, ...]) -> int:
    """Where the field of an error's ``loc`` (the frame's type first) comes in :data:`_ORDER`."""
    return _ORDER.index(str(loc[1])) if len(loc) > 1 and loc[1] in _ORDER else 0


def _bad(obj: dict[str, Any], exc: _Invalid) -> BadFrame:
    """The one-line refusal of a frame that failed validation."""
    error = min(exc.errors(), key=lambda e: _field(e["loc"]))
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        kind = obj.get("type")
        shown = kind if isinstance(kind, str) and len(kind) < 40 else "?"
        return BadFrame(
            f"bad frame: unknown type {shown!r}; use subscribe, unsubscribe, publish or auth"
        )
    kind, *where = error["loc"]
    place = tuple(where)
    if place[:1] == ("channel",):
        return BadFrame(f"bad frame: {kind} needs a channel (a string like 'tick:clock')")
    hint = _HINTS.get(place) or _HINTS.get(place[:1]) or f"{kind}.{place[0]} is not valid"
    return BadFrame(f"bad frame: {hint}")


def parse_frame(
    raw: str | bytes, max_frame: int = MAX_FRAME
) -> Auth | Subscribe | Unsubscribe | Publish:
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
    try:
        return _CLIENT.validate_python(obj)
    except _Invalid as exc:
        raise _bad(obj, exc) from None


# -- node to client ---------------------------------------------------------------------------


class Subscribed(_Frame):
    type: Literal["subscribed"] = "subscribed"
    channel: str
    epoch: int
    offset: int
    recovered: bool = False
    data: Any = None


class Pub(_Frame):
    type: Literal["pub"] = "pub"
    channel: str
    epoch: int
    offset: int
    data: Any = None
    #: When the upstream yielded it (unix time): the delivery latency is measured from here.
    ts: float | None = None


class Gap(_Frame):
    type: Literal["gap"] = "gap"
    channel: str
    epoch: int
    offset: int
    reason: str = ""


class Unsubscribed(_Frame):
    type: Literal["unsubscribed"] = "unsubscribed"
    channel: str
    code: int
    reason: str = ""


class Refused(_Frame):
    """A client's publication was refused (its subscriptions go on)."""

    type: Literal["refused"] = "refused"
    channel: str
    code: int
    reason: str = ""


NodeFrame = Annotated[Subscribed | Pub | Gap | Unsubscribed | Refused, Field(discriminator="type")]
_NODE: TypeAdapter[NodeFrame] = TypeAdapter(NodeFrame)

#: A publication of a stream: what its history keeps and its subscribers get.
Publication = Pub | Gap


def parse_node_frame(line: str) -> Subscribed | Pub | Gap | Unsubscribed | Refused | None:
    """One frame a node sent (one line of a message); None for what this side does not know
    (a newer node's frame type) or cannot read."""
    try:
        return _NODE.validate_json(line)
    except _Invalid:
        return None


def frames(message: str | bytes) -> list[dict[str, Any]]:
    """The frames of one message from a node, as JSON objects (one per line; JSON text never
    holds a raw newline)."""
    text = message.decode() if isinstance(message, bytes) else message
    return [json.loads(line) for line in text.split("\n") if line]


def dumps(frame: _Frame) -> str:
    """A frame as text (compact JSON, keys in wire order)."""
    return json.dumps(frame.wire(), separators=(",", ":"))


# -- node to node: a follower's subscribe, forwarded to the channel's leader -------------------


class ForwardedSubscribe(BaseModel):
    """A follower's subscribe, asked of the channel's leader at the epoch it believes."""

    model_config = ConfigDict(extra="forbid")
    channel: str = Field(min_length=3, max_length=240)
    epoch: int = Field(ge=1, le=MAX_INT)
    user: str = Field(min_length=1, max_length=256)
    cluster: bool = False
    namespace: str | None = Field(default=None, max_length=64)
    #: An offset of ``epoch`` the subscriber had: recover from the history if it covers it.
    since: int | None = Field(default=None, ge=0, le=MAX_INT)


class Survey(BaseModel):
    """The leader's answer to a subscribe: the initial ``data`` at ``offset`` of ``epoch``,
    or (``recovered``) the ``frames`` after the subscriber's own ``offset``."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    ok: Literal[True] = True
    epoch: int
    offset: int
    data: Any = None
    recovered: bool = False
    frames: tuple[str, ...] = ()

    def wire(self) -> dict[str, Any]:
        if self.recovered:
            return self.model_dump(include={"ok", "epoch", "offset", "recovered", "frames"})
        return self.model_dump(include={"ok", "epoch", "offset", "data"})


class SurveyRefusal(BaseModel):
    """The leader refused the subscribe: the protocol's code and one-line reason."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    ok: Literal[False] = False
    code: int
    reason: str = "refused"


__all__ = [
    "MAX_FRAME",
    "Auth",
    "ForwardedSubscribe",
    "Frame",
    "Gap",
    "NodeFrame",
    "Pub",
    "Publication",
    "Publish",
    "Refused",
    "Since",
    "Subscribe",
    "Subscribed",
    "Survey",
    "SurveyRefusal",
    "Unsubscribe",
    "Unsubscribed",
    "dumps",
    "frames",
    "parse_frame",
    "parse_node_frame",
]
