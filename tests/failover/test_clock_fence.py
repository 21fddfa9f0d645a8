"""The clock fence of a promotion (server step 4): the new master is announced only once its
clock is past the last ``TIME`` read on the old master plus one check and one request timeout,
so every fencing epoch it grants is above those the old master granted. Clocks skewed between
Redis hosts are shown here by an old master whose last ``TIME`` lies ahead of the new one's
(redis-server does not run under libfaketime on this machine); the real server answers."""

from __future__ import annotations

import pytest

from baton.errors import FailoverError
from baton.failover import server as server_module
from baton.failover.config import ServerConfig
from baton.failover.server import ConfigurationServer
from baton.store.master_file import parse_address
from baton.testing.servers import RedisServer


async def test_promotion_waits_for_the_new_master_clock(redis_server: RedisServer) -> None:
    new = parse_address(f"127.0.0.1:{redis_server.port}")
    config = ServerConfig([new], {}, check_interval=0.2, request_timeout=0.2)
    server = ConfigurationServer(config)
    try:
        now = await server.check(new)
        assert now is not None
        # The old master's clock ran 1 s ahead: the new one must pass it (plus a check and a
        # request timeout) before anything it grants can be above what the old one granted.
        server._last_time = now + 1.0
        await server._clock_fence(new)
        after = await server.check(new)
        assert after is not None and after > now + 1.0 + 0.2 + 0.2
    finally:
        await server.close()


async def test_a_clock_too_far_behind_refuses_the_promotion(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = parse_address(f"127.0.0.1:{redis_server.port}")
    server = ConfigurationServer(ServerConfig([new], {}, request_timeout=0.2))
    try:
        now = await server.check(new)
        assert now is not None
        server._last_time = now + 3600.0  # an hour ahead: the clocks need fixing, not waiting
        # The fence's patience, shortened: the refusal itself is what is tested.
        monkeypatch.setattr(server_module, "CLOCK_FENCE_LIMIT", 0.5)
        with pytest.raises(FailoverError, match=r"fix the clocks \(NTP\)"):
            await server._clock_fence(new)
    finally:
        await server.close()


async def test_a_server_that_never_saw_the_old_master_says_so(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    new = parse_address(f"127.0.0.1:{redis_server.port}")
    server = ConfigurationServer(ServerConfig([new], {}, request_timeout=0.2))
    try:
        with caplog.at_level("WARNING", logger="baton.failover"):
            await server._clock_fence(new)  # nothing to be above: at once
        assert any("without a clock fence" in r.getMessage() for r in caplog.records)
    finally:
        await server.close()
