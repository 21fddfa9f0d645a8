"""The node API fuzzed from its own OpenAPI document (schemathesis) against a real node process:
no request, valid or not, may produce a server error or a response that contradicts the
document. (Driven through hypothesis directly: schemathesis' pytest plugin does not support
pytest 9.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings

from baton.cascade.verbs import VERBS
from baton.local.cluster import LocalCluster

#: The cascade operations: every declared verb is a route (``baton/node/api_cascade.py``;
#: tests/unit/test_verbs.py checks each one's fields).
CASCADE = {f"{'GET' if v.read else 'POST'} /v1/cascade/{v.name}" for v in VERBS}


def _fuzzer(
    op: Any, headers: dict[str, str], examples: int, excluded: list[Any]
) -> Callable[[], None]:
    @given(case=op.as_strategy())
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
        case.call_and_validate(headers=headers, excluded_checks=excluded)

    return fuzz


def test_api_conforms_and_never_fails(tmp_path: Path) -> None:
    with LocalCluster(1, data_dir=tmp_path, ttl=2) as cluster:
        cluster.wait_for(cluster.controller)
        node = cluster.node("n0")
        headers = {"authorization": f"Bearer {cluster.token}"}
        # The document needs the token, as every route but /healthz does.
        schema = schemathesis.openapi.from_url(f"{node.url}/openapi.json", headers=headers)
        operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
        assert {op.label for op in operations} == {
            "GET /healthz", "GET /v1/status", "GET /metrics", "POST /v1/commands",
            "GET /v1/groups", "POST /v1/groups/{object_name}/{partition}/fetch",
            "GET /v1/placement", "POST /v1/channels/subscribe", "GET /v1/channels",
            "GET /v1/channels/cluster", "GET /v1/ui/snapshot",
        } | CASCADE  # fmt: skip
        for op in operations:
            cascade = op.label in CASCADE
            # A well-formed cascade request may still name a node or location that does not
            # exist (400): schemathesis' positive-data check cannot know that from the schema.
            excluded = [schemathesis.checks.positive_data_acceptance] if cascade else []

            fuzz = _fuzzer(op, headers, 25 if cascade else 60, excluded)
            fuzz()
