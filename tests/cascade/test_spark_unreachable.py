"""Issue 28, point 4: a Spark master or Spark Connect server that does not answer is said in
one line naming the URL and what to check, within seconds, and waited for as a node database
is, with no Java or Python trace. Before, a dead standalone master gave 76-92 s of silence and
then exit 70 with a flattened Java trace; a dead Connect server gave no line for over ten
minutes. No JVM starts here: the first connection is tried before one would."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from baton.cascade import node_ops
from baton.cascade.model import Role
from baton.local.processes import Proc
from baton.local.waiting import wait_for
from baton.testing import free_port
from baton.testing.workload import create_accounts
from tests.test_cli import BATON


@pytest.mark.parametrize(
    ("option", "url", "said"),
    [
        ("--spark-master", "spark://127.0.0.1:{port}", "the standalone master runs"),
        ("--spark-remote", "sc://127.0.0.1:{port}", "its Spark Connect server runs"),
    ],
)
def test_a_spark_that_does_not_answer_is_one_line_then_retried(
    tmp_path: Path, option: str, url: str, said: str
) -> None:
    loc = {n: f"sqlite://{tmp_path}/{n}.db" for n in ("s1", "s2")}
    for n in loc:
        create_accounts(tmp_path / f"{n}.db")
    node_ops.create_root("s1", loc["s1"], "S")
    node_ops.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    url = url.format(port=free_port())
    argv = [BATON, "cascade", "run", loc["s2"], option, url, "--store",
            f"sqlite://{tmp_path}/store.db", "--spark-dir", str(tmp_path / "spark")]  # fmt: skip
    proc = Proc("s2", argv, tmp_path / "s2.log")
    try:
        line = wait_for(
            lambda: next((x for x in proc.lines() if "waiting for spark" in x), None),
            timeout=60,
            what="one line about the Spark that does not answer",
        )
        assert f"{url} does not answer" in line and said in line, line
        assert "Connection refused" in line, line
        assert proc.popen.poll() is None, proc.out.read_text()  # it waits, it does not exit
        assert sum("starting spark" in x for x in proc.lines()) == 1  # not once per retry
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(30) == 0, proc.out.read_text()
        text = proc.out.read_text()
        for bad in ("Traceback", "Py4J", "at org.apache", "ERROR"):
            assert bad not in text, (bad, text)
    finally:
        proc.stop()
