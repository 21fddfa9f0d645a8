"""A cascade node service that keeps failing for the same reason says so again from time to
time: a node stuck for minutes is not silent after its first line."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from baton.local.waiting import wait_for
from baton.service import node as service
from baton.service.node import NodeService


def test_the_same_failure_is_said_again_while_it_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service, "STILL_WAITING", 0.5)
    missing = f"sqlite://{tmp_path / 'gone' / 'n.db'}"  # its directory does not exist
    node = NodeService(missing, epoch=1)
    halt = threading.Event()
    runner = threading.Thread(target=node.run, args=(halt,), daemon=True)

    def said(message: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.getMessage() == message]

    with caplog.at_level(logging.WARNING, logger="baton.cascade"):
        runner.start()
        try:
            wait_for(lambda: said("cascade node service still waits"), timeout=20)
        finally:
            halt.set()
            runner.join(15)
    (first,) = said("cascade node service waits")  # one line for the cause...
    again = said("cascade node service still waits")[0]  # ...then a reminder, with the count
    assert "does not exist" in first.error  # type: ignore[attr-defined]
    assert again.error == first.error  # type: ignore[attr-defined]
    assert again.tries >= 1  # type: ignore[attr-defined]
    assert not runner.is_alive()
