"""The pure part of store failover: round tokens, the client's rules for answering, and the
choice of the replica to promote. No I/O here: the client and server actors observe, call
these, then act (the shape of :mod:`baton.placement.decide`).

The client's rules, which make a switch unanimous and keep several configuration servers safe:

* A round is named by a :class:`Token` ``(generation, server)``, totally ordered. A client
  remembers the highest token it has seen and answers ``stale`` to anything lower.
* ``ping``: ``pong`` when, checked from this client's host, the old master does not answer (a
  planned switch skips the check). The token becomes the highest seen.
* ``invalidate``: only for the round it last answered a ping in (a round it has not been pinged
  in is refused); the old master must still be unreachable (unless planned); then the file is
  emptied and the client answers ``invalidated``, remembering the round it invalidated in.
* ``reconfigure``: a client that invalidated in round T applies only the reconfigure of round
  T; one that is in no round applies a reconfigure whose token is not below the highest seen,
  when its file is empty (a newcomer, or a restarted client) or already names that master. A
  reconfigure that would replace another master without a round is refused (``conflict``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from baton.errors import ConfigError
from baton.store.master_file import Address, parse_address

_SERVER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$")


@dataclass(frozen=True, slots=True, order=True)
class Token:
    """A round's name: ordered by generation, then by server id (so two servers that picked
    the same generation are still ordered)."""

    generation: int
    server: str

    def __str__(self) -> str:
        return f"{self.generation}/{self.server}"

    def to_json(self) -> list[Any]:
        return [self.generation, self.server]

    @staticmethod
    def from_json(value: Any) -> Token | None:
        if value is None:
            return None
        if (
            not isinstance(value, list | tuple)
            or len(value) != 2
            or not isinstance(value[0], int)
            or isinstance(value[0], bool)
            or not isinstance(value[1], str)
            or not _SERVER_ID.match(value[1])
        ):
            raise ConfigError(f"bad round token {value!r}: expected [generation, server id]")
        return Token(value[0], value[1])

    def encode(self) -> str:
        """The form kept in Redis (``<generation> <server>``)."""
        return f"{self.generation} {self.server}"

    @staticmethod
    def decode(text: str | bytes | None) -> Token | None:
        if text is None:
            return None
        raw = text.decode() if isinstance(text, bytes) else text
        gen, _, server = raw.partition(" ")
        if not gen.isdigit() or not server:
            return None
        return Token(int(gen), server)


def check_server_id(value: str) -> str:
    if not _SERVER_ID.match(value):
        raise ConfigError(
            f"bad server id {value!r}: use 1-100 letters, digits or '._:@-', starting with a "
            "letter or digit"
        )
    return value


class Answer(StrEnum):
    PONG = "pong"
    INVALIDATED = "invalidated"
    RECONFIGURED = "reconfigured"
    REFUSED = "refused"
    """The client does not agree (the old master answers from its host, no ping seen, ...)."""
    STALE = "stale"
    """The message's token is below the highest the client has seen: a newer round exists."""
    CONFLICT = "conflict"
    """A reconfigure named another master than the client's file, outside any round."""


@dataclass(frozen=True, slots=True)
class ClientState:
    """What a configuration client remembers (kept in its state file across restarts)."""

    highest: Token | None = None
    pinged_in: Token | None = None
    invalidated_in: Token | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "highest": None if self.highest is None else self.highest.to_json(),
            "pinged_in": None if self.pinged_in is None else self.pinged_in.to_json(),
            "invalidated_in": None
            if self.invalidated_in is None
            else self.invalidated_in.to_json(),
        }

    @staticmethod
    def from_json(data: Any) -> ClientState:
        if not isinstance(data, dict):
            raise ConfigError("bad client state: expected an object")
        return ClientState(
            highest=Token.from_json(data.get("highest")),
            pinged_in=Token.from_json(data.get("pinged_in")),
            invalidated_in=Token.from_json(data.get("invalidated_in")),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """A client's answer to one message, and what it must do before answering."""

    state: ClientState
    answer: Answer
    reason: str = ""
    write: bool = False
    """Write ``master`` to the file (None: empty it) before answering."""
    master: Address | None = None


def _stale(state: ClientState, token: Token) -> Decision | None:
    if state.highest is not None and token < state.highest:
        return Decision(
            state, Answer.STALE, f"round {token} is older than round {state.highest} seen here"
        )
    return None


def on_ping(state: ClientState, token: Token, old_answers: bool | None) -> Decision:
    """``old_answers``: whether the old master answered from here (None: not checked, a
    planned switch or a round that replaces no master)."""
    stale = _stale(state, token)
    if stale is not None:
        return stale
    state = dataclasses.replace(state, highest=token)
    if old_answers:
        return Decision(state, Answer.REFUSED, "the master answers from here")
    return Decision(dataclasses.replace(state, pinged_in=token), Answer.PONG)


def on_invalidate(state: ClientState, token: Token, old_answers: bool | None) -> Decision:
    stale = _stale(state, token)
    if stale is not None:
        return stale
    if state.pinged_in != token:
        return Decision(
            dataclasses.replace(state, highest=token),
            Answer.REFUSED,
            f"no ping of round {token} was answered here",
        )
    if old_answers:
        return Decision(state, Answer.REFUSED, "the master answers from here")
    return Decision(
        dataclasses.replace(state, invalidated_in=token), Answer.INVALIDATED, write=True
    )


def on_reconfigure(
    state: ClientState, token: Token, master: Address, current: Address | None
) -> Decision:
    """``current``: what the master file names now."""
    stale = _stale(state, token)
    if stale is not None:
        return stale
    if state.invalidated_in is not None:
        if token != state.invalidated_in:
            return Decision(
                state,
                Answer.REFUSED,
                f"invalidated in round {state.invalidated_in}: waiting for its reconfigure",
            )
        done = ClientState(highest=token, pinged_in=None, invalidated_in=None)
        return Decision(done, Answer.RECONFIGURED, write=True, master=master)
    if current is not None and current != master:
        return Decision(
            state,
            Answer.CONFLICT,
            f"the master file names {current}, not {master}, and no round moved it",
        )
    done = dataclasses.replace(state, highest=token)
    return Decision(done, Answer.RECONFIGURED, write=current != master, master=master)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """One Redis server as seen by the configuration server (``INFO replication`` and the
    failover token it carries)."""

    address: Address
    reachable: bool
    role: str = ""
    offset: int = -1
    """``master_repl_offset`` of a master, ``slave_repl_offset`` of a replica."""
    master_of: Address | None = None
    """The master a replica follows."""
    link_up: bool = False
    token: Token | None = None
    keys: int = -1
    """Keys it holds, over every database (-1: not known)."""
    synced: bool = True
    """For a replica: whether it completed a sync with its master since it started."""

    @property
    def holds_nothing(self) -> bool:
        """Empty and never synced: a server restarted without its data and not yet fed by the
        master. Promoted, it would make the store lose everything it held (the fault campaign,
        seed 1, run M6: a replica restarted empty was made a replica of the master, the master
        died before the sync's first byte, and the replica was promoted: defect 17)."""
        return self.keys == 0 and not (self.role == "slave" and self.synced)


def choose_replica(infos: list[ServerInfo], old: Address | None) -> ServerInfo | None:
    """The server to promote: reachable, not the old master, holding data or synced with the
    master (never one that :attr:`~ServerInfo.holds_nothing`), with the most advanced
    replication offset (ties: the first listed). None when no server qualifies: the switch
    waits for the master to come back, or for an operator's planned switch.

    Offsets only compare within one line of masters, so the newest line comes first: the
    failover token a server carries (a master's own, a replica's replicated from its master).
    When a racing server already promoted a replica, that one (or a replica of it) is chosen
    again, not a replica still stuck on the dead master with an unrelated offset."""
    best: ServerInfo | None = None
    lowest = Token(-1, "")
    for info in infos:
        if not info.reachable or info.address == old or info.holds_nothing:
            continue
        if best is None or (info.token or lowest, info.offset) > (
            best.token or lowest,
            best.offset,
        ):
            best = info
    return best


def current_master(
    infos: list[ServerInfo], named: dict[Address, int]
) -> tuple[Address, Token | None] | None:
    """Which reachable master is the current one: the highest failover token wins (a returning
    old master carries an older one), then the one most clients' files name, then the most
    advanced offset, then the first listed. ``named``: master -> how many files name it."""
    masters = [i for i in infos if i.reachable and i.role == "master"]
    if not masters:
        return None

    def rank(item: tuple[int, ServerInfo]) -> tuple[Token, int, int, int]:
        index, info = item
        return (info.token or Token(-1, ""), named.get(info.address, 0), info.offset, -index)

    _, best = max(enumerate(masters), key=rank)
    return best.address, best.token


def parse_servers(text: str | list[str]) -> list[Address]:
    """``H:P,H:P,...`` (or a list) as addresses; at least one, no duplicates."""
    items = [x.strip() for x in (text.split(",") if isinstance(text, str) else text)]
    items = [x for x in items if x]
    if not items:
        raise ConfigError("no Redis servers given: use --redis-servers H:P,H:P,...")
    out = [parse_address(x, what="Redis server") for x in items]
    if len(set(out)) != len(out):
        raise ConfigError(f"a Redis server is listed twice in {','.join(items)!r}")
    return out


__all__ = [
    "Answer",
    "ClientState",
    "Decision",
    "ServerInfo",
    "Token",
    "check_server_id",
    "choose_replica",
    "current_master",
    "on_invalidate",
    "on_ping",
    "on_reconfigure",
    "parse_servers",
]
