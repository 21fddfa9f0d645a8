"""The cascade over Spark Connect (a server started for the module, Spark on local[2] inside
it): ``baton cascade run --spark-remote sc://...`` serves the branch and the leaf as a Connect
client, so their streaming queries run on the server. The client is SIGKILLed mid-stream: its
queries go on applying on the server (a client's death does not stop them), until the next
client, which reattaches to the same server session by name, stops them before starting its
own. Every node ends with the root's rows, every event copied exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from baton.spark.worker import query_owner
from baton.testing.spark_servers import ConnectServer
from baton.testing.waiting import wait_for
from tests.spark_deploy.procs import Cascade

#: Lists the worker queries of the named server session, from another client (which must not
#: stop the session: that would close it).
ACTIVE = """
import json, sys
from baton.spark.session import build_session
s = build_session(remote=sys.argv[1], connect_session=sys.argv[2])
print(json.dumps(sorted(q.name for q in s.streams.active)))
"""


def active_queries(remote: str, session: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", ACTIVE, remote, session],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    names: list[str] = json.loads(out.splitlines()[-1])
    return names


def stopped_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "stopping the query of an older worker" in line]


def test_killed_connect_client_is_replaced(connect_server: ConnectServer, cascade: Cascade) -> None:
    subs_locations = [cascade.loc["s2"], cascade.loc["s3"]]
    session = "baton-cascade-run:" + ",".join(sorted(subs_locations))
    remote = ["--spark-remote", connect_server.url]
    cascade.run("root", [cascade.loc["s1"]])
    first = cascade.run("subs", subs_locations, *remote)
    cascade.start_writing()
    wait_for(lambda: cascade.position("s3") > 2, timeout=150, what="the leaf's first batches")

    def both_running() -> list[str] | None:
        names = active_queries(connect_server.url, session)
        nodes = sorted((o[0], o[1]) for o in map(query_owner, names) if o)
        return names if nodes == [("S", "s2"), ("S", "s3")] else None

    old = wait_for(both_running, timeout=60, interval=0.5, what="both workers' queries")
    owners = [query_owner(name) for name in old]

    # The client dies; its queries do not: the leaf goes on being applied by them.
    first.signal(signal.SIGKILL)
    first.popen.wait(30)
    after_kill = cascade.position("s3")
    wait_for(lambda: cascade.position("s3") > after_kill, timeout=30, what="the orphans to apply")

    # The next client stops the orphans (older epochs) before it starts its own queries.
    second = cascade.run("subs", subs_locations, *remote)
    wait_for(lambda: len(stopped_lines(second.lines())) == 2, timeout=90, what="orphans stopped")
    stopped = " ".join(stopped_lines(second.lines()))
    assert all(name in stopped for name in old), stopped

    def replaced() -> list[str] | None:
        names = active_queries(connect_server.url, session)
        return names if len(names) == 2 and not set(names) & set(old) else None

    new = wait_for(replaced, timeout=60, interval=0.5, what="the new client's queries")
    by_node = {o[1]: o[2] for o in map(query_owner, new) if o}
    assert all(by_node[n] > e for _, n, e in filter(None, owners)), (old, new)

    cascade.stop_writing()
    upto = cascade.wait_synced()
    cascade.check_equal(upto)
    assert sum(cascade.written) > 200
    # Over Connect, quiet sessions say in one line which settings are the server's; Spark's
    # CANNOT_MODIFY_CONFIG warnings and tracebacks never reach the terminal.
    out = "\n".join(first.lines() + second.lines())
    assert "left to the server" in out
    assert "CANNOT_MODIFY_CONFIG" not in out and "Traceback" not in out
