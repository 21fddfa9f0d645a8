"""Node configuration: every kind of bad value gives one line naming the key and what is
expected; the token never appears in it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from baton.errors import ConfigError
from baton.node.config import load
from baton.spark.session import DEFAULT_MASTER

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
    assert cfg.advertised == "127.0.0.1:7400" and cfg.spark.master == DEFAULT_MASTER
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


# -- every key, every wrong type -------------------------------------------------------------

#: Every key of the node config and what it holds; nested keys dotted (a ``*`` is any name).
KEYS = {
    "node_id": "str", "listen": "str", "advertise": "str", "store": "str", "token": "str",
    "token_file": "str", "data_dir": "str", "capacity": "int", "labels": "table",
    "labels.*": "str", "workloads": "table", "workloads.*": "str", "timings": "table",
    "timings.ttl": "num", "timings.renew_interval": "num", "timings.renew_deadline": "num",
    "timings.request_timeout": "num", "timings.election_timeout_min": "num",
    "timings.election_timeout_max": "num", "placement": "table",
    "placement.reconcile_interval": "num", "spark": "table", "spark.master": "str",
    "spark.remote": "str", "spark.conf": "table", "spark.conf.*": "str",
    "channels": "table", "channels.linger": "num", "channels.forward_timeout": "num",
    "channels.check_interval": "num", "channels.history": "int", "channels.queue": "int",
    "channels.max_frame": "int", "channels.handlers": "table", "channels.handlers.*": "str",
    "channels.settings": "table", "channels.settings.*": "table", "redis_failover": "table",
}  # fmt: skip
NAN, INF = float("nan"), float("inf")
WRONG: dict[str, list[object]] = {
    "str": [1234567890123456789, 1.5, True, ["x"], {"a": "b"}],
    "int": [True, False, 1.5, NAN, "many", [1], {"a": 1}],
    "num": [True, False, NAN, INF, "soon", [1], {"a": 1}],
    "table": [5, "x", True, [1]],
}


def test_keys_are_every_key_of_the_model() -> None:
    from pydantic import BaseModel

    from baton.node.config import NodeConfig

    def walk(model: type[BaseModel], prefix: str) -> set[str]:
        out = set()
        for name, field in model.model_fields.items():
            out.add(prefix + name)
            sub = field.annotation
            if isinstance(sub, type) and issubclass(sub, BaseModel):
                out |= walk(sub, f"{prefix}{name}.")
        return out

    assert {k for k in KEYS if not k.endswith("*")} == walk(NodeConfig, "")


def toml(value: object) -> str:
    """``value`` written as TOML (inline tables for tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and value == INF:
        return "inf"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{ " + ", ".join(f'"{k}" = {toml(v)}' for k, v in value.items()) + " }"


def config_with(tmp_path: Path, key: str, value: object) -> Path:
    data: dict[str, object] = {
        "node_id": "a", "store": f"sqlite://{tmp_path}/s.db", "token": TOKEN,
        "data_dir": str(tmp_path),
    }  # fmt: skip
    *parents, last = key.replace("*", "x").split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})  # type: ignore[assignment]
    node[last] = value
    return write(tmp_path, "".join(f"{k} = {toml(v)}\n" for k, v in data.items()))


@pytest.mark.parametrize(
    ("key", "value"),
    [(key, value) for key, kind in KEYS.items() for value in WRONG[kind]],
    ids=lambda v: repr(v)[:20],
)
def test_every_wrong_type_names_its_key(tmp_path: Path, key: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        load(config_with(tmp_path, key, value), env={})
    msg = str(info.value)
    shown = key.replace("*", "x")
    assert "\n" not in msg
    assert msg.startswith((f"config {shown}=", f"config {shown}:")), msg
    assert TOKEN not in msg
    if key == "token":
        assert msg.endswith("(value not shown)") and str(value) not in msg, msg
    elif isinstance(value, bool):
        assert ("true" if value else "false") in msg


@pytest.mark.parametrize("key", [k for k, kind in KEYS.items() if kind in ("int", "num")])
@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_not_numbers(tmp_path: Path, key: str, value: bool) -> None:
    with pytest.raises(ConfigError, match=f"^config {key}=(true|false): expected a number"):
        load(config_with(tmp_path, key, value), env={})


def test_numbers_from_the_environment_are_strings(tmp_path: Path) -> None:
    env = {"BATON_CAPACITY": "7", "BATON_TTL": "4.5", "BATON_RECONCILE_INTERVAL": "0.25"}
    cfg = load(write(tmp_path, good(tmp_path)), env=env)
    assert (cfg.capacity, cfg.timings.ttl, cfg.placement.reconcile_interval) == (7, 4.5, 0.25)
    for var, key in (("BATON_CAPACITY", "capacity"), ("BATON_TTL", "timings.ttl")):
        with pytest.raises(ConfigError, match=f"^config {key}='true': expected a "):
            load(write(tmp_path, good(tmp_path)), env={var: "true"})


def test_every_variable_is_documented() -> None:
    from baton.node.config import NodeConfig
    from baton.settings import env_vars

    docs = (Path(__file__).resolve().parents[2] / "docs" / "node.md").read_text()
    assert {var for var in env_vars(NodeConfig) if f"`{var}`" not in docs} == set()
