"""The last part of ``baton demo``: the web dashboard (docs/dashboard.md) of a node agent,
showing the cascade sets the demo built.

One ``baton node`` agent starts on a store of its own. The demo's sets were served by the
demo's own workers, not by an agent, so the agent would not know where they are: each of their
non-root nodes' reach (whether it reaches its root) is reported once, as an agent serving it
reports it, and that is how the dashboard finds them. The demo prints the page's address and
where the token is. When stdin is a terminal (or ``keep`` is set) the agent stays up until
Enter (or Ctrl-C); otherwise, as under ``make demo < /dev/null`` or in CI, it checks that the
dashboard shows the sets and stops.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

import httpx
from rich.console import Console

from baton.local.cluster import LocalCluster
from baton.local.waiting import WaitTimeout
from baton.service.reach import probe, report
from baton.store import open_store


async def _report_sets(store_url: str, databases: list[Path]) -> int:
    """Report every non-root node database's reach; how many were reported."""
    done = 0
    async with open_store(store_url) as store:
        for path in databases:
            found = await asyncio.to_thread(probe, f"sqlite://{path}")
            if found is not None:
                await report(store, found, None)
                done += 1
    return done


def _wait_for_enter(console: Console, keep: bool) -> None:
    """Hold the agent up: until Enter on a terminal, else (``--keep``) until Ctrl-C."""
    try:
        if sys.stdin.isatty():
            console.input("[bold]press Enter to stop the dashboard[/] ")
        elif keep:
            console.print("the dashboard stays up until Ctrl-C")
            threading.Event().wait()
    except (KeyboardInterrupt, EOFError):
        console.print()


def dashboard_part(console: Console, workdir: Path, cascades: Path, keep: bool | None) -> bool:
    """Start the agent, show where its dashboard is, and keep it up as asked. ``cascades``:
    the folder of the demo's node databases. True when the dashboard showed the sets."""
    console.rule("[bold]the web dashboard")
    hold = sys.stdin.isatty() if keep is None else keep
    cluster = LocalCluster(1, data_dir=workdir, ttl=2.0)
    with cluster:
        try:
            cluster.wait_for(cluster.controller, timeout=30)
        except WaitTimeout:
            console.print(f"[red]the dashboard's agent did not start[/] (log: {workdir}/n0.log)")
            return False
        databases = sorted(cascades.rglob("*.db")) if cascades.is_dir() else []
        reported = asyncio.run(_report_sets(cluster.store_url, databases))
        node = cluster.node("n0")
        t0 = time.monotonic()
        sets: list[str] = []
        while time.monotonic() - t0 < 15:
            try:
                res = node.get("/v1/ui/snapshot")
            except httpx.HTTPError:
                res = None
            if res is not None and res.status_code == 200:
                sets = [s["set"] for s in res.json()["sets"]]
                if sets or not reported:
                    break
            time.sleep(0.2)
        ok = bool(sets) or not reported
        shown = ", ".join(sets) or "none"
        console.print(f"dashboard: [bold]{node.url}/ui[/] (cascade sets shown: {shown})")
        console.print(f"sign in with the cluster token in {cluster.token_file}")
        if not ok:
            console.print("[red]the dashboard did not show the demo's sets[/]")
        if hold:
            _wait_for_enter(console, keep is True)
    return ok


__all__ = ["dashboard_part"]
