"""Every spelling of an SQLite location names the same file at every entry point that takes one:
store URLs (``open_store``, ``--store``), cascade node locations (the node database, the node
list, ``--via``) and node config files. ``sqlite:////abs`` (SQLAlchemy's spelling) is the
absolute path ``/abs``, as ``sqlite:///abs`` is: read as a relative path, two processes in
different directories would open different files and could both hold "the" lease."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from baton.cascade import commands
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.errors import CascadeError, ConfigError, SpecError
from baton.node.config import load
from baton.service.workload import CascadeWorker
from baton.store import open_store, sqlite_path
from tests.test_cli import BATON, one_line_error


def absolute(path: Path) -> list[str]:
    """Every spelling of the absolute ``path`` (which starts with ``/``)."""
    return [f"sqlite://{path}", f"sqlite:///{path}", f"sqlite:{path}", f"sqlite://///{path}"]


RELATIVE = ["sqlite:r.db", "sqlite://r.db"]
BAD = ["sqlite:", "sqlite://", "sqlite:///", "sqlite:////", "sqlite:///tmp/", "sqlite:///x.db?x=1"]


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """Two working directories, as two processes started in different places have."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    return a, b


async def test_absolute_spellings_are_one_store_from_any_directory(
    tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store.db"
    monkeypatch.chdir(dirs[0])
    async with open_store(f"sqlite:///{db}") as first:  # SQLAlchemy's spelling
        lease = await first.acquire("leader", "first", 30)
        assert lease is not None
    monkeypatch.chdir(dirs[1])
    for url in [*absolute(db), f"sqlite:///{db}?namespace=baton"]:
        async with open_store(url) as other:
            held = await other.get_lease("leader")
            assert held is not None and held.epoch == lease.epoch, url
            assert await other.acquire("leader", "second", 30) is None, url
    assert [list(d.iterdir()) for d in dirs] == [[], []]  # no file relative to either cwd


async def test_relative_spellings_are_relative_to_the_working_directory(
    dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert {sqlite_path(url) for url in RELATIVE} == {"r.db"}
    for where in dirs:
        monkeypatch.chdir(where)
        async with open_store(RELATIVE[0]) as one, open_store(RELATIVE[1]) as other:
            assert await one.acquire("leader", where.name, 30) is not None
            assert await other.acquire("leader", "other", 30) is None  # the same file
        assert (where / "r.db").exists()


@pytest.mark.parametrize("url", BAD)
def test_bad_sqlite_urls_are_refused_everywhere(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as store_error:
        open_store(url)
    with pytest.raises(CascadeError) as node_error:
        open_node_db(url)
    with pytest.raises(CascadeError):
        commands.normalise(url)
    # A placed node service too, when its object is created (it was accepted, and failed on
    # every node that tried to start it).
    with pytest.raises(SpecError) as spec_error:
        CascadeWorker.validate_spec({"location": url})
    for err in (store_error, node_error, spec_error):
        assert "\n" not in str(err.value) and "sqlite:///" in str(err.value)


def test_a_placed_node_service_takes_every_spelling() -> None:
    for url in [*absolute(Path("/d/s2.db")), *RELATIVE]:
        assert CascadeWorker.validate_spec({"location": url}) == {"location": url}


def test_node_locations_take_every_spelling_and_store_one(
    tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # Relative, as the store takes it (this was refused): stored absolute, for other hosts' cwd.
    created = commands.create_root("s1", "sqlite:s1.db", "S")
    s1 = tmp_path / "s1.db"
    assert created.location == f"sqlite://{s1}" and not created.already
    assert commands.create_root("s1", "sqlite://s1.db", "S").already
    # SQLAlchemy's spelling of the same file is the same node, stored in one spelling.
    again = commands.create_root("s1", f"sqlite:///{s1}", "S")
    assert again.already and again.location == f"sqlite://{s1}"
    monkeypatch.chdir(dirs[1])
    for via in absolute(s1):
        assert commands.normalise(via) == f"sqlite://{s1}"
        with open_node_db(via) as db:
            assert db.state().name == "s1"
        assert commands.status(via).set_name == "S"
    s2 = tmp_path / "s2.db"
    branch = commands.create_subscriber(Role.BRANCH, "s2", f"sqlite:{s2}", "s1", f"sqlite:///{s1}")
    assert branch.location == f"sqlite://{s2}"
    assert commands.open_set(f"sqlite:///{s2}").nodes == {
        "s1": (f"sqlite://{s1}", False),
        "s2": (f"sqlite://{s2}", False),
    }
    assert sorted(p.name for p in dirs[1].iterdir()) == []  # nothing created in the cwd


@pytest.mark.parametrize("spelling", ["abs", "abs4", "abs1", "rel", "rel2"])
def test_config_store_takes_every_spelling(
    spelling: str, tmp_path: Path, dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store.db"
    url, want = {
        "abs": (f"sqlite://{db}", str(db)),
        "abs4": (f"sqlite:///{db}", str(db)),
        "abs1": (f"sqlite:{db}", str(db)),
        "rel": ("sqlite:r.db", "r.db"),
        "rel2": ("sqlite://r.db", "r.db"),
    }[spelling]
    monkeypatch.chdir(dirs[1])
    config = tmp_path / "node.toml"
    config.write_text(
        f'node_id = "a"\nstore = "{url}"\ntoken = "{"t" * 16}"\ndata_dir = "{tmp_path}"\n'
    )
    for cfg in (load(config, env={}), load(None, env={**_env(tmp_path), "BATON_STORE": url})):
        store = open_store(cfg.store)
        assert getattr(store, "path", None) == want


def _env(tmp_path: Path) -> dict[str, str]:
    return {"BATON_NODE_ID": "a", "BATON_TOKEN": "t" * 16, "BATON_DATA_DIR": str(tmp_path)}


def test_cli_takes_every_spelling_from_any_directory(
    tmp_path: Path, dirs: tuple[Path, Path]
) -> None:
    def baton(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("BATON_STORE", "BATON_CASCADE")}
        return subprocess.run(
            [BATON, *args], capture_output=True, text=True, timeout=60, check=False, cwd=cwd,
            env=env,
        )  # fmt: skip

    db = tmp_path / "store.db"

    async def hold() -> None:
        async with open_store(f"sqlite://{db}") as store:
            assert await store.acquire("leader", "first", 30) is not None

    asyncio.run(hold())
    for where in dirs:
        shown = baton("lease", "show", "leader", "--store", f"sqlite:///{db}", cwd=where)
        assert shown.returncode == 0 and "held by first" in shown.stdout, shown.stderr
    made = baton("cascade", "create-root", "s1", "sqlite:s1.db", "--set", "S", cwd=dirs[0])
    assert made.returncode == 0, made.stderr
    assert f"at sqlite://{dirs[0] / 's1.db'}" in made.stdout
    seen = baton("cascade", "status", "--via", f"sqlite:///{dirs[0]}/s1.db", cwd=dirs[1])
    assert seen.returncode == 0 and "s1" in seen.stdout, seen.stderr
    one_line_error(baton("lease", "list", "--store", "sqlite:///x.db?x=1", cwd=dirs[1]), "x=1")
