"""docs/quickstart.md, run as written: its ```sh blocks, in order, make one bash script (other
blocks are not run). The script runs in its own session with the scratch directory under the
test's tmp_path; every process it starts (baton up's nodes, the cascade services, their Spark
JVMs and Python workers) carries a marker in its environment, and whatever is still running at
the end, pass or fail, is stopped by that marker.

It starts two Spark JVMs (the branch's and the leaf's services) and a third after the switchover:
run it alone, not next to other Spark tests."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "docs" / "quickstart.md"
MARKER = "BATON_QUICKSTART_RUN"


def sh_blocks(text: str) -> list[str]:
    """The bodies of the ```sh fenced blocks, in order."""
    return re.findall(r"^```sh\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def marked(value: str) -> list[int]:
    """Processes whose environment holds MARKER=value."""
    needle = f"{MARKER}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                env = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in env.split(b"\0"):
                found.append(int(entry.name))
    return found


def stop_marked(value: str) -> None:
    """SIGTERM every marked process, then SIGKILL what is left after 15 s."""
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        pids = marked(value)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while marked(value) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not marked(value), "processes of the quickstart outlived SIGKILL"


def test_sh_blocks_are_the_walk() -> None:
    blocks = sh_blocks(QUICKSTART.read_text())
    script = "\n".join(blocks)
    assert blocks[0].startswith("D=$(mktemp -d)")
    for command in ("baton elect", "baton up", "baton node", "baton object create",
                    "baton cascade run", "baton cascade switchover", "kill $RUNS"):  # fmt: skip
        assert command in script, command
    assert "make setup" not in script  # the set-up block is shown, not run


@pytest.mark.long
@pytest.mark.timeout(420)
def test_quickstart_runs_as_written(tmp_path: Path) -> None:
    # make setup installs it; never skipped in CI.
    assert shutil.which("sqlite3"), "the quickstart uses the sqlite3 shell: run make setup"
    script = "set -euo pipefail\n" + "\n".join(sh_blocks(QUICKSTART.read_text()))
    (tmp_path / "quickstart.sh").write_text(script)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "TMPDIR": str(scratch),  # so the walk's D=$(mktemp -d) is in tmp_path
        MARKER: mark,
    })  # fmt: skip
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    t0 = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            ["bash", str(tmp_path / "quickstart.sh")],
            stdout=out,
            stderr=err,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=360)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            stop_marked(mark)
            proc.wait(10)
    took = time.monotonic() - t0
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    logs = "".join(
        f"\n--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
        for p in sorted(scratch.glob("*/*.log"))
    )
    assert rc == 0, f"exit {rc} after {took:.0f}s\n{stdout[-3000:]}\n{stderr[-3000:]}{logs}"

    # 1. baton elect: the command ran; host-b ran after host-a, at a higher epoch.
    assert re.search(r"^report runs, epoch \d+$", stdout, re.MULTILINE), stdout
    held = re.search(r"^report: held by host-a at epoch (\d+)", stdout, re.MULTILINE)
    after = re.search(r"^host-b runs, epoch (\d+)$", stdout, re.MULTILINE)
    assert held and after, stdout
    assert int(after[1]) > int(held[1])
    # 2. the cluster: a controller, four live nodes through n3's API.
    # The epoch in full, then when it was granted (its time part).
    controller = r"^controller: n[0-3] at epoch \d{16} \(granted 20\d\d-\d\d-\d\d [\d:.]+ UTC\)$"
    assert re.search(controller, stdout, re.MULTILINE), stdout
    assert "127.0.0.1:7410" in stdout
    # 3. placement
    assert "created counter orders: 4 partition(s) x 2" in stdout
    assert all(re.search(rf"orders/{p} .* ok ", stdout) for p in range(4)), stdout
    # 4. the cascade
    assert "root: root of set bank at sqlite:///" in stdout
    assert "leaf: leaf of branch in set bank at sqlite:///" in stdout
    assert "leaf: accounts copying" in stdout
    assert re.search(r"accounts\s*.*equal", stdout), stdout
    # 5. the switchover and the status after it
    assert re.search(r"^branch is the root from tick \d+; root is its branch$", stdout, re.M)
    assert stdout.count("set bank: root branch") == 1, stdout
    print(f"quickstart ran in {took:.0f}s")
