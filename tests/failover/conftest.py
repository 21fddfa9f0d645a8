"""Fixtures of the store-failover tests: the roles a test started are stopped after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from baton.testing.failover import ClientRole, ServerRole


@pytest.fixture
def procs() -> Iterator[list[ClientRole | ServerRole]]:
    """Append every client and server role started; each is stopped after the test."""
    started: list[ClientRole | ServerRole] = []
    yield started
    for p in started:
        p.proc.stop()
