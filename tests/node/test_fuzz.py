"""The node API fuzzed from its own OpenAPI document (schemathesis) against a real node process:
no request, valid or not, may produce a server error or a response that contradicts the
document. (Driven through hypothesis directly: schemathesis' pytest plugin does not support
pytest 9.)"""

from __future__ import annotations

from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings

from baton.testing.cluster import LocalCluster


def test_api_conforms_and_never_fails(tmp_path: Path) -> None:
    with LocalCluster(1, data_dir=tmp_path, ttl=2) as cluster:
        cluster.wait_for(cluster.controller)
        node = cluster.node("n0")
        schema = schemathesis.openapi.from_url(f"{node.url}/openapi.json")
        headers = {"authorization": f"Bearer {cluster.token}"}
        operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
        assert {op.label for op in operations} == {
            "GET /healthz", "GET /v1/status", "GET /metrics", "POST /v1/commands",
            "GET /v1/groups", "POST /v1/groups/{object_name}/{partition}/fetch",
            "GET /v1/placement",
        }  # fmt: skip
        for op in operations:

            @given(case=op.as_strategy())
            @settings(
                max_examples=60,
                deadline=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            def fuzz(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
                case.call_and_validate(headers=headers)

            fuzz()
