"""The store-failover roles' settings: a bad value is one line naming the key (and never
showing a secret), whatever the source (options, a file, the environment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from baton.errors import ConfigError
from baton.failover.config import client_config, load_table, server_config

SECRET = "s3cr3t-token-0123456789"


def server(**changes: Any) -> dict[str, Any]:
    return {"redis_servers": "127.0.0.1:1", "client_ids": "a@127.0.0.1:2", **changes}


def client(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    return {
        "client_id": "a",
        "master_file": str(tmp_path / "m"),
        "listen": "127.0.0.1:3",
        **changes,
    }


@pytest.mark.parametrize(
    ("changes", "needles"),
    [
        ({"redis_servers": None}, ["redis_servers", "missing", "--redis-servers"]),
        ({"client_ids": None}, ["clients", "missing", "--client-ids"]),
        ({"redis_servers": 5}, ["redis_servers=5", "host:port"]),
        ({"redis_servers": "h:1,h:1"}, ["redis_servers=", "listed twice"]),
        ({"client_ids": "a,b"}, ["client_ids='a,b'", "bad client 'a'"]),
        ({"server_id": "-x"}, ["server_id='-x'", "bad server id"]),
        ({"listen": "nowhere"}, ["listen='nowhere'", "host:port"]),
        ({"retries": True}, ["retries=true", "not true or false"]),
        ({"retries": 101}, ["retries=101", "less than or equal to 100"]),
        ({"check_interval": "soon"}, ["check_interval='soon'", "number of seconds"]),
        ({"request_timeout": float("nan")}, ["request_timeout=nan"]),
        ({"reconfigure_interval": 0}, ["reconfigure_interval=0", "greater than"]),
        ({"token": "short"}, ["failover token", "16 characters", "value not shown"]),
        ({"redis_password": 5}, ["redis_password", "value not shown"]),
        ({"colour": "red"}, ["unknown server setting colour", "docs/failover.md"]),
    ],
)
def test_a_bad_server_setting_is_one_line_naming_it(
    changes: dict[str, Any], needles: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        server_config(server(**changes), env={})
    msg = str(info.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


@pytest.mark.parametrize(
    ("changes", "needles"),
    [
        ({"client_id": None}, ["client_id", "missing", "--client-id"]),
        ({"client_id": "no such id!"}, ["client_id='no such id!'", "bad client id"]),
        ({"master_file": "/no/such/dir/m"}, ["master_file='/no/such/dir/m'", "does not exist"]),
        ({"listen": None}, ["listen", "missing", "--listen"]),
        ({"check_timeout": False}, ["check_timeout=false", "not true or false"]),
        ({"token": SECRET[:8]}, ["failover token", "value not shown"]),
        ({"colour": 1}, ["unknown client setting colour"]),
    ],
)
def test_a_bad_client_setting_is_one_line_naming_it(
    tmp_path: Path, changes: dict[str, Any], needles: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        client_config(client(tmp_path, **changes), env={})
    msg = str(info.value)
    assert "\n" not in msg and SECRET[:8] not in msg
    for needle in needles:
        assert needle in msg, msg


def test_the_token_comes_from_options_or_file_then_the_environment(tmp_path: Path) -> None:
    env = {"BATON_FAILOVER_TOKEN": SECRET}
    assert server_config(server(), env=env).token == SECRET
    assert server_config(server(token="t" * 16), env=env).token == "t" * 16
    (tmp_path / "tok").write_text("f" * 20 + "\n")
    assert server_config(server(token_file=str(tmp_path / "tok")), env=env).token == "f" * 20
    with pytest.raises(ConfigError, match=r"value not shown") as info:
        server_config(server(), env={"BATON_FAILOVER_TOKEN": "short"})
    assert "short" not in str(info.value)


def test_a_file_with_both_roles_gives_each_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "failover.toml"
    path.write_text(
        "[redis_failover]\n"
        f'client_id = "a"\nmaster_file = "{tmp_path}/m"\nlisten = "127.0.0.1:3"\n'
        'redis_servers = ["127.0.0.1:1"]\nclients = { a = "127.0.0.1:3" }\n'
    )
    table = load_table(path)
    assert client_config(table, env={}).state_file == tmp_path / "m.state"
    assert [str(a) for a in server_config(table, env={}).redis_servers] == ["127.0.0.1:1"]
    path.write_text("redis_failover = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_table(path)


def test_a_node_config_names_its_redis_failover_table_and_hides_the_tokens(
    tmp_path: Path,
) -> None:
    from baton.node.config import load

    path = tmp_path / "node.toml"
    path.write_text(
        f'node_id = "a"\nstore = "sqlite://{tmp_path}/s.db"\ntoken = "{"t" * 16}"\n'
        f'data_dir = "{tmp_path}"\n[redis_failover]\nclient_id = "n1"\ntoken = "{SECRET}"\n'
        f'[redis_failover.server]\nredis_servers = []\nredis_password = "{SECRET}"\n'
    )
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    msg = str(info.value)
    assert msg.startswith("config redis_failover=") and "master_file is missing" in msg, msg
    assert SECRET not in msg and "\n" not in msg
