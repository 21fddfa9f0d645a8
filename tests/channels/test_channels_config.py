"""Channel timings are validated with the lease timings by the seed's rule, and a node refuses a
contradiction at start with one line naming the values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from baton.channels.config import ChannelsConfig, ChannelTimings
from baton.errors import ConfigError
from baton.lease.timings import Timings
from baton.node.config import load


def test_defaults_follow_the_lease_timings() -> None:
    t = ChannelsConfig().timings(Timings())
    assert (t.forward_timeout, t.check_interval, t.linger) == (1.0, 2.0, 2.0)
    short = ChannelsConfig().timings(Timings.for_ttl(2))
    assert short.forward_timeout == 0.5 and short.check_interval == pytest.approx(0.4)
    assert short.watchdog < short.lease.stop_margin


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"forward_timeout": 1.0}, "forward_timeout=1.0 must be at most a third of ttl=2:"),
        ({"forward_timeout": 0.05}, "must be at least request_timeout=0.1"),
        ({"check_interval": 1.5}, "check_interval=1.5 must be at most half of ttl=2,"),
    ],
)
def test_contradictions_are_refused(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        ChannelTimings(Timings.for_ttl(2), **{"check_interval": 0.4, **kwargs})


def test_node_config_refuses_bad_channel_timings(tmp_path: Path) -> None:
    env = {
        "BATON_NODE_ID": "a",
        "BATON_STORE": f"sqlite://{tmp_path}/s.db",
        "BATON_TOKEN": "t" * 32,
        "BATON_DATA_DIR": str(tmp_path),
        "BATON_TTL": "2",
        "BATON_CHANNELS": json.dumps({"forward_timeout": 1.5}),
    }
    with pytest.raises(ConfigError) as info:
        load(None, env=env)
    msg = str(info.value)
    assert "channels:" in msg and "forward_timeout=1.5" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="BATON_CHANNELS: expected a JSON object"):
        load(None, env={**env, "BATON_CHANNELS": "{linger"})
    ok = load(None, env={**env, "BATON_CHANNELS": json.dumps({"linger": 0.5})})
    assert ok.channels.linger == 0.5
