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
  T. One that is in no round applies a reconfigure that names the master its file already
  names (nothing changes), or, when its file is empty (a newcomer, or a restarted client),
  one whose token is not below the highest seen; never one older than the round that gave it
  its master. A reconfigure that would replace another master without a round is refused
  (``conflict``).
* ``hold``: the server of the round a client invalidated in is still at work (it waits for the
  new master to catch up, or promotes it). A client whose round has been quiet for long tells
  the other servers so, and one of them takes the round over.

Every applied reconfigure *confirms* its round: the client remembers its token and master
(``confirmed``). A server's view of the current master comes only from there, the newest
confirmed round among the clients (:func:`believed_master`), never from a token found on a Redis
server: a server can carry a token no client accepted (a round that lost a race, or a master
that came back with its data).
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
    HELD = "held"
    """The round this client invalidated in is still at work (an answer to ``hold``)."""


@dataclass(frozen=True, slots=True)
class ClientState:
    """What a configuration client remembers (kept in its state file across restarts)."""

    highest: Token | None = None
    pinged_in: Token | None = None
    invalidated_in: Token | None = None
    confirmed: Token | None = None
    """The round whose reconfigure this client last applied."""
    confirmed_master: Address | None = None
    """The master that round named (kept while the file is emptied by a later round)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "highest": _json(self.highest),
            "pinged_in": _json(self.pinged_in),
            "invalidated_in": _json(self.invalidated_in),
            "confirmed": _json(self.confirmed),
            "confirmed_master": None
            if self.confirmed_master is None
            else str(self.confirmed_master),
        }

    @staticmethod
    def from_json(data: Any) -> ClientState:
        """A state file (one written before ``confirmed`` existed reads as confirming
        nothing: the server then keeps the master the files name)."""
        if not isinstance(data, dict):
            raise ConfigError("bad client state: expected an object")
        master = data.get("confirmed_master")
        return ClientState(
            highest=Token.from_json(data.get("highest")),
            pinged_in=Token.from_json(data.get("pinged_in")),
            invalidated_in=Token.from_json(data.get("invalidated_in")),
            confirmed=Token.from_json(data.get("confirmed")),
            confirmed_master=None
            if master is None
            else parse_address(str(master), what="confirmed master"),
        )


def _json(token: Token | None) -> list[Any] | None:
    return None if token is None else token.to_json()


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
    if state.invalidated_in is not None:
        if token != state.invalidated_in:
            stale = _stale(state, token)
            if stale is not None:
                return stale
            return Decision(
                state,
                Answer.REFUSED,
                f"invalidated in round {state.invalidated_in}: waiting for its reconfigure",
            )
        done = dataclasses.replace(
            state,
            highest=_newest(state.highest, token),
            pinged_in=None,
            invalidated_in=None,
            confirmed=token,
            confirmed_master=master,
        )
        return Decision(done, Answer.RECONFIGURED, write=True, master=master)
    if state.confirmed is not None and token < state.confirmed:
        return Decision(
            state,
            Answer.STALE,
            f"round {token} is older than round {state.confirmed}, which named the master here",
        )
    if current is not None and current != master:
        return Decision(
            state,
            Answer.CONFLICT,
            f"the master file names {current}, not {master}, and no round moved it",
        )
    if current is None:
        # An empty file outside a round (a newcomer, or a client that found its master had
        # become a replica) takes only the newest round's master.
        stale = _stale(state, token)
        if stale is not None:
            return stale
    # The file names this master already, or is empty: the round is confirmed here. A round
    # that pinged this client since (and was held back) does not make the master it has stale.
    done = dataclasses.replace(
        state, highest=_newest(state.highest, token), confirmed=token, confirmed_master=master
    )
    return Decision(done, Answer.RECONFIGURED, write=current != master, master=master)


def on_hold(state: ClientState, token: Token) -> Decision:
    """The server of round ``token`` says it is still at work on it."""
    if state.invalidated_in == token:
        return Decision(state, Answer.HELD)
    stale = _stale(state, token)
    if stale is not None:
        return stale
    return Decision(state, Answer.REFUSED, f"not invalidated in round {token}")


def _newest(a: Token | None, b: Token) -> Token:
    return b if a is None or b > a else a


@dataclass(frozen=True, slots=True)
class ClientReport:
    """What a server learns of one client (its state, and what its file names)."""

    state: ClientState
    master: Address | None
    quiet: float = 0.0
    """Seconds since the round it invalidated in last reached it (0 when in no round)."""


def believed_master(reports: list[ClientReport]) -> tuple[Address, Token] | None:
    """The current master by the clients: the one the newest confirmed round named. None when
    no client confirmed a round yet (a first start, or clients whose state files predate
    ``confirmed``): the caller then keeps the master the files name."""
    best: tuple[Token, Address] | None = None
    for r in reports:
        c, m = r.state.confirmed, r.state.confirmed_master
        if c is not None and m is not None and (best is None or c > best[0]):
            best = (c, m)
    return None if best is None else (best[1], best[0])


def first_master(infos: list[ServerInfo], reports: list[ClientReport]) -> Address | None:
    """The master before any round was confirmed (a first start): the one most clients'
    files name, whether it answers or not (a dead one is then replaced by a round); with every
    file empty, the master that answers holding the most (newest token, then keys, then
    replication offset, then the first listed), else the one the replicas follow. Never a
    server that merely says it is a master while the files name another: a server started
    again empty is a master of nothing."""
    named: dict[Address, int] = {}
    for r in reports:
        if r.master is not None:
            named[r.master] = named.get(r.master, 0) + 1
    if named:
        return max(named, key=lambda a: named[a])
    masters = [
        (i, info) for i, info in enumerate(infos) if info.reachable and info.role == "master"
    ]
    if masters:
        lowest = Token(-1, "")
        _, best = max(masters, key=lambda m: (m[1].token or lowest, m[1].keys, m[1].offset, -m[0]))
        return best.address
    followed: dict[Address, int] = {}
    for i in infos:
        if i.reachable and i.master_of is not None:
            followed[i.master_of] = followed.get(i.master_of, 0) + 1
    return max(followed, key=lambda a: followed[a]) if followed else None


class RoundOutlook(StrEnum):
    """What a server sees of the round the clients are in, from their answers."""

    NONE = "none"
    """No client is invalidated in a round newer than the confirmed master's."""
    UNDER_WAY = "under way"
    """Some clients wait for a round's reconfigure and its server was heard from recently."""
    ABANDONED = "abandoned"
    """Every client waiting for a round has not heard from its server for ``quiet_limit``
    seconds: its server died (or is cut off). Another server takes it over with a newer round;
    rounds are totally ordered, so one that was only slow can no longer finish after that."""


def round_outlook(
    reports: list[ClientReport], confirmed: Token | None, quiet_limit: float
) -> RoundOutlook:
    """``confirmed``: the round of the master the server holds for current. A client still
    waiting for a round no newer than that one will never hear from it (its reconfigure was
    sent and not received): abandoned at once."""
    waiting = [r for r in reports if r.state.invalidated_in is not None]
    if not waiting:
        return RoundOutlook.NONE
    if confirmed is not None and any(
        r.state.invalidated_in is not None and r.state.invalidated_in <= confirmed for r in waiting
    ):
        return RoundOutlook.ABANDONED
    if all(r.quiet >= quiet_limit for r in waiting):
        return RoundOutlook.ABANDONED
    return RoundOutlook.UNDER_WAY


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
    "ClientReport",
    "ClientState",
    "Decision",
    "RoundOutlook",
    "ServerInfo",
    "Token",
    "believed_master",
    "check_server_id",
    "choose_replica",
    "first_master",
    "on_hold",
    "on_invalidate",
    "on_ping",
    "on_reconfigure",
    "parse_servers",
    "round_outlook",
]
