"""Property-based tests: at most one holder per lease and strictly increasing epochs, over random
operation sequences.

On SQLite the store clock is injected, so hypothesis can move time exactly (expiries included)
without waiting. On Redis and PostgreSQL the real server clock runs; sequences there use short
ttls and real time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from baton.store import Lease, open_store
from baton.store.sqlite import SQLiteStore
from tests.conftest import Backend

NAMES = st.sampled_from(["a", "b"])
HOLDERS = st.sampled_from(["h1", "h2", "h3"])
T = TypeVar("T")


@dataclass
class Clock:
    t: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Model:
    """What the clients know: the leases they were granted and every epoch ever granted."""

    leases: dict[tuple[str, str], Lease] = field(default_factory=dict)
    epochs: dict[str, list[int]] = field(default_factory=dict)

    def valid(self, name: str, now: float) -> list[Lease]:
        return [x for (n, _h), x in self.leases.items() if n == name and x.expires_at > now]


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = Clock()
        path = Path(f"/tmp/baton-prop-{uuid.uuid4().hex}.db")
        self.path = path
        self.store = SQLiteStore(str(path), clock=self.clock)
        self.run(self.store.connect())
        self.model = Model()

    def run(self, aw: Awaitable[T]) -> T:
        return self.loop.run_until_complete(aw)

    @rule(name=NAMES, holder=HOLDERS, ttl=st.sampled_from([0.5, 1.0, 3.0]))
    def acquire(self, name: str, holder: str, ttl: float) -> None:
        lease = self.run(self.store.acquire(name, holder, ttl))
        if lease is None:
            return
        # Nobody else may hold a lease of this name that is still valid by the store clock.
        others = [x for x in self.model.valid(name, self.clock.t) if x.epoch != lease.epoch]
        assert others == [], f"two holders of {name}: {others} and {lease}"
        history = self.model.epochs.setdefault(name, [])
        assert not history or lease.epoch > history[-1], (history, lease.epoch)
        history.append(lease.epoch)
        self.model.leases[(name, holder)] = lease

    @precondition(lambda self: bool(self.model.leases))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.model.leases)))
        lease = self.model.leases[key]
        renewed = self.run(self.store.renew(lease.holder, [lease]))[lease.name]
        if renewed is None:
            assert lease.expires_at <= self.clock.t or lease not in self.model.valid(
                lease.name, self.clock.t
            )
            del self.model.leases[key]
        else:
            assert lease.expires_at > self.clock.t, "renewed an expired lease"
            assert renewed.epoch == lease.epoch
            self.model.leases[key] = renewed

    @precondition(lambda self: bool(self.model.leases))
    @rule(data=st.data(), successor=st.none() | HOLDERS)
    def release(self, data: st.DataObject, successor: str | None) -> None:
        key = data.draw(st.sampled_from(sorted(self.model.leases)))
        lease = self.model.leases.pop(key)
        released = self.run(self.store.release(lease, successor=successor))
        assert released == (lease.expires_at > self.clock.t)

    @rule(dt=st.sampled_from([0.1, 0.4, 1.0, 2.5]))
    def advance(self, dt: float) -> None:
        self.clock.t += dt

    @rule()
    def expire(self) -> None:
        self.run(self.store.expire_due())

    @invariant()
    def store_agrees_with_the_one_valid_lease(self) -> None:
        for name in ("a", "b"):
            current = self.run(self.store.get_lease(name))
            valid = self.model.valid(name, self.clock.t)
            assert len(valid) <= 1
            if current is not None:
                assert valid == [current] or (valid and valid[0].epoch == current.epoch)
            else:
                assert valid == []

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


TestLeaseMachine = LeaseMachine.TestCase
TestLeaseMachine.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, derandomize=True
)

OPS = st.lists(
    st.tuples(st.sampled_from(["acquire", "release", "renew"]), HOLDERS), min_size=1, max_size=25
)


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_random_sequences_on_every_backend(backend: Backend, ops: list[tuple[str, str]]) -> None:
    """Real clocks: the same two properties on Redis and PostgreSQL as on SQLite."""
    url = backend.url.rsplit("namespace=", 1)[0] + f"namespace=p{uuid.uuid4().hex[:10]}"

    async def go() -> None:
        async with open_store(url) as store:
            held: dict[str, Lease] = {}
            epochs: list[int] = []
            for op, holder in ops:
                if op == "acquire":
                    lease = await store.acquire("x", holder, 0.3)
                    if lease is not None:
                        now = await store.now()
                        assert all(x.expires_at <= now for x in held.values()), "two holders"
                        assert not epochs or lease.epoch > epochs[-1]
                        epochs.append(lease.epoch)
                        held = {holder: lease}
                elif holder in held:
                    if op == "release":
                        await store.release(held.pop(holder))
                    else:
                        renewed = (await store.renew(holder, [held[holder]]))["x"]
                        if renewed is None:
                            held.pop(holder)
                        else:
                            assert renewed.epoch == held[holder].epoch
                            held[holder] = renewed
                current = await store.get_lease("x")
                if current is not None:
                    assert current.epoch == epochs[-1]

    asyncio.run(go())
