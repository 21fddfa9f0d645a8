"""Bad input on the channel WebSocket of a real node process: each kind gets one clear code and
a one-line reason, closes only what it must (the connection, or just the subscription), and
leaves every other subscriber receiving. Then the protocol fuzzed with hypothesis, against the
frame parser and against the node."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from baton.channels.client import ws_url
from baton.channels.protocol import frames, parse_frame
from baton.errors import BadFrame
from baton.local.cluster import LocalCluster
from baton.local.waiting import wait_for
from baton.testing.channels import Subscriber

HEALTHY = "tick:healthy,every=0.05"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Subscriber]]:
    tmp = tmp_path_factory.mktemp("channels-protocol")
    with LocalCluster(1, None, tmp, ttl=2) as c:
        wait_for(lambda: c.states() == {"n0": "live"}, timeout=30)
        # A subscriber that must keep receiving through every bad input below.
        with Subscriber([c.node("n0").url], c.token, HEALTHY) as healthy:
            wait_for(healthy.pubs, what="the healthy subscriber")
            yield c, healthy


async def _talk(
    c: LocalCluster, frames: list[str | bytes], token: str | None, wait: float = 5.0
) -> tuple[list[dict[str, Any]], int | None, str]:
    """Send ``frames``; collect what comes back until the node closes or goes quiet."""
    headers = {"authorization": f"Bearer {token}"} if token is not None else {}
    got: list[dict[str, Any]] = []
    async with connect(ws_url(c.node("n0").url), additional_headers=headers) as ws:
        try:
            for frame in frames:
                await ws.send(frame)
        except ConnectionClosed as exc:  # closed already (a wrong token in the header)
            rcvd = exc.rcvd
            return got, rcvd.code if rcvd else None, rcvd.reason if rcvd else ""
        return await _collect(ws, got, wait)


async def _collect(
    ws: ClientConnection, got: list[dict[str, Any]], wait: float
) -> tuple[list[dict[str, Any]], int | None, str]:
    try:
        while True:
            got.extend(frames(await asyncio.wait_for(ws.recv(), wait)))
            if any(f["type"] == "unsubscribed" for f in got):
                return got, None, ""
    except ConnectionClosed as exc:
        rcvd = exc.rcvd
        return got, rcvd.code if rcvd else None, rcvd.reason if rcvd else ""
    except TimeoutError:
        return got, None, ""


def sub(channel: object) -> str:
    return json.dumps({"type": "subscribe", "channel": channel})


CLOSES = [
    # (what, frames, token, close code, reason fragment)
    ("wrong token", [sub("tick:a")], "not-the-token-at-all", 4001, "unauthorized"),
    ("no token", [sub("tick:a")], None, 4001, "unauthorized"),
    ("bad JSON", ['{"type": "subscribe", '], "TOKEN", 4000, "not valid JSON"),
    ("not an object", ["[1, 2]"], "TOKEN", 4000, "JSON object"),
    ("unknown type", ['{"type": "dance"}'], "TOKEN", 4000, "unknown type"),
    ("binary", [b'{"type": "subscribe"}'], "TOKEN", 4000, "text frames"),
    ("oversized", ["x" * 70_000], "TOKEN", 1009, "exceeds the limit"),
    ("bad since", ['{"type":"subscribe","channel":"tick:a","since":{"epoch":-1,"offset":0}}'],
     "TOKEN", 4000, "since.epoch"),
]  # fmt: skip

REFUSALS = [
    # (what, channel, unsubscribed code, reason fragment)
    ("malformed channel", "no-colon", 4400, "malformed channel"),
    ("bad path", "tick:a b", 4400, "malformed channel"),
    ("unknown namespace", "nope:thing", 4404, "unknown namespace 'nope'"),
    ("refused by the handler", "tick:x,deny=1", 4403, "refuses subscribers"),
    ("unknown tick option", "tick:x,speed=3", 4400, "unknown tick option"),
]


@pytest.mark.parametrize("case", CLOSES, ids=[x[0] for x in CLOSES])
def test_bad_input_closes_the_connection(
    node: tuple[LocalCluster, Subscriber],
    case: tuple[str, list[str | bytes], str | None, int, str],
) -> None:
    what, frames, token, code, needle = case
    c, healthy = node
    given_token = c.token if token == "TOKEN" else token
    before = len(healthy.pubs())
    got, closed, reason = asyncio.run(_talk(c, frames, given_token))
    assert closed == code, (what, got, closed, reason)
    assert needle in reason and "\n" not in reason and len(reason.encode()) <= 123
    assert c.token not in reason
    assert not [m for m in got if m["type"] in ("subscribed", "pub")]
    # Nothing else affected: the healthy subscriber keeps receiving.
    wait_for(lambda: len(healthy.pubs()) > before, what="the healthy subscriber to go on")


@pytest.mark.parametrize(
    ("what", "channel", "code", "needle"), REFUSALS, ids=[x[0] for x in REFUSALS]
)
def test_bad_subscribe_closes_only_that_subscription(
    node: tuple[LocalCluster, Subscriber], what: str, channel: str, code: int, needle: str
) -> None:
    c, _ = node

    async def go() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        headers = {"authorization": f"Bearer {c.token}"}
        async with connect(ws_url(c.node("n0").url), additional_headers=headers) as ws:
            await ws.send(sub(HEALTHY))
            await ws.send(sub(channel))
            refusal = None
            after: list[dict[str, Any]] = []
            while refusal is None or len(after) < 3:
                for frame in frames(await asyncio.wait_for(ws.recv(), 10)):
                    if frame["type"] == "unsubscribed":
                        refusal = frame
                    elif refusal is not None and frame["type"] == "pub":
                        after.append(frame)
            return refusal, after

    refusal, after = asyncio.run(go())
    assert refusal["channel"] == channel and refusal["code"] == code, refusal
    assert needle in refusal["reason"] and "\n" not in refusal["reason"]
    # The same connection's other subscription goes on.
    assert all(f["channel"] == HEALTHY for f in after)
    assert [f["offset"] for f in after] == sorted({f["offset"] for f in after})


# -- hypothesis -----------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
CHANNELS = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["tick:f", "tick:f,every=0.5", "nope:x", "tick:", ":x", "tick:x,deny=1"]),
)
FRAMES = st.one_of(
    st.text(max_size=200),
    JSON.map(json.dumps),
    st.builds(
        lambda kind, channel, extra: json.dumps({"type": kind, "channel": channel, **extra}),
        st.sampled_from(["subscribe", "unsubscribe", "publish", "auth", "x"]),
        CHANNELS | JSON,
        st.dictionaries(
            st.sampled_from(["since", "data", "relay", "token", "node"]), JSON, max_size=2
        ),
    ),
)


@given(FRAMES)
@settings(max_examples=150, deadline=None)
def test_parser_accepts_or_refuses_with_a_code(raw: str) -> None:
    try:
        parse_frame(raw)
    except BadFrame as exc:
        assert exc.code in (4000, 1009)
        assert exc.reason and "\n" not in exc.reason


ALLOWED_CLOSES = {4000, 4001, 1009}
ALLOWED_UNSUBS = {4400, 4403, 4404, 4503, 1000}


@given(st.lists(FRAMES, min_size=1, max_size=3))
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_node_survives_any_frames(node: tuple[LocalCluster, Subscriber], frames: list[str]) -> None:
    c, healthy = node
    got, closed, reason = asyncio.run(_talk(c, list(frames), c.token, wait=0.2))
    if closed is not None:
        assert closed in ALLOWED_CLOSES, (frames, closed, reason)
        assert reason and "\n" not in reason
    for frame in got:
        assert frame["type"] in ("subscribed", "pub", "unsubscribed", "gap", "refused"), frame
        if frame["type"] in ("unsubscribed", "refused"):
            assert frame["code"] in ALLOWED_UNSUBS, (frames, frame)
            assert frame["reason"] and "\n" not in frame["reason"]
    assert healthy.error is None and not healthy.finished.is_set()


def test_healthy_subscriber_never_saw_a_repeat_or_a_gap(
    node: tuple[LocalCluster, Subscriber],
) -> None:
    _, healthy = node
    # Run after the module's other tests, or first on a test worker of its own: either way,
    # a few publications must have come.
    wait_for(lambda: len(healthy.pubs()) > 3, timeout=30, what="four publications")
    offsets = [(m.epoch, m.offset) for m in healthy.pubs()]
    assert offsets == sorted(set(offsets))
    assert not healthy.kinds("gap")


def test_recovery_from_the_nodes_history_delivers_what_was_missed(
    node: tuple[LocalCluster, Subscriber],
) -> None:
    """A subscriber comes back to the node it left, which still has the stream (another
    subscriber keeps it): ``subscribed`` names the subscriber's own offset and the missed
    publications follow, in order, none twice. (It once named the node's newest offset, so a
    client dropped every recovered publication as already seen: found by the campaign.)"""
    c, healthy = node

    async def pubs_after(frame: str, count: int) -> list[dict[str, Any]]:
        """What the node sends for ``frame`` until ``count`` publications came (10 s at most)."""
        got: list[dict[str, Any]] = []
        headers = {"authorization": f"Bearer {c.token}"}
        async with connect(ws_url(c.node("n0").url), additional_headers=headers) as ws:
            await ws.send(frame)
            async with asyncio.timeout(10):
                while sum(f["type"] == "pub" for f in got) < count:
                    got.extend(frames(await ws.recv()))
        return got

    got = asyncio.run(pubs_after(sub(HEALTHY), 3))
    pubs = [f for f in got if f["type"] == "pub"]
    assert pubs, got
    last = pubs[-1]
    # Long enough to miss a few: the healthy subscriber sees them go by meanwhile.
    mark = len(healthy.pubs())
    wait_for(lambda: len(healthy.pubs()) >= mark + 5, what="publications missed")
    since = {"epoch": last["epoch"], "offset": last["offset"]}
    back = json.dumps({"type": "subscribe", "channel": HEALTHY, "since": since})
    again = asyncio.run(pubs_after(back, 8))
    first = again[0]
    assert first["type"] == "subscribed" and first["recovered"], again[:2]
    assert (first["epoch"], first["offset"]) == (last["epoch"], last["offset"])
    offsets = [f["offset"] for f in again if f["type"] == "pub"]
    assert len(offsets) >= 5 and offsets == list(range(last["offset"] + 1, offsets[-1] + 1))


def test_channel_names_are_lease_names() -> None:
    """Channel names map to lease names the store takes."""
    from baton.channels.handler import parse_channel
    from baton.channels.hub import lease_name
    from baton.store.base import check_name

    assert check_name("lease", lease_name(parse_channel("cascade:s1/accounts").name))


def test_cli_subscribe_and_channels(node: tuple[LocalCluster, Subscriber]) -> None:
    import subprocess
    import sys

    c, _ = node
    baton = str(Path(sys.executable).with_name("baton"))
    api = ["--api", c.node("n0").url, "--token-file", str(c.token_file)]
    out = subprocess.run(
        [baton, "subscribe", "tick:cli,every=0.02,end=3", *api],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines()]
    assert [x["type"] for x in lines] == ["subscribed", "pub", "pub", "pub", "finished"]
    assert [x["offset"] for x in lines[1:4]] == [1, 2, 3]
    listed = subprocess.run(
        [baton, "channels", *api, "--json"], capture_output=True, text=True, timeout=30, check=False
    )
    assert listed.returncode == 0, listed.stderr
    rows = {r["channel"]: r for r in json.loads(listed.stdout)}
    assert rows[HEALTHY]["leader"] == "n0" and rows[HEALTHY]["subscribers"] == {"n0": 1}
    assert rows[HEALTHY]["offset"] >= 1
    metrics = c.node("n0").get("/metrics").text
    # (Channels of the fuzz above may still be lingering: at least the healthy one.)
    upstreams = re.search(r"^baton_channel_upstreams{node=\"n0\"} ([0-9.]+)$", metrics, re.M)
    assert upstreams is not None and float(upstreams.group(1)) >= 1
    # One observation per publication and node: from the upstream yielding it to its frame
    # handed to every subscriber's connection.
    fanned = r"^baton_channel_fanout_seconds_count{node=\"n0\"} ([0-9.e+]+)$"
    count = re.search(fanned, metrics, re.M)
    assert count is not None and float(count.group(1)) > 0
    # Refused and bad input: one line on stderr, no traceback.
    bad = subprocess.run(
        [baton, "subscribe", "tick:x,deny=1", *api], capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert "refuses subscribers" in bad.stderr and "Traceback" not in bad.stderr


def test_refused_publication_leaves_the_subscription(node: tuple[LocalCluster, Subscriber]) -> None:
    c, _ = node

    async def go() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        headers = {"authorization": f"Bearer {c.token}"}
        async with connect(ws_url(c.node("n0").url), additional_headers=headers) as ws:
            await ws.send(sub(HEALTHY))
            await ws.send(json.dumps({"type": "publish", "channel": HEALTHY, "data": {"x": 1}}))
            refused = None
            after: list[dict[str, Any]] = []
            while refused is None or len(after) < 3:
                for frame in frames(await asyncio.wait_for(ws.recv(), 10)):
                    if frame["type"] == "refused":
                        refused = frame
                    elif refused is not None and frame["type"] == "pub":
                        after.append(frame)
                    assert frame["type"] != "unsubscribed", frame
            return refused, after

    refused, after = asyncio.run(go())
    assert refused["code"] == 4403 and "does not take publications" in refused["reason"]
    assert after
