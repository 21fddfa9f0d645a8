"""The agent's loop watchdog names what held the event loop, and how long."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from baton.local.waiting import wait_for
from baton.node.stall import LoopWatchdog, where


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # a synchronous call on the loop, by mistake


def test_a_held_loop_is_reported_with_where_and_how_long(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()

    async def main() -> None:
        dog = LoopWatchdog(0.2, registry)
        dog.start()
        await asyncio.sleep(0.5)  # beats on time: nothing to report
        hold_the_loop(0.9)
        await asyncio.to_thread(
            wait_for,
            lambda: registry.get_sample_value("baton_event_loop_stall_seconds_count"),
            timeout=5,
            what="the stall reported",
        )
        await dog.stop()

    with caplog.at_level(logging.WARNING, logger="baton.node"):
        asyncio.run(main())
    (record,) = [r for r in caplog.records if r.getMessage() == "event loop stalled"]
    assert "hold_the_loop" in record.where  # type: ignore[attr-defined]
    assert 0.7 <= record.seconds <= 5  # type: ignore[attr-defined]
    assert registry.get_sample_value("baton_event_loop_stall_seconds_count") == 1


def test_where_names_the_innermost_frame_outside_baton() -> None:
    import sys

    frame = sys._getframe()
    assert where(frame).startswith(__file__)
    assert where(None) == "unknown"
