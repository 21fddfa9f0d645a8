"""The campaign's history: what every client did and saw, one JSON object per line.

Each process appends to a file of its own in the history directory (no locking between
processes, and a killed process loses at most its last, unfinished line). Every record has
``kind``, ``proc`` and ``t`` (the wall clock of the recording process, which a clock fault may
shift: the checker orders side effects by the fenced resource's own sequence, never by ``t``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class History:
    """Append-only records of one process."""

    def __init__(self, directory: Path, proc: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.proc = proc
        self._file = (directory / f"{proc}-{os.getpid()}.jsonl").open("a", buffering=1)

    def record(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "proc": self.proc, "t": time.time(), **fields})
        self._file.write(line + "\n")  # line-buffered: on disk when this returns

    def close(self) -> None:
        self._file.close()


def load(directory: Path) -> list[dict[str, Any]]:
    """Every complete record of every process, in no particular order."""
    out: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # the last line of a process killed while writing it
    return out
