"""The key=value log format and the per-process context (node, role, epoch)."""

from __future__ import annotations

import logging

from baton import logs


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
