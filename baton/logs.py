"""Structured logs: one ``key=value`` line per event, with the fields baton attaches (node,
election, epoch, reason, ...). Secrets never reach these lines: store URLs are logged redacted."""

from __future__ import annotations

import logging
import sys
import time

#: Standard LogRecord attributes; everything else on a record is a structured field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


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
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                parts.append(f"{key}={_quote(value)}")
        if record.exc_info:
            parts.append(f"error={_quote(self.formatException(record.exc_info).splitlines()[-1])}")
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
