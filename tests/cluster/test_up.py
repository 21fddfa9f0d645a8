"""``baton up`` starts a local cluster in the foreground; ``baton status`` and ``baton nodes``
read it from the store; Ctrl-C stops every node and releases their leases."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from baton.local.processes import Proc
from baton.testing import wait_for

BATON = str(Path(sys.executable).with_name("baton"))
pytestmark = pytest.mark.cluster


def status(url: str) -> dict[str, object] | None:
    res = subprocess.run(
        [BATON, "status", "--store", url, "--json"], capture_output=True, text=True, check=False
    )
    return json.loads(res.stdout) if res.returncode == 0 else None


def live(url: str) -> int:
    st = status(url)
    nodes = st["nodes"] if st else []
    assert isinstance(nodes, list)
    return sum(1 for n in nodes if n["state"] == "live")


def address(up: Proc) -> str:
    line = next(x for x in up.lines() if x.strip().startswith("n0 "))
    return line.split()[1].removeprefix("http://")


def test_up_status_nodes_and_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "c"
    up = Proc("up", [BATON, "up", "--nodes", "2", "--ttl", "2", "--data-dir", str(data)],
              tmp_path / "up.out")  # fmt: skip
    url = f"sqlite://{data / 'store.db'}"
    try:
        wait_for(lambda: up.said("controller:"), timeout=30, what="a controller line")
        assert any("cluster token in" in line for line in up.lines())
        token = (data / "token").read_text().strip()
        assert token not in up.out.read_text(), "the token was printed"
        wait_for(lambda: live(url) == 2, timeout=20)
        st = status(url)
        assert st is not None and st["controller"] is not None
        via_api = subprocess.run(
            [BATON, "status", "--api", "http://" + address(up), "--token-file",
             str(data / "token"), "--json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert via_api.returncode == 0, via_api.stderr
        assert json.loads(via_api.stdout)["controller"] == st["controller"]
        wrong = subprocess.run(
            [BATON, "status", "--api", "http://" + address(up)],
            capture_output=True, text=True, check=False, env={"BATON_TOKEN": "x" * 20},
        )  # fmt: skip
        assert wrong.returncode == 2 and "refused the token" in wrong.stderr
        table = subprocess.run(
            [BATON, "nodes", "--store", url], capture_output=True, text=True, check=False
        )
        assert "n0" in table.stdout and "live" in table.stdout
        up.signal(signal.SIGINT)
        wait_for(lambda: up.popen.poll() is not None, timeout=30, what="baton up to stop")
        assert up.popen.returncode == 0, up.lines()
        assert live(url) == 0, "nodes still hold their membership after Ctrl-C"
        after = status(url)
        assert after is not None and after["controller"] is None
    finally:
        up.stop()


def test_up_refuses_bad_input(tmp_path: Path) -> None:
    for args in (["--nodes", "0"], ["--ttl", "-1"], ["--store", "mysql://x"]):
        res = subprocess.run(
            [BATON, "up", "--data-dir", str(tmp_path), *args],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "token").exists(), "bad input started something"


def test_up_points_later_commands_at_its_store(tmp_path: Path) -> None:
    """Issue 28: `baton up` prints the line that points later commands at its store, and a
    command run in the same directory finds it without --store or BATON_STORE."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "BATON_STORE"}
    out = tmp_path / "up.out"
    with out.open("w") as f:
        up = subprocess.Popen(
            [BATON, "up", "--nodes", "1", "--ttl", "2"], cwd=tmp_path, env=env,
            stdout=f, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: "controller:" in out.read_text(), timeout=30, what="a controller")
        export = next(x for x in out.read_text().splitlines() if x.startswith("export "))
        url = export.split()[1].removeprefix("BATON_STORE=")
        assert url == f"sqlite://{tmp_path / '.baton' / 'store.db'}"
        here = subprocess.run(
            [BATON, "status"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
        )
        assert here.returncode == 0, here.stderr
        assert "controller: n0" in here.stdout
        elsewhere = subprocess.run(
            [BATON, "nodes"], env={**env, "BATON_STORE": url}, cwd=tmp_path.parent,
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert "n0" in elsewhere.stdout, elsewhere.stderr
        nowhere = subprocess.run(
            [BATON, "status"], cwd=tmp_path.parent, env=env, capture_output=True, text=True,
            check=False,
        )  # fmt: skip
        assert nowhere.returncode == 2 and "no store given" in nowhere.stderr
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(30)
