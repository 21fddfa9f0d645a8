"""The clock fence of a promotion (server step 4): the new master is announced only once its
clock is past the last ``TIME`` read on the old master plus one check and one request timeout,
so every fencing epoch it grants is above those the old master granted. Clocks skewed between
Redis hosts are shown here by an old master whose last ``TIME`` lies ahead of the new one's
(redis-server does not run under libfaketime on this machine); the real server answers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from baton.errors import FailoverError
from baton.failover import server as server_module
from baton.failover.config import ServerConfig
from baton.failover.server import ConfigurationServer
from baton.store.master_file import Address, parse_address
from baton.testing.servers import RedisServer


@pytest.fixture
async def fence(redis_server: RedisServer) -> AsyncIterator[tuple[ConfigurationServer, Address]]:
    """A configuration server (checks every 0.2 s, 0.2 s timeout) and the real Redis it would
    promote."""
    new = parse_address(f"127.0.0.1:{redis_server.port}")
    server = ConfigurationServer(ServerConfig([new], {}, check_interval=0.2, request_timeout=0.2))
    try:
        yield server, new
    finally:
        await server.close()


async def test_promotion_waits_for_the_new_master_clock(
    fence: tuple[ConfigurationServer, Address],
) -> None:
    server, new = fence
    now = await server.check(new)
    assert now is not None
    # The old master's clock ran 1 s ahead: the new one must pass it (plus a check and a
    # request timeout) before anything it grants can be above what the old one granted.
    server._last_time = now + 1.0
    await server._clock_fence(new)
    after = await server.check(new)
    assert after is not None and after > now + 1.0 + 0.2 + 0.2


async def test_a_clock_too_far_behind_refuses_the_promotion(
    fence: tuple[ConfigurationServer, Address], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, new = fence
    now = await server.check(new)
    assert now is not None
    server._last_time = now + 3600.0  # an hour ahead: the clocks need fixing, not waiting
    # The fence's patience, shortened: the refusal itself is what is tested.
    monkeypatch.setattr(server_module, "CLOCK_FENCE_LIMIT", 0.5)
    with pytest.raises(FailoverError, match=r"fix the clocks \(NTP\)"):
        await server._clock_fence(new)


async def test_a_server_that_never_saw_the_old_master_says_so(
    fence: tuple[ConfigurationServer, Address], caplog: pytest.LogCaptureFixture
) -> None:
    server, new = fence
    with caplog.at_level("WARNING", logger="baton.failover"):
        await server._clock_fence(new)  # nothing to be above: at once
    assert any("without a clock fence" in r.getMessage() for r in caplog.records)
