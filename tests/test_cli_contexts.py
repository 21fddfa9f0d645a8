"""Named contexts (``baton context``), run as the real executable with ``BATON_CONFIG`` naming a
file of the test: a context's values are the defaults of ``--store``, ``--api``,
``--token-file`` and ``--via`` (an option beats its environment variable, which beats the
context); the file is written 0600 and never shows a password; a file that cannot be used is
one line naming it and what to fix, exit 2, and nothing is written."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from baton.cascade import node_ops
from baton.store import open_store
from baton.testing import free_port
from tests.test_cli import BATON, baton, one_line_error


def stores(directory: Path, *names: str) -> dict[str, str]:
    """An SQLite store per name, each holding one lease named after it."""
    urls = {n: f"sqlite://{directory / n}.db" for n in names}

    async def make() -> None:
        for name, url in urls.items():
            async with open_store(url) as s:
                assert await s.acquire(f"in/{name}", "t", 3600) is not None

    asyncio.run(make())
    return urls


def answered(res: subprocess.CompletedProcess[str]) -> str:
    """Which store a ``lease list --json`` read: the name of its one lease."""
    assert res.returncode == 0, res.stderr
    (lease,) = json.loads(res.stdout)
    return str(lease["name"]).removeprefix("in/")


def test_a_context_gives_the_defaults_flag_then_env_then_context(tmp_path: Path) -> None:
    urls = stores(tmp_path, "ctx", "other", "env", "flag")
    config = tmp_path / "conf" / "config.toml"
    env = {"BATON_CONFIG": str(config), "BATON_STORE": "", "BATON_CONTEXT": ""}
    made = baton("context", "set", "prod", "--store", urls["ctx"], env=env)
    assert made.returncode == 0 and "now the current one" in made.stdout, made.stderr
    assert baton("context", "set", "dev", "--store", urls["other"], env=env).returncode == 0
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert answered(baton("lease", "list", "--json", env=env)) == "ctx"
    assert answered(baton("--context", "dev", "lease", "list", "--json", env=env)) == "other"
    assert answered(baton("lease", "list", "--json", env={**env, "BATON_CONTEXT": "dev"})) == (
        "other"
    )
    with_env = {**env, "BATON_STORE": urls["env"]}
    assert answered(baton("lease", "list", "--json", env=with_env)) == "env"
    assert answered(baton("lease", "list", "--json", "--store", urls["flag"], env=with_env)) == (
        "flag"
    )
    assert baton("context", "use", "dev", env=env).stdout == "current context: dev\n"
    assert answered(baton("lease", "list", "--json", env=env)) == "other"
    listed = json.loads(baton("context", "list", "-o", "json", env=env).stdout)
    assert listed["current"] == "dev" and listed["file"] == str(config)
    assert [c["name"] for c in listed["contexts"]] == ["dev", "prod"]
    deleted = baton("context", "delete", "dev", env=env)
    assert "no context is current now" in deleted.stdout, deleted.stderr
    # No current context and no store anywhere: the usage error says how to give one.
    nowhere = subprocess.run(
        [BATON, "lease", "list"], capture_output=True, text=True, timeout=60, check=False,
        cwd=tmp_path, env={**os.environ, **env},
    )  # fmt: skip
    one_line_error(nowhere, "--store", "baton context set")


def test_api_token_file_and_via_from_a_context(tmp_path: Path) -> None:
    """The context's node API is asked with the token read from its token file (the error
    names that API, not a missing token); its ``via`` finds the set; BATON_CASCADE beats it."""
    env = {"BATON_CONFIG": str(tmp_path / "c.toml"), "BATON_TOKEN": "", "BATON_CASCADE": ""}
    token = tmp_path / "token"
    token.write_text("t" * 32)
    root = f"sqlite://{tmp_path / 's1.db'}"
    node_ops.create_root("s1", root, "S")
    api = f"http://127.0.0.1:{free_port()}"
    res = baton("context", "set", "c", "--api", api, "--token-file", str(token), "--via", root,
                env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    one_line_error(baton("status", env=env), f"cannot reach node API {api}")
    shown = json.loads(baton("cascade", "status", "--json", env=env).stdout)
    assert shown["root"] == "s1"
    missing = tmp_path / "nothere.db"
    one_line_error(
        baton("cascade", "status", env={**env, "BATON_CASCADE": f"sqlite://{missing}"}),
        "nothere.db",
    )
    assert "t" * 32 not in (tmp_path / "c.toml").read_text()  # where the token is, not it


def test_context_show_masks_passwords_and_bad_values_write_nothing(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    env = {"BATON_CONFIG": str(config)}
    url = "postgresql://u:sekret@127.0.0.1:5432/db"
    assert baton("context", "set", "pg", "--store", url, env=env).returncode == 0
    assert "sekret" in config.read_text()  # the file is the configuration (0600)
    for args in (["context", "show"], ["context", "show", "pg", "-o", "yaml"],
                 ["context", "list", "-o", "wide"]):  # fmt: skip
        res = baton(*args, env=env)
        assert res.returncode == 0 and "127.0.0.1:5432" in res.stdout, res.stderr
        assert "sekret" not in res.stdout + res.stderr
    before = config.read_bytes()
    for args, needles in [
        (["context", "set", "pg", "--api", "localhost:7400"], ["--api", "http://"]),
        (["context", "set", "pg", "--token-file", str(tmp_path / "none")], ["no such file"]),
        (["context", "set", "pg", "--store", "mysql://h/db"], ["--store", "mysql"]),
        (["context", "set", "a.b", "--store", url], ["context name", "a.b"]),
        (["context", "set", "pg"], ["at least one of"]),
        (["context", "use", "nope"], ["no context 'nope'", "pg"]),
    ]:
        res = baton(*args, env=env)
        one_line_error(res, *needles)
        assert res.returncode == 2 and "sekret" not in res.stderr
        assert config.read_bytes() == before, f"{args} changed the file"


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ('current = "a"\n[contexts.a\nstore = "x"\n', ["not valid TOML"]),
        ('[contexts.a]\nstor = "sqlite:///x.db"\n', ["[contexts.a]", "unknown key 'stor'"]),
        ('current = "b"\n[contexts.a]\nstore = "sqlite:///x.db"\n', ["'b' is not in", "use"]),
        ('colour = "blue"\n', ["unknown key 'colour'"]),
        ("[contexts.a]\nvia = 3\n", ["via must be a non-empty string"]),
    ],
)
def test_a_bad_file_is_one_line_and_changes_nothing(
    tmp_path: Path, text: str, needles: list[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(text)
    env = {"BATON_CONFIG": str(config), "BATON_STORE": ""}
    store = stores(tmp_path, "s")["s"]
    for args in (["lease", "list"], ["context", "set", "a", "--store", store]):
        res = baton(*args, env=env)
        one_line_error(res, str(config), *needles)
        assert res.returncode == 2
        assert config.read_text() == text
    # An option given needs no context: the file is not read.
    assert answered(baton("lease", "list", "--json", "--store", store, env=env)) == "s"
    if "is not in" in needles[0]:  # what the line says to do mends it
        assert baton("context", "use", "a", env=env).returncode == 0
        assert 'current = "a"' in config.read_text()
