"""Every ```python block of the docs runs, as a reader would paste it (issue 28: the Python API
page's election example raised NotLeader, then an assertion from a task left running after its
store closed). Each block is a whole program, run in a fresh directory by this interpreter; it
must exit 0 with nothing on stderr. A block that cannot run alone (an interface listing, one
that needs a Spark session or a running cluster) says so on the line before it, in an HTML
comment ``<!-- not run: why -->``; the comment is checked to give a reason."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
_BLOCK = re.compile(r"(?:^(<!--[^\n]*-->)\n)?^```python\n(.*?)^```", re.M | re.S)
_NOT_RUN = re.compile(r"<!-- not run: \S.* -->")


def blocks() -> list[tuple[str, str | None, str]]:
    """(where, the comment before it or None, code) for every python block of the docs."""
    out = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        for m in _BLOCK.finditer(text):
            line = text.count("\n", 0, m.start(2))
            out.append((f"{page.name}:{line}", m.group(1), m.group(2)))
    return out


ALL = blocks()


def test_every_python_block_runs_or_says_why_not() -> None:
    assert len(ALL) >= 10, [w for w, _, _ in ALL]
    for where, note, _ in ALL:
        assert note is None or _NOT_RUN.fullmatch(note), f"{where}: {note!r} gives no reason"


@pytest.mark.parametrize(
    "code", [code for _, note, code in ALL if note is None], ids=[w for w, n, _ in ALL if not n]
)
def test_a_doc_block_runs_as_written(code: str, tmp_path: Path) -> None:
    argv = [sys.executable, "-c", code]
    res = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 0 and res.stderr == "", res.stderr[-3000:]
