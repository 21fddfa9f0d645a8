"""The report's plots are valid SVG with one mark per sample or series, and bench.run's
progress is plain lines when its output is not a terminal (fake results: no benchmark runs)."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable

import pytest
from rich.console import Console

from bench import run
from bench.cascade_report import lag_svg
from bench.failover import FailoverResult
from bench.report import Results, document, failover_svg

SVG = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def _of_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}{tag}") if e.get("class") == cls]


def test_failover_plot_has_a_dot_per_sample_and_a_p99_per_system() -> None:
    results = [
        FailoverResult("baton/sqlite", ttl=2.0, samples=[1.8, 1.9, 2.0]),
        FailoverResult("baton/redis", ttl=2.0, samples=[1.7, 2.1]),
        FailoverResult("etcd", ttl=2.0, samples=[2.0, 2.2, 2.3, 1.9]),
    ]
    root = _parse(failover_svg(results))
    assert len(_of_class(root, "circle", "sample")) == 9
    assert len(_of_class(root, "line", "mark")) == 3
    labels = "".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert "baton/redis" in labels and "etcd" in labels and "p99" in labels


def _lag(points: list[tuple[float, float]]) -> dict[str, object]:
    lags = [y for _, y in points]
    return {"p50": min(lags), "p99": max(lags), "max": max(lags), "series": points}


def test_cascade_lag_plot_has_a_line_per_system_and_rate() -> None:
    baton = {
        "sqlite, low-latency": {
            "lag": {
                "2000": _lag([(0.0, 0.05), (0.05, 0.04), (0.1, 0.06)]),
                "5000": _lag([(0.0, 0.03), (0.02, 0.05)]),
            }
        }
    }
    londiste = {"lag": {"2000": _lag([(0.0, 0.1), (0.05, 0.12)]), "5000": _lag([(0.0, 0.2)])}}
    root = _parse(lag_svg(baton, londiste))
    lines = _of_class(root, "polyline", "series")
    assert len(lines) == 4  # two systems at two rates
    for line in lines:
        assert len((line.get("points") or "").split()) == int(line.get("data-points") or -1)
    assert [line.get("data-points") for line in lines] == ["3", "2", "2", "1"]
    # Londiste's numbers copied from a report (no series): its p50 and p99 as levels.
    no_series = {"lag": {k: {**v, "series": []} for k, v in londiste["lag"].items()}}
    root = _parse(lag_svg(baton, no_series))
    assert len(_of_class(root, "polyline", "series")) == 2
    assert len(_of_class(root, "line", "level")) == 4


def test_report_links_the_plots_it_was_given() -> None:
    res = Results("quick", "today", "bench", "abc", defaultdict(str))  # any machine
    res.failover = [FailoverResult("etcd", ttl=2.0, samples=[2.0])]
    assert "failover.svg" not in document(res)
    res.plots["failover"] = "failover.svg"
    assert "](failover.svg)" in document(res)


def _jobs(out: list[str]) -> list[tuple[str, Callable[[], None]]]:
    def trial(n: int) -> None:
        run.say(f"trial {n}: 1.234 s [ok]")
        out.append(str(n))

    return [("first", lambda: trial(1)), ("second", lambda: trial(2))]


def test_progress_is_plain_lines_when_not_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "loadavg", lambda: 0.5)
    done: list[str] = []
    res = Results("quick", "today", "bench", "abc", {})
    run.run_jobs(res, _jobs(done), Console(file=io.StringIO()))
    printed = capsys.readouterr().out
    assert done == ["1", "2"] and not res.errors
    assert printed.splitlines() == [
        "--- first (1 of 2) (load 0.50)",
        "trial 1: 1.234 s [ok]",
        "--- second (2 of 2) (load 0.50)",
        "trial 2: 1.234 s [ok]",
    ]
    assert "\x1b" not in printed


def test_progress_on_a_terminal_prints_the_lines_above_its_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(run, "loadavg", lambda: 0.5)
    out = io.StringIO()
    done: list[str] = []
    res = Results("quick", "today", "bench", "abc", {})

    def broken() -> None:
        raise ZeroDivisionError("a benchmark that fails")

    jobs = [*_jobs(done), ("broken", broken)]
    run.run_jobs(res, jobs, Console(file=out, force_terminal=True, width=100))
    text = out.getvalue()
    assert "trial 1: 1.234 s [ok]" in text and "trial 2: 1.234 s [ok]" in text
    assert "3/3" in text  # the bar counted every benchmark, the failed one too
    assert res.errors and res.errors[0].startswith("broken (3 of 3): ZeroDivisionError")
    assert not run._live  # lines are plain again after the bar
