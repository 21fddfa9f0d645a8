"""The node API against a real agent on a real store (SQLite), in process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from prometheus_client.parser import text_string_to_metric_families

from baton.node.agent import NodeAgent
from baton.node.api import build_app
from baton.node.config import NodeConfig, load
from baton.placement.records import create_object, make_object
from baton.placement.view import placement_view
from baton.store import open_store
from baton.testing import await_for
from tests.unit.test_logs import Lines

TOKEN = "cluster-token-0123456789"


def config(tmp_path: Path, node_id: str) -> NodeConfig:
    return load(
        None,
        env={
            "BATON_NODE_ID": node_id,
            "BATON_STORE": f"sqlite://{tmp_path}/store.db",
            "BATON_TOKEN": TOKEN,
            "BATON_DATA_DIR": str(tmp_path),
            "BATON_TTL": "2",
        },
    )


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[NodeAgent]:
    a = NodeAgent(config(tmp_path, "a"))
    await a.start()
    await a.controller.wait_leadership(10)
    yield a
    await a.stop()


def client(agent: NodeAgent, token: str | None = TOKEN) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=build_app(agent))
    return httpx.AsyncClient(transport=transport, base_url="http://node", headers=headers)


async def test_healthz_needs_no_token(agent: NodeAgent) -> None:
    async with client(agent, token=None) as c:
        res = await c.get("/healthz")
    assert res.status_code == 200 and res.json() == {"ok": True, "node": "a"}


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789", TOKEN + "x", ""])
async def test_everything_else_needs_the_token(agent: NodeAgent, token: str | None) -> None:
    async with client(agent, token=token) as c:
        for method, path in (
            ("GET", "/v1/status"), ("GET", "/metrics"), ("POST", "/v1/commands"),
            ("GET", "/openapi.json"),  # it describes every route: not for anyone who asks
        ):  # fmt: skip
            res = await c.request(method, path, json={})
            assert res.status_code == 401, (path, res.text)
            assert TOKEN not in res.text and res.json() == {"detail": "Unauthorized"}
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):  # not served at all
            assert (await c.get(path)).status_code == 404, path


async def test_openapi_document_with_the_token(agent: NodeAgent) -> None:
    async with client(agent) as c:
        res = await c.get("/openapi.json")
    assert res.status_code == 200 and "/v1/status" in res.json()["paths"]
    assert "/openapi.json" not in res.json()["paths"]


async def test_an_unhandled_failure_is_a_counted_and_logged_500(agent: NodeAgent) -> None:
    app = build_app(agent)

    @app.get("/v1/fails")
    async def fails() -> None:
        raise TimeoutError  # str() is "": the log line must still say what failed

    lines = Lines()
    logging.getLogger("baton.api").addHandler(lines)
    transport = httpx.ASGITransport(app=app)
    headers = {"authorization": f"Bearer {TOKEN}"}
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://n", headers=headers
        ) as c:
            res = await c.get("/v1/fails")
            assert res.status_code == 500 and res.json() == {"detail": "internal error"}
            assert res.headers["x-baton-node"] == "a"
            metrics = (await c.get("/metrics")).text
    finally:
        logging.getLogger("baton.api").removeHandler(lines)
    labels = {"node": "a", "method": "GET", "route": "/v1/fails", "status": "500"}
    assert sample(metrics, "baton_http_requests_total", **labels) == 1.0
    [line] = lines.lines
    assert 'msg="request failed"' in line and "route=/v1/fails error=TimeoutError" in line, line


async def test_status_shows_node_controller_and_leases(agent: NodeAgent) -> None:
    async with client(agent) as c:
        body = (await c.get("/v1/status")).json()
    assert body["node"]["id"] == "a" and body["node"]["is_controller"] is True
    assert body["controller"] == {"id": "a", "epoch": agent.controller.epoch}
    assert [n["state"] for n in body["nodes"]] == ["live"]
    # The automatic failover actor's lease too, once its election timeout has passed.
    assert {x["name"] for x in body["leases"]} - {"auto-failover"} == {"controller", "members/a"}


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` with exactly ``labels`` in Prometheus ``text``."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


async def test_metrics_are_prometheus_text(agent: NodeAgent) -> None:
    async with client(agent) as c:
        await c.get("/healthz")
        text = (await c.get("/metrics")).text
    # Every series carries the node; membership and the controller have gauges of their own
    # names, and baton_is_leader stays one release as their alias.
    assert sample(text, "baton_node_member", node="a") == 1.0
    assert sample(text, "baton_controller_leader", node="a") == 1.0
    epoch = sample(text, "baton_leader_epoch", node="a", election="controller")
    assert epoch == float(agent.controller.epoch or -1)
    changes = sample(text, "baton_leader_changes_total", node="a", election="controller")
    assert changes is not None and changes >= 1
    assert sample(text, "baton_is_leader", node="a", election="controller") == 1.0
    assert sample(text, "baton_leaderships_total", node="a", election="membership") == 1.0
    healthz = {"method": "GET", "route": "/healthz", "status": "200"}
    assert sample(text, "baton_http_requests_total", node="a", **healthz) == 1.0
    samples = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert all('node="' in ln for ln in samples), [ln for ln in samples if 'node="' not in ln]


async def test_commands_are_fenced_by_the_store(agent: NodeAgent) -> None:
    epoch = agent.controller.epoch
    assert epoch is not None
    cmd = {"sender": "a", "role": "controller", "command": "noop"}
    async with client(agent) as c:
        ok = await c.post("/v1/commands", json={**cmd, "epoch": epoch})
        assert ok.status_code == 200 and ok.json()["accepted"] is True
        stale = await c.post("/v1/commands", json={**cmd, "epoch": epoch - 1})
        assert stale.status_code == 409 and "stale epoch" in stale.json()["detail"]
        impostor = await c.post("/v1/commands", json={**cmd, "sender": "b", "epoch": epoch})
        assert impostor.status_code == 409
        bad = await c.post("/v1/commands", json={**cmd, "epoch": "x"})
        assert bad.status_code == 422
        # The controller moves on: its old epoch is refused from then on.
        await agent.controller.resign()
        again = await c.post("/v1/commands", json={**cmd, "epoch": epoch})
        assert again.status_code == 409


def test_openapi_matches_the_routes(tmp_path: Path) -> None:
    app = build_app(NodeAgent(config(tmp_path, "z")))
    doc = app.openapi()
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    routed = {
        (m, r.path)
        for r in app.routes
        if isinstance(r, APIRoute) and r.include_in_schema
        for m in r.methods or ()
        if m != "HEAD"
    }
    # FastAPI keeps an included router (the cascade and channel routes) as one private entry of
    # app.routes.
    included = ("/v1/cascade/", "/v1/channels", "/v1/ui/")
    assert {r for r in documented if not r[1].startswith(included)} == routed
    # The dashboard: its page, files and socket are not API operations (not in the document).
    assert {r for r in documented if r[1].startswith("/v1/ui/")} == {("GET", "/v1/ui/snapshot")}
    # The channels' WebSocket is not an HTTP operation, so it is not in the document.
    assert {r for r in documented if r[1].startswith("/v1/channels")} == {
        ("POST", "/v1/channels/subscribe"),
        ("GET", "/v1/channels"),
        ("GET", "/v1/channels/cluster"),
    }
    assert {r for r in documented if r[1].startswith("/v1/cascade/")} == {
        (m, "/v1/cascade/" + name)
        for m, names in {
            "GET": "candidates check fkeys members missing root seqs status tables triggers",
            "POST": "add-table change-provider create-branch create-leaf create-root emit failover "
            "pause remove-table resume resurrect switchover tag-alive tag-dead create-node "
            "add-seq remove-seq execute node-switchover node-failover auto-failover sync "
            "compare repair resync",
        }.items()
        for name in names.split()
    }
    assert routed == {
        ("GET", "/healthz"),
        ("GET", "/v1/status"),
        ("GET", "/metrics"),
        ("POST", "/v1/commands"),
        ("GET", "/v1/groups"),
        ("POST", "/v1/groups/{object_name}/{partition}/fetch"),
        ("GET", "/v1/placement"),
    }


async def test_sync_command_runs_the_group_as_the_store_says(agent: NodeAgent) -> None:
    async with open_store(agent.config.store) as store:
        await create_object(store, make_object("counter", "ctr", 1, 1, spec={"interval": 0.05}))
    epoch = agent.controller.epoch
    assert epoch is not None

    async def group_placed() -> dict[str, Any] | None:
        view = await placement_view(agent.store)
        return view["groups"][0] if view["groups"] else None

    # The controller (this node) writes the group record; it cannot reach its own advertised
    # address here (no HTTP server in process), so the test delivers the sync command.
    group = await await_for(group_placed, timeout=10)
    assert group["members"] == ["a"] and group["leader"] == "a"
    cmd = {"sender": "a", "role": "controller", "epoch": epoch, "command": "sync"}
    async with client(agent) as c:
        stale = await c.post("/v1/commands", json={**cmd, "epoch": epoch - 1, "groups": ["ctr/0"]})
        assert stale.status_code == 409
        assert (await c.get("/v1/groups")).json() == {"node": "a", "groups": []}
        res = await c.post("/v1/commands", json={**cmd, "groups": ["ctr/0"]})
        assert res.status_code == 200, res.text
        report = (await c.get("/v1/groups")).json()["groups"]
        assert [(r["group"], r["role"], r["term"]) for r in report] == [
            ("ctr/0", "leader", group["term"])
        ]
        fetched = await c.post("/v1/groups/ctr/0/fetch", json={"term": group["term"]})
        assert fetched.status_code == 200 and fetched.json()["term"] == group["term"]
        wrong = await c.post("/v1/groups/ctr/0/fetch", json={"term": group["term"] - 1})
        assert wrong.status_code == 409
        assert (await c.post("/v1/groups/nope/0/fetch", json={})).status_code == 409
        bad = await c.post("/v1/commands", json={**cmd, "groups": ["no-partition"]})
        assert bad.status_code == 422
        view = (await c.get("/v1/placement")).json()
        assert view["per_node"] == {"a": {"counter": 1}} and view["leaders"] == {"a": 1}


@pytest.mark.parametrize("path", ["/v1/groups", "/v1/placement"])
async def test_placement_routes_need_the_token(agent: NodeAgent, path: str) -> None:
    async with client(agent, token="wrong-token-0123456789") as c:
        assert (await c.get(path)).status_code == 401
        assert (await c.post("/v1/groups/x/0/fetch", json={})).status_code == 401


async def test_stop_right_after_handing_over_does_not_hang(tmp_path: Path) -> None:
    # The controller hands over (its lease is released: placement's leader-only work is
    # cancelled) and stops at once (its tasks are cancelled too): both cancellations must end
    # the placement task, and the stop must finish and release the membership.
    a, b = NodeAgent(config(tmp_path, "a")), NodeAgent(config(tmp_path, "b"))
    await a.start()
    await a.controller.wait_leadership(10)
    await b.start()
    await a.hand_over_controller()
    await asyncio.wait_for(a.stop(), 5)
    assert not a.membership.is_leader
    await b.controller.wait_leadership(10)
    await b.stop()
