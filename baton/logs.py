"""Structured logs: one ``key=value`` line per event, with the fields baton attaches (node,
election, epoch, reason, ...). Secrets never reach these lines: store URLs are logged redacted."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping

#: Fields every line of this process carries (a node sets its id, role and epoch), computed when
#: the line is written so a role change shows on the very next line.
_context: list[Callable[[], Mapping[str, object]]] = []

#: Standard LogRecord attributes; everything else on a record is a structured field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def describe(exc: BaseException) -> str:
    """``exc`` for an ``error=`` field or a message: ``TypeName: message`` on one line, or just
    ``TypeName`` when the message is empty (``str(TimeoutError())`` is ``""``, and a line
    reading ``error=""`` says nothing about what failed). baton's own messages never hold
    secrets (store URLs are redacted where they are raised)."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _quote(value: object) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class KeyValueFormatter(logging.Formatter):
    """``ts=... level=... logger=... msg="..." key=value ...``"""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [
            f"ts={ts}.{int(record.msecs):03d}Z",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={_quote(record.getMessage())}",
        ]
        fields = {k: v for k, v in vars(record).items() if k not in _STANDARD and k[0] != "_"}
        if _context:
            try:
                extra = _context[0]()
            except Exception:  # a broken context must not lose the line itself
                extra = {}
            fields = {**extra, **fields}
        parts.extend(f"{key}={_quote(value)}" for key, value in fields.items())
        if record.exc_info and record.exc_info[1] is not None:
            # Not the traceback's last line: that is only the end of a multi-line message.
            parts.append(f"error={_quote(describe(record.exc_info[1]))}")
        return " ".join(parts)


def setup(level: int = logging.WARNING) -> None:
    """Send baton's logs to stderr as key=value lines (idempotent)."""
    root = logging.getLogger("baton")
    if any(getattr(h, "_baton", False) for h in root.handlers):
        root.setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    handler._baton = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    # Drivers log through the root logger: give them the same format instead of Python's bare
    # last-resort output. psycopg warns when a cancelled query closes its connection, which is
    # how a store call is abandoned on purpose (a deadline or a stop): not worth a warning.
    logging.getLogger().addHandler(handler)
    logging.getLogger("psycopg").setLevel(logging.ERROR)


def set_context(provider: Callable[[], Mapping[str, object]] | None) -> None:
    """Attach ``provider()``'s fields to every line (fields given on a call take precedence)."""
    _context[:] = [provider] if provider is not None else []
