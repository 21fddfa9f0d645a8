"""Store failover as a state machine (issue 27): configuration servers and clients made of the
pure rules in :mod:`baton.failover.decide`, over a model of three Redis servers, checked by
hypothesis under every interleaving it finds.

Each configuration server is a generator that mirrors :class:`~baton.failover.server.
ConfigurationServer` (check, round, periodic reconfigure, discovery, takeover of a quiet
round); each ``yield`` is a point where anything else may happen: another server's message,
a master killed or started again with or without its data, a client restarted, a server
killed in the middle of its round (and started again with nothing remembered). Messages of
several servers therefore arrive interleaved and late. After every step:

* the master files of all clients never name two different masters at once, a client names
  another master only through a round it confirmed since, and its confirmed round only grows;
* once faults stop and every client answers (``settle``), the rounds end with exactly one
  master, every file naming it and every other server its replica: a master kill always leads
  to a failover, a returning old master always becomes a replica.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from baton.failover.decide import (
    Answer,
    ClientReport,
    ClientState,
    Decision,
    RoundOutlook,
    ServerInfo,
    Token,
    believed_master,
    choose_replica,
    first_master,
    on_hold,
    on_invalidate,
    on_ping,
    on_reconfigure,
    round_outlook,
)
from baton.store.master_file import Address

REDIS = [Address("r", i) for i in range(3)]
CLIENTS = ["a", "b", "c"]
SERVERS = ["s1", "s2", "s3"]
CHECK, RETRIES, PERIOD, TIMEOUT = 0.1, 2, 0.3, 0.3
QUIET = 3 * CHECK + 2 * TIMEOUT  # ConfigurationServer.quiet_limit


@dataclass
class Redis:
    alive: bool = True
    master_of: Address | None = None
    token: Token | None = None
    data: bool = True
    synced: bool = True

    @property
    def role(self) -> str:
        return "master" if self.master_of is None else "slave"


@dataclass
class Client:
    state: ClientState = field(default_factory=ClientState)
    file: Address | None = REDIS[0]
    up: bool = True
    heard: float = 0.0


@dataclass
class Reply:
    answer: Answer | None
    report: ClientReport | None


class World:
    def __init__(self) -> None:
        self.now = 0.0
        self.redis = {a: Redis(master_of=None if a == REDIS[0] else REDIS[0]) for a in REDIS}
        self.clients = {c: Client() for c in CLIENTS}

    def answers(self, a: Address) -> bool:
        return self.redis[a].alive

    def info(self, a: Address) -> ServerInfo:
        r = self.redis[a]
        if not r.alive:
            return ServerInfo(a, reachable=False)
        return ServerInfo(
            a, True, r.role, offset=0, master_of=r.master_of, link_up=r.master_of is not None,
            token=r.token, keys=1 if r.data else 0, synced=r.synced,
        )  # fmt: skip

    def replicate(self, a: Address, master: Address) -> None:
        r, m = self.redis[a], self.redis[master]
        if not r.alive:
            return
        r.master_of = master
        if m.alive and m.master_of is None:  # a full sync: the master's data and token
            r.token, r.data, r.synced = m.token, m.data, True

    def report(self, cid: str) -> ClientReport:
        c = self.clients[cid]
        quiet = self.now - c.heard if c.state.invalidated_in is not None else 0.0
        return ClientReport(c.state, c.file, quiet)

    def deliver(self, cid: str, kind: str, token: Token, body: dict[str, object]) -> Reply:
        """One message, answered as :class:`~baton.failover.client.ConfigurationClient`
        answers it (the old master checked from the client's host)."""
        c = self.clients[cid]
        if not c.up:
            return Reply(None, None)
        old = body.get("old")
        check = bool(body.get("check")) and isinstance(old, Address)
        old_answers = self.answers(old) if check and isinstance(old, Address) else None
        d: Decision
        if kind == "ping":
            d = on_ping(c.state, token, old_answers)
        elif kind == "invalidate":
            d = on_invalidate(c.state, token, old_answers)
        elif kind == "hold":
            d = on_hold(c.state, token)
        else:
            master = body["master"]
            assert isinstance(master, Address)
            d = on_reconfigure(c.state, token, master, c.file)
        if d.write:
            c.file = d.master
        if d.state.invalidated_in is not None and d.state.invalidated_in == token:
            c.heard = self.now
        c.state = d.state
        return Reply(d.answer, self.report(cid))


Steps = Generator[None, None, bool]


class Server:
    """A configuration server's loop as a generator (see the module's docstring)."""

    def __init__(self, world: World, sid: str) -> None:
        self.w, self.sid = world, sid
        self.generation = 0
        self.master: Address | None = None
        self.token: Token | None = None
        self.failures = 0
        self.next_periodic = 0.0
        self.next_round = 0.0
        self.holding: Token | None = None
        self.next_hold = 0.0
        self.loop = self._run()

    def step(self) -> None:
        """Run to the next point where the world may change."""
        if self.holding is not None and self.w.now >= self.next_hold:
            self.next_hold = self.w.now + CHECK
            for cid in CLIENTS:
                self.w.deliver(cid, "hold", self.holding, {})
        next(self.loop)

    def _run(self) -> Generator[None, None, None]:
        while True:
            yield from self.tick()
            yield

    def _token(self) -> Token:
        self.generation += 1
        return Token(self.generation, self.sid)

    def _learn(self, replies: list[Reply]) -> Token | None:
        tokens = [r.report.state.highest for r in replies if r.report and r.report.state.highest]
        highest = max(tokens, default=None)
        if highest is not None:
            self.generation = max(self.generation, highest.generation)
        return highest

    def broadcast(self, kind: str, token: Token, body: dict[str, object]) -> Generator[
        None, None, list[Reply]
    ]:  # fmt: skip
        out = []
        for cid in CLIENTS:
            yield  # messages of other servers may come first
            out.append(self.w.deliver(cid, kind, token, body))
        return out

    def discover(self) -> Generator[None, None, None]:
        yield
        reports = [self.w.report(c) for c in CLIENTS if self.w.clients[c].up]
        for r in reports:
            for t in (r.state.highest, r.state.confirmed):
                if t is not None:
                    self.generation = max(self.generation, t.generation)
        infos = [self.w.info(a) for a in REDIS]
        for i in infos:
            if i.token is not None:
                self.generation = max(self.generation, i.token.generation)
        believed = believed_master(reports)
        if believed is not None:
            self.master, self.token = believed
            return
        first = first_master(infos, reports)
        if first is not None:
            self.master, self.token = first, None

    def tick(self) -> Generator[None, None, None]:
        if self.master is None:
            yield from self.discover()
            if self.master is None:
                return
        master = self.master
        if self.w.answers(master):
            self.failures = 0
            if self.token is None:
                yield from self.establish(master)
            if self.w.now >= self.next_periodic:
                self.next_periodic = self.w.now + PERIOD
                yield from self.periodic()
            return
        self.failures += 1
        if self.failures > RETRIES and self.w.now >= self.next_round:
            done = yield from self.round(old=master, check=True)
            if not done:
                self.next_round = self.w.now + PERIOD
                yield from self.discover()

    def establish(self, master: Address) -> Generator[None, None, None]:
        reports = [self.w.report(c) for c in CLIENTS if self.w.clients[c].up]
        if not reports:
            return
        if believed_master(reports) is not None:
            yield from self.discover()
            return
        token = self._token()
        yield
        r = self.w.redis[master]
        if r.alive:
            if r.token is None or token > r.token:
                r.token = token
            self.token = r.token

    def periodic(self) -> Generator[None, None, None]:
        master, token = self.master, self.token
        if master is None or token is None:
            return
        replies = yield from self.broadcast("reconfigure", token, {"master": master})
        self._learn(replies)
        reports = [r.report for r in replies if r.report is not None]
        believed = believed_master(reports)
        if believed is not None and believed[1] > token:
            event("a newer confirmed round adopted")
            self.master, self.token = believed
            self.failures, self.next_periodic = 0, 0.0
            return
        outlook = round_outlook(reports, token, QUIET)
        if outlook is RoundOutlook.ABANDONED:
            event("a quiet round taken over")
            yield from self.round(old=None, check=False, new=master)
            return
        if outlook is RoundOutlook.UNDER_WAY:
            self.next_periodic = self.w.now + CHECK
            return
        if all(r.answer == Answer.RECONFIGURED for r in replies):
            for a in REDIS:
                yield
                info = self.w.info(a)
                if a == master or not info.reachable:
                    continue
                if info.role == "master" and info.token is not None and info.token > token:
                    continue
                if info.role == "master" or info.master_of != master:
                    self.w.replicate(a, master)

    def round(self, *, old: Address | None, check: bool, new: Address | None = None) -> Steps:
        token = self._token()
        body: dict[str, object] = {"old": old, "check": check}
        replies = yield from self.broadcast("ping", token, body)
        self._learn(replies)
        if not all(r.answer == Answer.PONG for r in replies):
            return False
        replies = yield from self.broadcast("invalidate", token, body)
        self._learn(replies)
        if not all(r.answer == Answer.INVALIDATED for r in replies):
            return False
        self.holding, self.next_hold = token, self.w.now + CHECK
        try:
            yield
            if new is None:
                chosen = choose_replica([self.w.info(a) for a in REDIS], old)
                if chosen is None:
                    return False
                new = chosen.address
            r = self.w.redis[new]
            if not r.alive:
                return False
            r.master_of = None
            if r.token is None or token > r.token:
                r.token = token
            yield
            replies = yield from self.broadcast("reconfigure", token, {**body, "master": new})
        finally:
            self.holding = None
        highest = self._learn(replies)
        overtaken = highest is not None and highest > token
        if overtaken and not any(r.answer == Answer.RECONFIGURED for r in replies):
            event("a round overtaken")
            yield from self.discover()
            return False
        self.master, self.token, self.failures = new, token, 0
        event(f"a round switched (check={check})")
        for a in REDIS:
            if a != new:
                yield
                self.w.replicate(a, new)
        self.next_periodic = self.w.now + PERIOD
        return True


@settings(
    max_examples=150, stateful_step_count=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
class FailoverModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.w = World()
        self.servers: dict[str, Server | None] = {"s1": Server(self.w, "s1"), "s2": None}
        self.confirmed: dict[str, Token | None] = dict.fromkeys(CLIENTS)
        #: Each client's last non-empty file and the round it had confirmed then.
        self.had: dict[str, tuple[Address, Token | None]] = {c: (REDIS[0], None) for c in CLIENTS}

    # -- the servers' work, and time -------------------------------------------------------

    @rule(
        sid=st.sampled_from(SERVERS),
        steps=st.integers(1, 40),
        dt=st.sampled_from([0.0, 0.05, 0.1, 0.3]),
    )
    def run_server(self, sid: str, steps: int, dt: float) -> None:
        server = self.servers.get(sid)
        if server is None:
            return
        self.w.now += dt
        for _ in range(steps):
            server.step()
            self._check_files()

    # -- faults ------------------------------------------------------------------------------

    @rule(i=st.integers(0, 2))
    def kill_redis(self, i: int) -> None:
        self.w.redis[REDIS[i]].alive = False

    @rule(i=st.integers(0, 2), with_data=st.booleans())
    def start_redis(self, i: int, with_data: bool) -> None:
        r = self.w.redis[REDIS[i]]
        if r.alive:
            return
        # Started again, it is a master of what it has (REPLICAOF is not kept on disk).
        keep = with_data and r.data
        self.w.redis[REDIS[i]] = Redis(
            master_of=None, token=r.token if keep else None, data=keep, synced=keep
        )

    @rule(sid=st.sampled_from(SERVERS))
    def kill_server(self, sid: str) -> None:
        self.servers[sid] = None  # wherever its round was: nothing of it remembered

    @rule(sid=st.sampled_from(SERVERS))
    def start_server(self, sid: str) -> None:
        if self.servers.get(sid) is None:
            self.servers[sid] = Server(self.w, sid)

    @rule(cid=st.sampled_from(CLIENTS))
    def restart_client(self, cid: str) -> None:
        """Its state and file are on disk; the start-up check of ConfigurationClient."""
        c = self.w.clients[cid]
        c.up, c.heard = True, self.w.now
        named_a_replica = c.file is not None and self.w.info(c.file).role == "slave"
        if c.state.invalidated_in is not None or named_a_replica:
            c.file = None

    @rule(cid=st.sampled_from(CLIENTS))
    def client_down(self, cid: str) -> None:
        self.w.clients[cid].up = False

    # -- the checks --------------------------------------------------------------------------

    def _check_files(self) -> None:
        named = {c.file for c in self.w.clients.values() if c.file is not None}
        assert len(named) <= 1, f"the clients' files name {named} at once"
        for cid, c in self.w.clients.items():
            before = self.confirmed[cid]
            if before is not None:
                assert c.state.confirmed is not None and c.state.confirmed >= before
            self.confirmed[cid] = c.state.confirmed
            if c.file is not None:
                master, round_ = self.had[cid]
                # A client names another master only through a round it confirmed since.
                assert c.file == master or c.state.confirmed != round_, (cid, master, c.file)
                self.had[cid] = (c.file, c.state.confirmed)

    @invariant()
    def files_never_name_two_masters(self) -> None:
        self._check_files()

    @rule()
    def settle(self) -> None:
        """Faults stop: every client answers, one configuration server at least runs, and a
        Redis server that holds data answers (when none does, the dead ones start again with
        theirs). The rounds must then end with one
        master, every file naming it and every other server following it."""
        for c in self.w.clients.values():
            c.up = True
        if not any(not self.w.info(a).holds_nothing for a in REDIS if self.w.redis[a].alive):
            for i, a in enumerate(REDIS):
                if not self.w.redis[a].alive:
                    self.start_redis(i, with_data=True)
        if not any(self.servers.values()):
            self.servers["s1"] = Server(self.w, "s1")
        running = [s for s in self.servers.values() if s is not None]
        for _ in range(3000):
            if self._settled():
                return
            self.w.now += 0.02
            for s in running:
                s.step()
                self._check_files()
        raise AssertionError(f"no settling: {self._describe()}")

    def _settled(self) -> bool:
        masters = [a for a, r in self.w.redis.items() if r.alive and r.role == "master"]
        if len(masters) != 1:
            return False
        m = masters[0]
        return all(c.file == m for c in self.w.clients.values()) and all(
            r.master_of == m for a, r in self.w.redis.items() if a != m and r.alive
        )

    def _describe(self) -> str:
        redis = {a.port: dataclasses.astuple(r) for a, r in self.w.redis.items()}
        clients = {k: (c.file, c.state) for k, c in self.w.clients.items()}
        servers = {
            k: (s.master, s.token, s.holding) for k, s in self.servers.items() if s is not None
        }
        return f"redis={redis} clients={clients} servers={servers}"


TestFailoverModel = FailoverModel.TestCase
