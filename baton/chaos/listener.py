"""The campaign's channel subscribers: one per host, each connected to its own host's node API,
recording every frame the node sends, unfiltered.

:class:`baton.channels.Client` drops what a user should never see (an older epoch, an offset
twice), so a defect in the nodes would not show in what it yields; these subscribers speak the
documented protocol themselves and keep everything for the checker. After a dropped connection
they subscribe again with ``since`` set to the highest epoch and offset they have received, as
the protocol says a client recovers, so a node that delivers anything older is caught.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import TYPE_CHECKING, Any

from baton.chaos.history import History

if TYPE_CHECKING:
    from baton.chaos.cluster import ChaosCluster

#: The channel every host's subscriber follows: a tick every 0.2 s from its one upstream.
CHANNEL = "tick:chaos,every=0.2"


class Listeners(threading.Thread):
    """Subscribers of :data:`CHANNEL` at every host, in one thread with its own event loop."""

    def __init__(self, cluster: ChaosCluster) -> None:
        super().__init__(daemon=True, name="chaos-listeners")
        self.cluster = cluster
        self.history = History(cluster.history_dir, "listeners")
        #: Per host, the monotonic time of the last publication received.
        self.last_pub: dict[str, float] = {}
        self._loop = asyncio.new_event_loop()
        self._halt: asyncio.Event | None = None

    def fresh(self, within: float) -> list[str]:
        """The hosts whose subscriber has had no publication in the last ``within`` seconds."""
        now = time.monotonic()
        return [h for h in self.cluster.hosts if now - self.last_pub.get(h, 0.0) > within]

    def run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._loop.close()
            self.history.close()

    def halt(self) -> None:
        if self._halt is not None:
            self._loop.call_soon_threadsafe(self._halt.set)
        self.join(10)

    async def _main(self) -> None:
        self._halt = asyncio.Event()
        tasks = [asyncio.create_task(self._follow(h)) for h in self.cluster.hosts]
        await self._halt.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, host: str) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import WebSocketException

        url = f"ws://{self.cluster.net.address(host)}:{self.cluster.ports[host]}/v1/channels/ws"
        since: dict[str, int] | None = None
        conn = 0
        while True:
            conn += 1
            try:
                async with connect(
                    url,
                    additional_headers={"authorization": f"Bearer {self.cluster.token}"},
                    open_timeout=3,
                    ping_interval=2,
                    ping_timeout=2,
                    close_timeout=1,
                ) as ws:
                    frame: dict[str, Any] = {"type": "subscribe", "channel": CHANNEL}
                    if since is not None:
                        frame["since"] = since
                    await ws.send(json.dumps(frame))
                    self.history.record("channel-subscribe", host=host, conn=conn, since=since)
                    async for message in ws:
                        for line in str(message).splitlines():
                            got = json.loads(line)
                            since = self._seen(host, conn, got, since)
                            if got.get("type") == "unsubscribed":
                                # The leader did not answer or changed: ask again, recovering.
                                await asyncio.sleep(0.5)
                                frame = {"type": "subscribe", "channel": CHANNEL}
                                if since is not None:
                                    frame["since"] = since
                                await ws.send(json.dumps(frame))
            except (OSError, TimeoutError, WebSocketException, ValueError):
                pass
            self.history.record("channel-disconnect", host=host, conn=conn)
            await asyncio.sleep(0.5)

    def _seen(
        self, host: str, conn: int, got: dict[str, Any], since: dict[str, int] | None
    ) -> dict[str, int] | None:
        kind = got.get("type")
        epoch, offset = int(got.get("epoch", 0)), int(got.get("offset", 0))
        data = got.get("data") if kind == "pub" else None
        self.history.record(
            "channel-frame",
            host=host,
            conn=conn,
            type=kind,
            epoch=epoch,
            offset=offset,
            at=data.get("at") if isinstance(data, dict) else None,
            code=got.get("code"),
        )
        if kind == "pub":
            self.last_pub[host] = time.monotonic()
        if kind in ("subscribed", "pub", "gap") and (
            since is None or (epoch, offset) > (since["epoch"], since["offset"])
        ):
            return {"epoch": epoch, "offset": offset}
        return since


def stop(listeners: Listeners | None) -> None:
    """Stop ``listeners`` if they were started (a campaign that failed early has none)."""
    if listeners is not None and listeners.is_alive():
        with contextlib.suppress(RuntimeError):
            listeners.halt()
