"""Screenshots of every view of the web dashboard, for docs/dashboard.md (docs/img/dashboard-*.png).

    .venv/bin/python scripts/screenshots.py [--out docs/img] [--seconds 40]

Starts three ``baton node`` agents on an SQLite store, places a few objects, subscribes to a
channel, and builds a cascade set on SQLite node databases (orders: s1 root, s2 and s3 branches,
s4 leaf of s2) whose root takes writes and ticks while s2 and s4 apply and s3 is paused, so
that its lag grows. The workers' part is done here without Spark, as the tests do (a heartbeat and
the apply of each batch). After ``--seconds`` of that, Debian's chromium (through Playwright)
signs in and takes one screenshot per view, plus the sign-in form and a switchover's
confirmation with its pre-check.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

from baton.cascade import commands, node_ops
from baton.cascade.beat import Phase
from baton.cascade.db import open_node_db
from baton.cascade.model import Role
from baton.local.cluster import LocalCluster
from baton.placement.records import create_object, make_object
from baton.service.reach import probe, report
from baton.store import open_store
from baton.testing.cascade import apply_from_provider, served
from baton.testing.workload import create_accounts, run_workload

VIEWS = ("nodes", "placement", "cascade", "channels", "failover", "timeline")


def build_set(d: Path) -> dict[str, str]:
    loc = {n: f"sqlite://{d / n}.db" for n in ("s1", "s2", "s3", "s4")}
    for n in loc:
        create_accounts(d / f"{n}.db")
    commands.create_root("s1", loc["s1"], "orders")
    commands.create_subscriber(Role.BRANCH, "s2", loc["s2"], "s1", loc["s1"])
    commands.create_subscriber(Role.BRANCH, "s3", loc["s3"], "s1", loc["s1"])
    commands.create_subscriber(Role.LEAF, "s4", loc["s4"], "s2", loc["s1"])
    commands.add_table(loc["s1"], "accounts", None, True)
    for n in ("s2", "s3", "s4"):
        node_ops.copy_table(loc[n], "accounts")
    return loc


def apply_for(location: str) -> None:
    """What a node's worker does, without Spark: apply what its provider ticked."""
    apply_from_provider(location)


@contextlib.contextmanager
def activity(d: Path, loc: dict[str, str]) -> Iterator[None]:
    """Writes and ticks at the root; s2 and s4 apply; s3 is paused."""
    halt = threading.Event()
    commands.set_paused(loc["s1"], "s3", True)

    def run() -> None:
        seed = 1
        while not halt.wait(0.4):
            run_workload(d / "s1.db", 3, seed=seed)
            seed += 1
            with open_node_db(loc["s1"]) as db, db.transaction() as cur:
                db.make_tick(cur)
            for n in ("s2", "s4"):
                apply_for(loc[n])

    thread = threading.Thread(target=run, daemon=True)
    with (
        served(loc["s1"], phase=Phase.TICKING),
        served(loc["s2"]),
        served(loc["s4"]),
    ):
        thread.start()
        try:
            yield
        finally:
            halt.set()
            thread.join()


def shoot(page: Page, out: Path, name: str) -> None:
    page.screenshot(path=str(out / f"dashboard-{name}.png"), full_page=True)
    print(f"wrote {out / f'dashboard-{name}.png'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    ap.add_argument("--seconds", type=float, default=40.0, help="activity before the shots")
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("no chromium: run scripts/setup.sh (apt-get install chromium)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="baton-shots-"))
    loc = build_set(d)
    with LocalCluster(3, data_dir=d / "cluster", ttl=2.0) as cluster, activity(d, loc):
        cluster.wait_for(cluster.controller, timeout=60)

        async def setup() -> None:
            async with open_store(cluster.store_url) as store:
                found = probe(loc["s2"])
                assert found is not None
                await report(store, found, None)  # how the agents learn where the set is
                for i in range(4):
                    await create_object(store, make_object("counter", f"jobs-{i}", 1, 2))

        asyncio.run(setup())
        node = cluster.node("n0")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{node.url}/ui")
            shoot(page, args.out, "login")
            page.fill("#token", cluster.token)
            page.click("#login-form button[type=submit]")
            expect(page.locator("body")).to_have_attribute("data-state", "signed-in")
            page.evaluate(
                """([token]) => {
                    const ws = new WebSocket(`ws://${location.host}/v1/channels/ws`);
                    window.keep = ws;
                    ws.onopen = () => {
                        ws.send(JSON.stringify({type: "auth", token}));
                        ws.send(JSON.stringify({type: "subscribe", channel: "tick:clock,every=1"}));
                    };
                }""",
                [cluster.token],
            )
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                page.wait_for_timeout(1000)  # the lag history grows meanwhile
            for view in VIEWS:
                page.click(f"a[data-view={view}]")
                page.wait_for_timeout(300)
                shoot(page, args.out, view)
            page.click("a[data-view=cascade]")
            page.locator('[data-member="s2"] [data-op=switchover]').click()
            expect(page.locator("#confirm-body")).to_contain_text("Pre-check passed")
            shoot(page, args.out, "switchover")
            page.click("#confirm-cancel")
            browser.close()
    shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
