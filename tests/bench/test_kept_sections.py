"""A full ``make bench`` writes docs/benchmarks.md again: the sections below its marker, measured
by commands of their own, are kept; a file without the marker is replaced whole."""

from __future__ import annotations

from pathlib import Path

from bench.run import KEPT, with_kept


def test_a_full_run_keeps_the_sections_below_the_marker(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\nold numbers\n\n{KEPT}\n\n## 18. By hand\n\nkept\n")
    out = with_kept("# Benchmarks\n\nnew numbers\n", doc)
    assert out == f"# Benchmarks\n\nnew numbers\n\n{KEPT}\n\n## 18. By hand\n\nkept\n"
    doc.write_text("# Benchmarks\n\nold numbers\n")
    assert with_kept("new\n", doc) == "new\n"
    assert with_kept("new\n", tmp_path / "missing.md") == "new\n"
