"""The Grafana dashboard and the alert rules query only series a node agent exports.

Every metric name each panel and each rule queries (:func:`metric_names`, a small PromQL name
extractor) must be a series of a real node agent process's ``/metrics``. That node serves no
cascade member and runs no store-failover server (either would need Spark or Redis servers),
so those families are declared there without samples: the cascade collector's are checked by
the families the node declares (and their samples in ``tests/cascade/test_metrics.py``), the
failover server's against its registry in-process (its samples on a node's ``/metrics`` in
``tests/failover/test_node_roles.py``). ``promtool check rules`` checks the rule file.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from baton.failover.status import Metrics as FailoverMetrics
from baton.local.cluster import LocalCluster

DOCS = Path(__file__).resolve().parents[2] / "docs"
DASHBOARD = DOCS / "grafana" / "baton.json"
ALERTS = DOCS / "alerts.yml"

#: Series Prometheus makes itself for every scrape target, not a node's.
PROMETHEUS_OWN = {"up"}

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan",
}  # fmt: skip
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_BRACES = re.compile(r"\{[^{}]*\}")  # label matchers
_RANGES = re.compile(r"\[[^\[\]]*\]")  # range and subquery durations
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.:$])([A-Za-z_:][\w:]*)\s*(\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` queries: identifiers standing as series (alone, or before
    ``{`` or ``[``), not functions (before ``(``), keywords, label names or Grafana variables."""
    text = _STRINGS.sub('""', expr)
    text = _BRACES.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def test_the_extractor_skips_functions_labels_and_keywords() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, node) (rate(baton_x_bucket{node=~"$node",'
        'route="a{b}"}[5m]))) > on (node) group_left(role) baton_y unless baton_z offset 5m'
        " or vector(0)"
    )
    assert metric_names(expr) == {"baton_x_bucket", "baton_y", "baton_z"}
    assert metric_names("up == 0") == {"up"}


def _dashboard_exprs(node: Any) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            yield node.get("refId", "?"), node["expr"]
        for value in node.values():
            yield from _dashboard_exprs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _dashboard_exprs(value)


def _queries() -> dict[str, str]:
    """Where -> PromQL, for every panel target and every rule."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = {}
    for panel in dashboard["panels"]:
        for ref, expr in _dashboard_exprs(panel.get("targets", [])):
            found[f"panel {panel['title']!r} {ref}"] = expr
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            found[f"rule {rule['alert']}"] = str(rule["expr"])
    return found


def _series(families: Iterable[Any]) -> set[str]:
    """Every name a query may use for ``families``: their samples', and the names a declared
    family without samples will have (a counter's ``_total``, a histogram's ``_bucket``...)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "gauge": ("",),
    }
    names: set[str] = set()
    for family in families:
        names.update(s.name for s in family.samples)
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names


def test_every_panel_and_rule_queries_an_exported_series(tmp_path: Path) -> None:
    queries = _queries()
    assert len(queries) > 40  # the files were read
    assert all(metric_names(expr) for expr in queries.values())
    with LocalCluster(1, data_dir=tmp_path, ttl=2) as cluster:
        cluster.wait_for(cluster.controller)
        text = cluster.node("n0").get("/metrics").text
    exported = _series(text_string_to_metric_families(text))
    failover = generate_latest(FailoverMetrics().registry).decode()
    exported |= _series(text_string_to_metric_families(failover)) | PROMETHEUS_OWN
    missing = {
        where: sorted(metric_names(expr) - exported)
        for where, expr in queries.items()
        if metric_names(expr) - exported
    }
    assert not missing, missing


def test_promtool_accepts_the_rules() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/setup.sh installs it (Debian's prometheus)"
    done = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stdout + done.stderr
