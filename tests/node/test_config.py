"""Node configuration: every kind of bad value gives one line naming the key and what is
expected; the token never appears in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from baton.errors import ConfigError
from baton.node.config import load

TOKEN = "s3cret-token-0123456789"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def good(tmp_path: Path) -> str:
    return (
        f'node_id = "a"\nstore = "sqlite://{tmp_path}/s.db"\ntoken = "{TOKEN}"\n'
        f'data_dir = "{tmp_path}"\n'
    )


def test_good_config_and_env_override(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, good(tmp_path)), env={"BATON_CAPACITY": "7", "BATON_TTL": "4"})
    assert cfg.capacity == 7 and cfg.timings.build().ttl == 4
    assert cfg.advertised == "127.0.0.1:7400" and cfg.spark.master == "local[*]"
    assert TOKEN not in repr(cfg) and "token" not in cfg.safe_dict()


def test_token_file(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text(TOKEN + "\n")
    text = good(tmp_path).replace(f'token = "{TOKEN}"', f'token_file = "{tmp_path}/tok"')
    assert load(write(tmp_path, text), env={}).cluster_token == TOKEN


@pytest.mark.parametrize(
    ("change", "env", "needles"),
    [
        (('node_id = "a"', ""), {}, ["node_id", "missing", "BATON_NODE_ID"]),
        (('node_id = "a"', 'node_id = "-bad id"'), {}, ["node_id", "'-bad id'", "letters"]),
        (("", 'listen = "nowhere"'), {}, ["listen", "'nowhere'", "host:port"]),
        (("", "capacity = 0"), {}, ["capacity", "0", "greater than or equal to 1"]),
        (("", 'capacity = "many"'), {}, ["capacity", "'many'"]),
        (("", "colour = 1"), {}, ["unknown config key colour"]),
        (("", "[timings]\nttl = 1\nrenew_deadline = 2"), {}, ["timings", "renew_deadline"]),
        (("", '[spark]\nmaster = "local"\nremote = "sc://h"'), {}, ["spark", "not both"]),
        ((f'token = "{TOKEN}"', 'token = "short"'), {}, ["token", "16 characters"]),
        ((f'token = "{TOKEN}"', ""), {}, ["no cluster token"]),
        ((f'token = "{TOKEN}"', 'token_file = "/no/such/file"'), {}, ["token_file", "/no/such"]),
        (("", ""), {"BATON_STORE": "mysql://x"}, ["store", "mysql"]),
        (("", ""), {"BATON_LABELS": "zone"}, ["BATON_LABELS", "k=v"]),
        (("", ""), {"BATON_CAPACITY": "-3"}, ["capacity", "-3"]),
    ],
)
def test_bad_values_are_one_line(
    tmp_path: Path, change: tuple[str, str], env: dict[str, str], needles: list[str]
) -> None:
    old, new = change
    text = good(tmp_path).replace(old, new, 1) if old else good(tmp_path) + new + "\n"
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text), env=env)
    msg = str(info.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg
    assert TOKEN not in msg


def test_unreadable_or_invalid_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(tmp_path / "missing.toml", env={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(write(tmp_path, "node_id = "), env={})
