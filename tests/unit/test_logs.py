"""The key=value log format and the per-process context (node, role, epoch)."""

from __future__ import annotations

import logging
import sqlite3
import sys
from pathlib import Path
from typing import Any

from baton import logs
from baton.errors import StoreTimeout
from baton.keys import GROUPS, OBJECTS
from baton.lease.election import Election
from baton.lease.timings import Timings
from baton.placement.records import GroupRecord, ObjectSpec, dump
from baton.placement.runner import Runner
from baton.placement.runner import describe as runner_describe
from baton.placement.workload import load_types
from baton.store import open_store
from baton.testing import await_for


def line(msg: str, **extra: object) -> str:
    record = logging.LogRecord("baton.x", logging.INFO, __file__, 1, msg, None, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return logs.KeyValueFormatter().format(record)


def test_fields_are_quoted_when_needed() -> None:
    out = line("two words", error='bad "x"=1', n=3)
    assert 'msg="two words"' in out and 'error="bad \\"x\\"=1"' in out and " n=3" in out


def test_context_is_on_every_line_and_call_fields_win() -> None:
    role = ["member"]
    logs.set_context(lambda: {"node": "n1", "role": role[0], "epoch": 7})
    try:
        assert "node=n1 role=member epoch=7" in line("hello")
        role[0] = "controller"  # evaluated per line: a role change shows on the next line
        assert "role=controller" in line("hello")
        assert "epoch=9" in line("hello", epoch=9) and "epoch=7" not in line("hello", epoch=9)
    finally:
        logs.set_context(None)
    assert "node=" not in line("hello")


def test_broken_context_keeps_the_line() -> None:
    def broken() -> dict[str, object]:
        raise RuntimeError("boom")

    logs.set_context(broken)
    try:
        assert 'msg="still here"' in line("still here")
    finally:
        logs.set_context(None)


def test_an_error_always_says_what_failed() -> None:
    assert logs.describe(TimeoutError()) == "TimeoutError"
    assert logs.describe(ValueError("no\n  good")) == "ValueError: no good"
    try:
        raise ConnectionError("refused\nDETAIL: twice")
    except ConnectionError:
        record = logging.LogRecord("baton.x", logging.ERROR, __file__, 1, "failed", None, None)
        record.exc_info = sys.exc_info()
    # The whole exception on one line, not the traceback's last line ("DETAIL: twice").
    assert (
        logs.KeyValueFormatter()
        .format(record)
        .endswith('error="ConnectionError: refused DETAIL: twice"')
    )


class Lines(logging.Handler):
    """The formatted lines of one logger (caplog would miss them once logs.setup() stopped
    propagation in this process)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logs.KeyValueFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


async def test_a_renewal_that_times_out_is_logged_as_a_timeout(tmp_path: Path) -> None:
    # A renewal abandoned by its deadline raises a TimeoutError whose str() is "": the line
    # used to read error="". A writer holding the SQLite file locked makes that happen for real.
    timings = Timings.for_ttl(2.0)
    handler = Lines()
    logger = logging.getLogger("baton.election")
    logger.addHandler(handler)
    store = open_store(f"sqlite://{tmp_path / 's.db'}")
    election = Election(store, "job", "a", timings)
    try:
        await election.start()
        await election.wait_leadership(10)
        blocker = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            line = await await_for(
                lambda: next((x for x in handler.lines if 'msg="renewal failed"' in x), None),
                timeout=10,
                what="a failed renewal",
            )
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert line.endswith("error=TimeoutError"), line
    finally:
        logger.removeHandler(handler)
        await election.stop()
        await store.close()


async def _times_out(node: str, group: str, request: dict[str, Any]) -> dict[str, Any]:
    raise TimeoutError  # what a peer call abandoned by its deadline raises: str() is ""


async def test_a_failed_counter_copy_names_the_timeout(tmp_path: Path) -> None:
    # A follower whose fetches from its leader time out: its line used to read error="".
    handler = Lines()
    logger = logging.getLogger("baton.workload")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.DEBUG
    store = open_store(f"sqlite://{tmp_path / 's.db'}")
    runner = Runner(
        "a", store, data_dir=tmp_path, types=load_types(), fetch=_times_out, may_lead=lambda: True
    )
    try:
        await store.put(OBJECTS + "c", dump(ObjectSpec(name="c", type="counter", replicas=2)))
        group = GroupRecord(
            object="c", type="counter", partition=0, members=("a", "b"), leader="b", term=3
        )
        await store.put(GROUPS + group.key, dump(group))
        assert await runner.sync([group.key]) == {}
        line = await await_for(
            lambda: next((x for x in handler.lines if 'msg="counter copy failed"' in x), None),
            timeout=10,
            what="a failed copy",
        )
        assert line.endswith("error=TimeoutError"), line
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        await runner.close()
        await store.close()


def test_a_member_error_names_an_empty_exception() -> None:
    assert runner_describe(TimeoutError()) == "TimeoutError"
    assert runner_describe(StoreTimeout()) == "StoreTimeout"
    assert runner_describe(StoreTimeout("s.db stayed locked")) == "s.db stayed locked"


def test_json_lines_carry_the_same_keys_and_the_context() -> None:
    import json

    logs.set_context(lambda: {"node": "n1", "epoch": 7})
    try:
        record = logging.LogRecord("baton.x", logging.WARNING, "", 0, 'a "quoted" msg', None, None)
        record.n, record.ok = 3, True
        doc = json.loads(logs.JsonFormatter().format(record))
        assert doc["level"] == "warning" and doc["logger"] == "baton.x"
        assert doc["msg"] == 'a "quoted" msg' and doc["ts"].endswith("Z")
        assert (doc["node"], doc["epoch"], doc["n"], doc["ok"]) == ("n1", 7, 3, True)
        assert "level=warning logger=baton.x" in logs.KeyValueFormatter().format(record)
    finally:
        logs.set_context(None)


def test_an_epoch_is_shown_with_the_time_it_holds() -> None:
    from baton.epochs import epoch_text

    assert epoch_text(1795834545355109) == "1795834545355109 (granted 2026-11-28 02:55:45.355 UTC)"
    assert epoch_text(7) == "7"  # a counter (a group's term, a test's epoch) holds no time
