"""etcd's v3 JSON gateway through httpx: endpoints, credentials, errors, and the server's clock.

:class:`Gateway` is the one place the etcd backend (:mod:`baton.store.etcd`) talks HTTP. It
posts to ``/v3/...`` on the first member of the URL that answers, moves to the next member when
one cannot be reached, logs in with a user and password when the URL has them (and again when
the token expires), and translates every failure once into baton's error tree, naming the
endpoint and what to check.

The server's clock
------------------
etcd has no clock API, yet baton judges lease expiry by the *store's* clock. Every answer of the
gateway carries an HTTP ``Date`` header written by the member as it answers, with one-second
resolution. :class:`ServerClock` turns those into a clock with millisecond precision: an answer
stamped second ``D`` that was sent at local monotonic time ``t0`` and received at ``t1`` proves
``D - t1 <= offset < D + 1 - t0`` for ``offset = server time - local monotonic time``. Each
answer narrows that interval, and answers that straddle a second boundary narrow it to about a
round trip; :meth:`Gateway.calibrate` gets there before a store is used, probing until an answer
straddles a second boundary (once per member and process: every store of a process shares the
member's clock). :meth:`ServerClock.now` reads the lower end of the interval (the
member's clock reads at least that), :meth:`ServerClock.latest` the upper end; neither goes
backwards within one client. The store judges expiry by the first and grants by the second.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import functools
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qs, unquote

import httpx

from baton.errors import ConfigError, StoreError, StoreTimeout, StoreUnavailable
from baton.store.base import FeedListener

#: Seconds to connect to a member, and to wait for any one answer.
CONNECT_TIMEOUT: Final = 5.0
REQUEST_TIMEOUT: Final = 5.0
#: Concurrent requests per store; more wait for a free connection.
MAX_CONNECTIONS: Final = 64
#: The oldest etcd whose gateway serves ``/v3/`` (3.3 had ``/v3beta``, 3.2 ``/v3alpha``).
MIN_VERSION: Final = (3, 4)

#: The login route: a refusal of it is about the credentials.
AUTHENTICATE: Final = "/v3/auth/authenticate"
#: gRPC status codes the gateway puts in a refusal's ``code`` (what baton decides on).
GRPC_INVALID_ARGUMENT: Final = 3
GRPC_DEADLINE_EXCEEDED: Final = 4
GRPC_PERMISSION_DENIED: Final = 7
GRPC_UNAVAILABLE: Final = 14
GRPC_UNAUTHENTICATED: Final = 16
#: How narrow :meth:`Gateway.calibrate` makes the clock's interval before a store grants
#: anything, probing every ``CALIBRATION_STEP`` seconds for at most ``CALIBRATION_WAIT``.
CLOCK_PRECISION: Final = 0.03
CALIBRATION_STEP: Final = 0.01
CALIBRATION_WAIT: Final = 1.5

JSON = dict[str, Any]


def b64(data: str | bytes) -> str:
    """etcd's gateway carries keys and values as base64 text."""
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: str) -> str:
    """The ``range_end`` that makes a range cover every key starting with ``prefix``: the prefix
    with its last byte incremented (etcd's own ``clientv3.GetPrefixRangeEnd``)."""
    raw = bytearray(prefix.encode())
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        return b64(b"\0")
    raw[-1] += 1
    return b64(bytes(raw))


@dataclass(frozen=True, slots=True)
class Target:
    """What an ``etcd://`` URL names: members, key prefix, credentials and TLS options."""

    endpoints: tuple[str, ...]
    prefix: str
    user: str | None = None
    password: str | None = None
    cacert: str | None = None

    @property
    def display(self) -> str:
        """The URL without its password, fit for messages."""
        user = f"{self.user}:***@" if self.user else ""
        hosts = ",".join(e.split("://", 1)[1] for e in self.endpoints)
        scheme = "etcds" if self.endpoints[0].startswith("https") else "etcd"
        return f"{scheme}://{user}{hosts}{self.prefix}"


def parse_url(url: str) -> Target:
    """Parse ``etcd://[user:password@]host:port[,host:port...]/prefix`` (``etcds://`` for TLS,
    with ``?cacert=/path/ca.pem`` to trust a private CA). A bad URL is a :class:`ConfigError`."""
    scheme, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    hosts_part, slash, path = rest.partition("/")
    user = password = None
    if "@" in hosts_part:
        cred, _, hosts_part = hosts_part.rpartition("@")
        user, _, pw = cred.partition(":")
        user, password = unquote(user) or None, unquote(pw) if pw else None
    hint = "expected etcd://[user:password@]host:port[,host:port...]/prefix"
    endpoints: list[str] = []
    http = "https" if scheme.lower() == "etcds" else "http"
    for host in hosts_part.split(","):
        name, colon, port = host.rpartition(":")
        if not colon or not name or not port.isdigit() or not 0 < int(port) < 65536:
            shown = f"{scheme}://{hosts_part}/{path}"
            raise ConfigError(f"bad etcd URL {shown!r}: bad member {host!r}; {hint}")
        endpoints.append(f"{http}://{name}:{port}")
    prefix = "/" + path.strip("/") if slash and path.strip("/") else "/baton"
    if not prefix.isprintable() or len(prefix) > 256:
        raise ConfigError(f"bad etcd key prefix {prefix!r}: use up to 256 printable characters")
    options = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(options) - {"cacert"})
    if unknown:
        raise ConfigError(
            f"unknown option {unknown[0]!r} in etcd URL: the options are cacert= (and namespace=)"
        )
    cacert = options["cacert"][-1] if "cacert" in options else None
    return Target(tuple(endpoints), prefix, user, password, cacert)


def check_version(endpoint: str, answer: object) -> None:
    """Refuse a server whose ``/version`` answer is not etcd 3.4 or later."""
    found = answer.get("etcdserver") if isinstance(answer, dict) else None
    parts = str(found).split(".") if found else []
    if len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        raise StoreUnavailable(
            f"{endpoint} is not an etcd server (its /version answered {answer!r}); check the "
            "host and the client port (usually 2379) in the store URL"
        )
    if (int(parts[0]), int(parts[1])) < MIN_VERSION:
        raise StoreUnavailable(
            f"etcd at {endpoint} is version {found}: baton needs etcd 3.4 or later (its v3 "
            "API); upgrade the cluster or point the store URL at a newer one"
        )


@functools.cache
def _tls_context(cacert: str | None) -> ssl.SSLContext:
    """One TLS context per CA file for every store of the process: loading a CA bundle takes a
    quarter of a second, too long to pay for each store opened. Plain ``http://`` members get
    none at all."""
    return ssl.create_default_context(cafile=cacert) if cacert else ssl.create_default_context()


class ServerClock:
    """The member's wall clock, learned from the ``Date`` headers of its answers (see the module
    docstring). Times are float seconds since the Unix epoch."""

    def __init__(self) -> None:
        self._lo = -float("inf")
        self._hi = float("inf")
        self._last = 0.0
        self._last_hi = 0.0
        self._observed_at = -float("inf")

    @property
    def uncertainty(self) -> float:
        return self._hi - self._lo

    def observe(self, sent: float, received: float, date: str | None) -> None:
        """Narrow the offset with one answer sent and received at local monotonic times."""
        if not date:
            return
        try:
            stamp = email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            return
        self._observed_at = received
        lo, hi = stamp - received, stamp + 1 - sent
        if lo > self._hi or hi < self._lo:
            # The member's clock was stepped, or another member with another clock answers:
            # start again from this answer.
            self._lo, self._hi = lo, hi
            return
        self._lo, self._hi = max(self._lo, lo), min(self._hi, hi)

    def age(self) -> float:
        """Seconds since the member's last answer."""
        return time.monotonic() - self._observed_at

    def now(self) -> float:
        """The lower end: the member's clock reads at least this now."""
        if self._lo == -float("inf"):
            raise StoreUnavailable("no answer from etcd yet: connect the store first")
        self._last = max(self._last, time.monotonic() + self._lo)
        return self._last

    def latest(self) -> float:
        """The upper end: the member's clock reads at most this now."""
        if self._hi == float("inf"):
            raise StoreUnavailable("no answer from etcd yet: connect the store first")
        self._last_hi = max(self._last_hi, time.monotonic() + self._hi)
        return self._last_hi


#: One clock per member for the whole process (monotonic time is the process's): what one store
#: learned, the next one opened uses at once.
_CLOCKS: dict[str, ServerClock] = {}


def clock_of(endpoint: str) -> ServerClock:
    """The shared clock of the member at ``endpoint``."""
    clock = _CLOCKS.get(endpoint)
    if clock is None:
        clock = _CLOCKS[endpoint] = ServerClock()
    return clock


class Gateway:
    """HTTP to the members of one etcd cluster (see the module docstring)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._current = 0
        self._token: str | None = None
        #: Requests sent (watches aside): what a benchmark counts as round trips.
        self.requests = 0
        verify = _tls_context(target.cacert) if target.endpoints[0].startswith("https") else False
        timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT)
        limits = httpx.Limits(max_connections=MAX_CONNECTIONS)
        self._client = httpx.AsyncClient(timeout=timeout, limits=limits, verify=verify)
        # Watches hold their connection for as long as they watch: a pool of their own, so that
        # they never starve requests.
        self._watch_client = httpx.AsyncClient(
            timeout=httpx.Timeout(CONNECT_TIMEOUT, read=None),
            limits=httpx.Limits(max_connections=None),
            verify=verify,
        )

    @property
    def endpoint(self) -> str:
        return self.target.endpoints[self._current]

    @property
    def clock(self) -> ServerClock:
        """The clock of the member in use."""
        return clock_of(self.endpoint)

    async def aclose(self) -> None:
        for client in (self._client, self._watch_client):
            with contextlib.suppress(httpx.HTTPError, OSError):
                await client.aclose()

    # -- connecting ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Find a member that answers, check it is etcd 3.4+, and log in if the URL says so."""
        errors: list[str] = []
        for i, endpoint in enumerate(self.target.endpoints):
            try:
                res = await self._send("GET", "/version", None, {}, endpoint)
            except httpx.TransportError as exc:
                errors.append(f"{endpoint}: {type(exc).__name__}")
                continue
            try:
                answer = res.json()
            except ValueError:
                answer = res.text[:80]
            check_version(endpoint, answer)
            self._current = i
            break
        else:
            raise StoreUnavailable(
                f"etcd store {self.target.display} unreachable ({'; '.join(errors)}): check "
                "that etcd runs there and that the URL names its client port (usually 2379)"
            )
        if self.target.user:
            await self._login()

    async def _login(self) -> None:
        body = {"name": self.target.user, "password": self.target.password or ""}
        self._token = None
        answer = await self.post(AUTHENTICATE, body, idempotent=True, login=True)
        token = answer.get("token")
        if not isinstance(token, str) or not token:
            raise StoreUnavailable(
                f"etcd store {self.target.display} did not log user {self.target.user!r} in: "
                "check that authentication is enabled (etcdctl auth enable) or drop the user "
                "from the URL"
            )
        self._token = token

    async def calibrate(self) -> None:
        """Narrow the clock to :data:`CLOCK_PRECISION` with probes until one straddles the
        member's next second boundary (at most about a second, once per member and process:
        the clock is shared by every store of the process). Until then an epoch granted by the
        upper end could exceed the member's clock by up to a second, more than a store that
        lost its data may take to come back. Cheap: ``/version`` is served without consensus."""
        deadline = time.monotonic() + CALIBRATION_WAIT
        while self.clock.uncertainty > CLOCK_PRECISION and time.monotonic() < deadline:
            # Best effort: a member that does not answer now is reported by the next request.
            with contextlib.suppress(httpx.HTTPError, OSError):
                await self.request("GET", "/version", None)
            await asyncio.sleep(CALIBRATION_STEP)

    # -- requests ------------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        url: str,
        body: JSON | None,
        headers: Mapping[str, str],
        endpoint: str,
    ) -> httpx.Response:
        sent = time.monotonic()
        res = await self._client.request(method, f"{endpoint}{url}", json=body, headers=headers)
        clock_of(endpoint).observe(sent, time.monotonic(), res.headers.get("date"))
        return res

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._token} if self._token else {}

    async def request(self, method: str, path: str, body: JSON | None) -> httpx.Response:
        self.requests += 1
        return await self._send(method, path, body, self._headers(), self.endpoint)

    async def post(self, path: str, body: JSON, *, idempotent: bool, login: bool = False) -> JSON:
        """POST ``body`` to ``path`` and return the JSON answer. A request that never reached a
        member moves on to the next one; one that may have been applied is retried only when
        ``idempotent``."""
        tries = len(self.target.endpoints) + 1
        for attempt in range(tries):
            try:
                res = await self.request("POST", path, body)
            except httpx.ConnectError as exc:
                self._current = (self._current + 1) % len(self.target.endpoints)
                if attempt + 1 < tries:
                    continue
                raise self.error(path, exc) from exc
            except httpx.TransportError as exc:
                if idempotent and attempt + 1 < tries:
                    continue
                raise self.error(path, exc) from exc
            if res.status_code == 200:
                answer: JSON = res.json()
                return answer
            code, detail = self._detail(res)
            if code == GRPC_UNAUTHENTICATED and not login and self.target.user:
                await self._login()  # the token expired: a refused request was not applied
                continue
            raise self.refused(path, code, detail)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _detail(res: httpx.Response) -> tuple[int | None, str]:
        """The gRPC status code of a refusal (None when the answer has none) and its text,
        for messages only: decisions are made on the code."""
        try:
            answer = res.json()
        except ValueError:
            return None, f"HTTP {res.status_code} {res.text[:120]}"
        if isinstance(answer, dict):
            code = answer.get("code")
            text = str(answer.get("error") or answer.get("message") or answer)
            return (code if isinstance(code, int) else None), text
        return None, str(answer)

    def error(self, what: str, exc: httpx.HTTPError) -> StoreError:
        """Translate a transport failure (the one place httpx errors become baton's)."""
        name = type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            return StoreTimeout(
                f"etcd store {self.target.display} did not answer {what} in time ({name} from "
                f"{self.endpoint}); check the cluster's load and the network"
            )
        return StoreUnavailable(
            f"etcd store {self.target.display} unreachable during {what} ({name} from "
            f"{self.endpoint}): check that etcd runs and is reachable"
        )

    def refused(self, what: str, code: int | None, detail: str) -> StoreError:
        """Translate an error the member answered with, by its gRPC status code. etcd gives
        a refused login and an anonymous request to a cluster with authentication the same
        code (InvalidArgument): which request it was tells them apart."""
        where = f"etcd store {self.target.display} ({self.endpoint})"
        if code == GRPC_INVALID_ARGUMENT and what == AUTHENTICATE:
            return StoreUnavailable(
                f"{where} refused the credentials of user {self.target.user!r}: check the user "
                "and password in the store URL"
            )
        anonymous = code in (GRPC_INVALID_ARGUMENT, GRPC_UNAUTHENTICATED) and not self.target.user
        if anonymous:
            return StoreUnavailable(
                f"{where} requires a login: put user:password@ before the host in the store URL"
            )
        if code == GRPC_PERMISSION_DENIED:
            return StoreUnavailable(
                f"{where} denied {what} to user {self.target.user!r}: grant its role read and "
                f"write on the prefix {self.target.prefix!r}"
            )
        if code in (GRPC_DEADLINE_EXCEEDED, GRPC_UNAVAILABLE):
            return StoreTimeout(f"{where} could not commit {what}: {detail}; retry")
        return StoreUnavailable(f"{where} refused {what}: {detail}")

    # -- watching ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def watch_lines(self, create: JSON) -> AsyncIterator[AsyncIterator[str]]:
        """Open a watch stream and yield its lines; the first is the ``created`` answer."""
        url = f"{self.endpoint}/v3/watch"
        body = {"create_request": create}
        try:
            async with self._watch_client.stream(
                "POST", url, json=body, headers=self._headers()
            ) as res:
                if res.status_code != 200:
                    await res.aread()
                    raise self.refused("watch", *self._detail(res))
                yield res.aiter_lines()
        except httpx.HTTPError as exc:
            error = self.error("watch", exc)
            if isinstance(exc, httpx.ConnectError):
                # This member is gone: the watcher's next attempt goes to the next one.
                self._current = (self._current + 1) % len(self.target.endpoints)
            raise error from exc


class KeyWatch(FeedListener):
    """Wakes a change-feed watcher when etcd reports a write of a key (``range_end``: of any key
    in ``[key, range_end)``), and hands each batch of events to ``on_events`` (None when the
    watch broke or etcd cancelled it)."""

    def __init__(
        self,
        gateway: Gateway,
        key: str,
        range_end: str | None = None,
        on_events: Callable[[list[JSON] | None], None] | None = None,
    ) -> None:
        self._gateway = gateway
        self._key = key
        self._range_end = range_end
        self._on_events = on_events or (lambda events: None)
        self._woken = asyncio.Event()
        self._failure: StoreError | None = None
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the watch and return once etcd confirmed it: no later write can be missed."""
        self._task = asyncio.ensure_future(self._run())
        ready = asyncio.ensure_future(self._ready.wait())
        await asyncio.wait([ready, self._task], return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._failure is not None:
            raise self._failure
        if not self._ready.is_set():
            raise self._broken("closed the watch at once")

    def _broken(self, what: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"etcd store {self._gateway.target.display} ({self._gateway.endpoint}) {what}; "
            "check that the cluster is up"
        )

    async def _run(self) -> None:
        try:
            create = {"key": b64(self._key)}
            if self._range_end is not None:
                create["range_end"] = self._range_end
            async with self._gateway.watch_lines(create) as lines:
                async for line in lines:
                    if not line.strip():
                        continue
                    result = json.loads(line).get("result", {})
                    if result.get("created"):
                        self._ready.set()
                    if result.get("canceled"):
                        self._on_events(None)
                        self._woken.set()
                    elif result.get("events"):
                        self._on_events(result["events"])
                        self._woken.set()
            raise self._broken("ended the watch stream")
        except StoreError as exc:
            self._failure = exc
        except (ValueError, OSError) as exc:
            self._failure = self._broken(f"broke the watch stream ({exc})")
        self._on_events(None)
        self._woken.set()

    async def wait(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.0)):
                await self._woken.wait()
        self._woken.clear()
        if self._failure is not None:
            raise self._failure

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreError):
                await self._task


def txn_ops(ops: Sequence[JSON]) -> list[JSON]:
    """Check the size of one branch of a transaction (etcd's default ``--max-txn-ops``)."""
    if len(ops) > 128:
        raise ConfigError(
            f"an etcd transaction takes at most 128 operations, not {len(ops)}: write fewer "
            "keys at once"
        )
    return list(ops)


__all__ = [
    "Gateway",
    "KeyWatch",
    "ServerClock",
    "Target",
    "b64",
    "check_version",
    "parse_url",
    "prefix_end",
    "txn_ops",
    "unb64",
]
