"""baton's exception tree.

Every error baton raises derives from :class:`BatonError`, and every class is defined here:
other modules raise them, some re-export them under their old import paths. Driver exceptions
(redis-py, psycopg, sqlite3) are translated once, at the backend boundary, with
``raise ... from exc``, so callers never import a driver to catch its errors. Kinds of failure
are classes: code that must tell "unreachable" from "refused" from "stale" catches a class and
never reads a message.

::

    BatonError
    ├── ConfigError                bad input: a URL, a timing, an argument (changes nothing)
    │   ├── SpecError              an object's spec does not suit its workload type
    │   └── CascadeInputError      bad input to a cascade operation (also a CascadeError)
    │       └── NotANode           a database that is not a cascade node
    ├── StoreError                 the coordination store failed us
    │   ├── StoreUnavailable       cannot connect, connection lost, server gone
    │   ├── StoreTimeout           the store did not answer within the request timeout
    │   ├── NoMaster               the Redis master file is empty: a switch is under way
    │   └── FeedCompacted          a change-feed position is no longer available: re-list
    ├── LeaseError                 leadership problems
    │   ├── LeaseLost              a lease we held is gone (``reason`` says why)
    │   ├── NotLeader              a leader-only call made by a non-leader (election or group)
    │   └── StaleEpoch             a side effect carried an epoch lower than one already seen
    │       ├── FencedOut          a cascade worker's epoch is below one applied to its node
    │       └── Deposed            the placement controller's lease is no longer held
    ├── CascadeError               a cascade operation could not be done (changes nothing)
    │   ├── CascadeInputError      (above: bad input, a ConfigError)
    │   ├── Refused                the set's state refuses the operation
    │   │   ├── NoWritableRoot     the set has no live root that takes writes now (a failover
    │   │   │                      or switchover under way): try again shortly
    │   │   ├── RootMoved          a write was refused at a node that is no longer the root;
    │   │   │                      nothing was written: run the transaction again
    │   │   └── SyncUnsafe         a failover would promote no branch holding every
    │   │                          transaction acknowledged in sync mode
    │   ├── NotFinished            a switchover did not finish within its timeout: run it again
    │   ├── NoTaskSlot             a low-latency worker's task found no Spark task slot free
    │   ├── SyncTimeout            sync mode: a transaction committed at the root was not yet
    │   │                          confirmed on K branches in time (it is NOT lost)
    │   ├── NodeDatabaseError      a node database failed a statement (the driver's error is
    │   │   │                      its ``__cause__``)
    │   │   └── NodeUnreachable    a node database cannot be used now: down, locked past the
    │   │                          busy timeout, I/O error, disk full (try again later)
    │   └── FencedOut              (above: a StaleEpoch)
    ├── ChannelError               a live channel subscription could not be served
    │   ├── BadChannel             a malformed channel name or unknown namespace (also a
    │   │                          ConfigError: bad input)
    │   ├── ChannelRefused         the channel's handler refused the subscriber
    │   ├── ChannelUnavailable     the leader did not answer, or changed meanwhile: retry
    │   ├── ChannelFinished        the upstream finished cleanly: nothing more will come
    │   └── BadFrame               a WebSocket frame that breaks the protocol (also a
    │                              ConfigError): the connection is closed
    ├── PeerError                  another node's API could not be reached or answered an error
    ├── FailoverError              a store-failover round or planned switch did not complete
    ├── SparkUnavailable           a Spark master or Connect server does not answer: retry
    ├── ServerError                a supervised process (a test server, baton.local) could not
    │                              be started or did not become ready
    └── WaitTimeout                a condition (baton.testing) did not hold before its deadline;
                                   also an AssertionError, so test runners report a failed check

``except ConfigError`` catches bad input only: never an unreachable database or store. The CLI
and the node's API map the cascade kinds to exit and status codes by class alone (see
:func:`baton.cascade.commands.classify`).

Messages say what was wrong, with the value, and what to do next. They never contain secrets:
store URLs are shown with their password removed (see :func:`redact_url`).
"""

from __future__ import annotations

import enum
import re


class BatonError(Exception):
    """Root of every error baton raises on purpose."""


class ConfigError(BatonError, ValueError):
    """Bad input: a configuration value, URL or argument. Nothing was changed."""


class SpecError(ConfigError):
    """An object's ``spec`` does not suit its workload type (see
    ``Workload.validate_spec``): refused when the object is created, and reported as the
    member's error by a node that is asked to run it anyway. Nothing was changed."""


class StoreError(BatonError):
    """The coordination store could not do what was asked."""


class StoreUnavailable(StoreError):
    """The store cannot be reached (refused, reset, server gone)."""


class StoreTimeout(StoreError):
    """The store did not answer within the request timeout."""


class NoMaster(StoreUnavailable):
    """The Redis master file (seed 002) is empty or missing: a master switch is under way and
    its configuration client has stopped every worker on the host from using the old master.
    Nothing was sent to any server; try again once the file names the new master."""


class FeedCompacted(StoreError):
    """A change-feed resume position is older than the retained log (or from a store that lost
    its data). Re-read the current state with ``list`` and watch from its position."""


class LossReason(enum.StrEnum):
    """Why a held lease stopped being ours."""

    EXPIRED = "expired"
    """The lease ran out at the store before it was renewed."""
    PREEMPTED = "preempted"
    """Another holder has it (it expired and was acquired, or was handed over)."""
    RELEASED = "released"
    """We gave it up: ``resign()``, ``elect(other)`` or a clean stop."""
    STORE_UNREACHABLE = "store unreachable"
    """No renewal succeeded within the renew deadline, so we stopped to stay safe."""


class LeaseError(BatonError):
    """A leadership problem."""


class LeaseLost(LeaseError):
    """A lease we held is no longer ours."""

    def __init__(self, name: str, reason: LossReason, detail: str = "") -> None:
        self.name = name
        self.reason = reason
        msg = f"lost lease {name!r}: {reason.value}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class NotLeader(LeaseError):
    """A leader-only operation was asked of a node that does not hold the lease: an election's
    (``resign``, ``elect``), or a placement group's (a follower's fetch reached a member that
    does not lead the group at the asked term)."""


class StaleEpoch(LeaseError):
    """A side effect carried an epoch lower than the highest one already seen, or the lease it
    was conditioned on is no longer held at that epoch. It was refused and changed nothing."""


class Deposed(StaleEpoch):
    """A fenced write failed on the placement controller's lease, or a node refused the
    controller's epoch: this node no longer controls."""


# -- cascade -------------------------------------------------------------------------------------


class CascadeError(BatonError):
    """A cascade operation could not be done; nothing was changed. The subclasses say why: bad
    input (:class:`CascadeInputError`), the set's state (:class:`Refused`), a node database
    that failed or cannot be reached (:class:`NodeDatabaseError`, :class:`NodeUnreachable`), a
    newer worker (:class:`FencedOut`). A plain CascadeError is a state that does not allow it
    (a batch that does not follow the node's position, a worker that keeps failing)."""


class NoTaskSlot(CascadeError):
    """A low-latency worker's task would find no free Spark task slot in its session (every
    slot is held by other low-latency workers): the worker applies in micro-batches instead."""


class CascadeInputError(CascadeError, ConfigError):
    """Bad input to a cascade operation: an unknown node, a bad name or location, a table that
    does not exist or has no primary key, bad event data. Nothing was changed."""


class NotANode(CascadeInputError):
    """A database that is not a cascade node (its ``baton_*`` tables are missing, or it has
    no node name): create the node first, or give another location."""


class Refused(CascadeError):
    """The input is well formed, but the set's current state refuses the operation (a cycle, a
    dead or leaf provider, a location that is another node, no live root, ...). Nothing was
    changed."""


class NoWritableRoot(Refused):
    """The set has no live root that takes writes now: none is reachable and untagged (a
    failover is due or under way), or the root is handing over (a switchover under way). A
    writer tries again shortly; nothing was written."""


class RootMoved(Refused):
    """A write was refused by the safe-operations guard at a node that is no longer the set's
    root (a switchover or failover moved it): nothing of the transaction was written. ``old``
    and ``new`` name the nodes; running the transaction again writes it at the new root."""

    def __init__(self, message: str, old: str, new: str | None) -> None:
        super().__init__(message)
        self.old = old
        self.new = new


class SyncUnsafe(Refused):
    """A failover refused: in synchronous mode writers were acknowledged at tick ``acked``,
    and no live branch is at or past it (``highest``), so promoting one would lose
    acknowledged transactions. Bring back a branch that holds them, or fail over by hand
    accepting the loss. Nothing was changed."""

    def __init__(self, message: str, acked: int, highest: int) -> None:
        super().__init__(message)
        self.acked = acked
        self.highest = highest


class NotFinished(CascadeError):
    """A switchover did not finish within its timeout: run it again to finish it."""


class SyncTimeout(CascadeError):
    """Synchronous mode (``sync = K``): a transaction the writer committed at the root was not
    confirmed on K branches within the writer's timeout. Unlike every other cascade error,
    something WAS changed: the transaction is committed at the root and stays committed (it was
    neither lost nor rolled back); it reaches the branches when they apply ``tick``. What is
    missing is the confirmation that it would survive losing the root. ``root`` names the root,
    ``tick`` the first root tick that includes the transaction, ``wanted`` is K and
    ``confirmed`` the branches that held it when the writer gave up waiting."""

    def __init__(
        self, message: str, root: str, tick: int, wanted: int, confirmed: tuple[str, ...]
    ) -> None:
        super().__init__(message)
        self.root = root
        self.tick = tick
        self.wanted = wanted
        self.confirmed = confirmed


class NodeDatabaseError(CascadeError):
    """A node database failed a statement for a reason other than the input (a constraint, a
    table changed under the operation, a driver error); the driver's exception is the
    ``__cause__``. The operation's transaction was rolled back."""


class NodeUnreachable(NodeDatabaseError):
    """A node database cannot be used right now: the server is down or unreachable, or the
    database is locked by another writer past the busy timeout, or failed on I/O or a full
    disk. Nothing was changed; trying again later may succeed."""


class FencedOut(StaleEpoch, CascadeError):
    """A cascade worker's epoch is lower than one that already applied to its node: a newer
    worker took over, and this one must stop. Nothing was applied."""


# -- live channels -------------------------------------------------------------------------------


class ChannelError(BatonError):
    """A live channel subscription could not be served. ``code`` is the protocol's code for the
    kind (see ``docs/channels.md``), ``reason`` the one line sent to the subscriber."""

    code = 4500

    def __init__(self, reason: str, code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        if code is not None:
            self.code = code

    @staticmethod
    def from_code(code: int, reason: str) -> ChannelError:
        """The error a subscription ended with, from the code another node or a client
        received (``unsubscribed``, a forwarded subscribe's answer): the one place codes turn
        back into kinds. 4404 (an unknown namespace at the leader) is a bad channel; 4429
        (too slow) may be retried as an unavailable one; an unknown code is a refusal."""
        kinds: dict[int, type[ChannelError]] = {
            ChannelFinished.code: ChannelFinished,
            ChannelUnavailable.code: ChannelUnavailable,
            4429: ChannelUnavailable,
            BadChannel.code: BadChannel,
            4404: BadChannel,
        }
        return kinds.get(code, ChannelRefused)(reason, code)


class BadChannel(ChannelError, ConfigError):
    """A malformed channel name (``namespace:path``) or a namespace no handler serves.
    Nothing was subscribed."""

    code = 4400


class ChannelRefused(ChannelError):
    """The channel's handler refused the subscriber (or its token). Not retried."""

    code = 4403


class ChannelUnavailable(ChannelError):
    """The channel's leader did not answer a forwarded subscribe, or leadership changed in the
    middle of it: nothing was subscribed; subscribing again may succeed."""

    code = 4503


class ChannelFinished(ChannelError):
    """The channel's upstream finished cleanly: the subscription is over."""

    code = 4100


class BadFrame(ChannelError, ConfigError):
    """A client's WebSocket frame breaks the protocol (not JSON, not an object, an unknown
    type, a missing field, too large, a wrong token): the connection is closed with ``code``
    and the one-line reason; nothing else is affected."""

    code = 4000


# -- other nodes and the test kit ------------------------------------------------------------------


class PeerError(BatonError):
    """Another node's API could not be reached or answered with an error (``status``: its
    HTTP status, None when it was not reached)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class FailoverError(BatonError):
    """A store-failover round or a planned switch (``baton redis-failover``) did not complete:
    a client did not confirm, no replica could be promoted, or a newer round took over. What
    was done is safe (clients that invalidated keep an empty master file until a later round
    completes) and the message says what held it back."""


class SparkUnavailable(BatonError):
    """Spark cannot be reached: the standalone master or the Spark Connect server named does
    not answer. Nothing was started; a node service says so in one line and tries again."""


class ServerError(BatonError):
    """A supervised process (:class:`baton.local.processes.Proc`: a test server, a Spark
    server, a node) could not be started, or exited or timed out before it was ready."""


class WaitTimeout(BatonError, AssertionError):
    """A condition (:func:`baton.local.waiting.wait_for`) did not hold before its deadline.
    Also an AssertionError: a test runner reports it as a failed check, not as a crash."""


_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@]*):(?P<pw>[^@/]*)@")
_QUERY_SECRET = re.compile(r"(?i)(password|passwd|token|secret)=[^&\s]*")


def redact_url(url: str) -> str:
    """Return ``url`` with any password or secret query value replaced by ``***``."""
    out = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
    return _QUERY_SECRET.sub(lambda m: f"{m.group(1)}=***", out)
