"""Where Spark runs, said the same way everywhere a session is built: explicit master or remote,
else BATON_SPARK_MASTER / BATON_SPARK_REMOTE, else a local master; bad values refused in one line
before any JVM or connection starts (no Spark is started here)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from baton.cli.main import cli
from baton.errors import ConfigError
from baton.node.config import load
from baton.service.worker import query_name, query_owner
from baton.spark.lifecycle import SessionSpec, SparkSessions
from baton.spark.session import DEFAULT_MASTER, Where, connect_session_id, where


def test_explicit_then_environment_then_local() -> None:
    env = {"BATON_SPARK_MASTER": "spark://10.0.0.1:7077"}
    assert where(env={}) == Where(master=DEFAULT_MASTER)
    assert where(env=env) == Where(master="spark://10.0.0.1:7077")
    assert where(env={"BATON_SPARK_REMOTE": "sc://h:15002"}) == Where(remote="sc://h:15002")
    assert where(master="local[2]", env=env) == Where(master="local[2]")
    assert where(remote="sc://h:1/;user_id=u", env=env) == Where(remote="sc://h:1/;user_id=u")


@pytest.mark.parametrize(
    ("master", "remote", "env", "says"),
    [
        ("local", "sc://h:1", {}, "not both"),
        ("bogus", None, {}, "'bogus' is not a Spark master"),
        (None, "http://h:1", {}, "'http://h:1' is not a Spark Connect URL"),
        (None, None, {"BATON_SPARK_MASTER": "x", "BATON_SPARK_REMOTE": "sc://h"}, "not both"),
        (None, None, {"BATON_SPARK_REMOTE": "h:15002"}, "BATON_SPARK_REMOTE 'h:15002'"),
    ],
)
def test_bad_values_are_one_line(
    master: str | None, remote: str | None, env: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        where(master, remote, env)
    assert "\n" not in str(caught.value)


def test_where_knows_what_is_on_this_host() -> None:
    assert where("local[2]").local and where("local[2]").loopback
    assert where("spark://127.0.0.1:7077").loopback and not where("spark://127.0.0.1:7077").local
    assert not where("spark://10.1.2.3:7077").loopback
    assert not where(remote="sc://127.0.0.1:15002").local


def test_sessions_know_spark_connect_from_the_spec_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert SparkSessions(SessionSpec(remote="sc://h:15002")).connect
    assert not SparkSessions(SessionSpec(master="local[1]")).connect
    monkeypatch.delenv("BATON_SPARK_MASTER", raising=False)
    monkeypatch.setenv("BATON_SPARK_REMOTE", "sc://h:15002")
    assert SparkSessions(SessionSpec()).connect


def test_connect_session_ids_are_stable_uuids() -> None:
    a = connect_session_id("baton-node:n1")
    assert a == connect_session_id("baton-node:n1") != connect_session_id("baton-node:n2")
    assert a != connect_session_id("baton-node:n1", 1)
    assert uuid.UUID(a).version == 4


def test_query_names_carry_node_and_epoch() -> None:
    assert query_owner(query_name("S", "s2", 7)) == ("S", "s2", 7)
    assert query_owner("someone else's query") is None
    assert query_owner(None) is None


def test_node_config_environment_replaces_the_files_choice(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text(
        f'node_id = "n1"\nstore = "sqlite:///{tmp_path}/s.db"\ndata_dir = "{tmp_path}"\n'
        'token = "0123456789abcdef0123456789abcdef"\n[spark]\nmaster = "spark://h:7077"\n'
    )
    assert load(path, {}).spark.master == "spark://h:7077"
    spark = load(path, {"BATON_SPARK_REMOTE": "sc://h:15002"}).spark
    assert (spark.master, spark.remote) == (None, "sc://h:15002")
    with pytest.raises(ConfigError, match=r"spark.master='local\[x\]': not a Spark master"):
        load(path, {"BATON_SPARK_MASTER": "local[x]"})


def test_cascade_run_refuses_bad_spark_options_in_one_line(tmp_path: Path) -> None:
    store = ["--store", f"sqlite:///{tmp_path}/s.db"]
    runner = CliRunner()
    for args, says in [
        (["--spark-master", "nope"], "is not a Spark master"),
        (["--spark-remote", "sc://h:1", "--spark-master", "local"], "not both"),
        (["--spark-conf", "spark.cores.max"], "'spark.cores.max' is not a Spark setting"),
        (["--spark-conf", "cores.max=2"], "give KEY=VALUE with a key starting spark."),
    ]:
        result = runner.invoke(cli, ["cascade", "run", f"sqlite:///{tmp_path}/n.db", *store, *args])
        assert result.exit_code == 2, result.output
        assert says in result.output and "Traceback" not in result.output
