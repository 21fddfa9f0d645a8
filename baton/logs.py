"""Structured logs: one ``key=value`` line per event (or one JSON object: ``--log-format
json``), with the fields baton attaches (node, election, epoch, reason, ...). Secrets never
reach these lines: store URLs are logged redacted."""

from __future__ import annotations

import json
import logging
import os
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


def _fields(record: logging.LogRecord) -> dict[str, object]:
    """The record's structured fields: the process's context first, the call's over them, and
    ``error`` for an exception the record carries."""
    fields = {k: v for k, v in vars(record).items() if k not in _STANDARD and k[0] != "_"}
    if _context:
        try:
            extra = _context[0]()
        except Exception:  # a broken context must not lose the line itself
            extra = {}
        fields = {**extra, **fields}
    if record.exc_info and record.exc_info[1] is not None:
        # Not the traceback's last line: that is only the end of a multi-line message.
        fields["error"] = describe(record.exc_info[1])
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{ts}.{int(record.msecs):03d}Z"


class KeyValueFormatter(logging.Formatter):
    """``ts=... level=... logger=... msg="..." key=value ...``"""

    def format(self, record: logging.LogRecord) -> str:
        parts = [
            f"ts={_timestamp(record)}",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={_quote(record.getMessage())}",
        ]
        parts.extend(f"{key}={_quote(value)}" for key, value in _fields(record).items())
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the same keys as :class:`KeyValueFormatter`'s: ``ts``
    (ISO-8601, UTC), ``level``, ``logger``, ``msg``, then the fields (numbers and booleans
    as themselves, anything else as its text)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in _fields(record).items():
            plain = isinstance(value, (int, float, bool)) or value is None
            doc[key] = value if plain else str(value)
        return json.dumps(doc, ensure_ascii=False)


#: The line formats (``--log-format``, ``BATON_LOG_FORMAT``): key=value (the default), JSON.
FORMATS: dict[str, type[logging.Formatter]] = {"kv": KeyValueFormatter, "json": JsonFormatter}
#: The environment variable that holds the format, so a process baton starts logs alike.
FORMAT_ENV = "BATON_LOG_FORMAT"


def _formatter() -> logging.Formatter:
    return FORMATS.get(os.environ.get(FORMAT_ENV, "kv"), KeyValueFormatter)()


def use_format(name: str) -> None:
    """Write this process's lines, and those of the processes it starts, in format ``name``
    (a key of :data:`FORMATS`; the caller has checked it)."""
    os.environ[FORMAT_ENV] = name
    for handler in logging.getLogger("baton").handlers:
        if getattr(handler, "_baton", False):
            handler.setFormatter(_formatter())


def setup(level: int = logging.WARNING) -> None:
    """Send baton's logs to stderr, one line each, as key=value (or JSON: :func:`use_format`)
    (idempotent)."""
    root = logging.getLogger("baton")
    if any(getattr(h, "_baton", False) for h in root.handlers):
        root.setLevel(level)
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_formatter())
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
