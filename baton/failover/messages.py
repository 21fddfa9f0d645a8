"""What a configuration server says to the configuration clients: the round's messages
(``ping``, ``invalidate``, ``reconfigure``, ``hold``) over HTTP to every client at once, and
each client's answer and state as typed values.

A client that cannot be reached or answers something else is a :class:`Reply` without an
answer and with the reason, never an exception: a round decides on the replies of all clients
(see :mod:`baton.failover.decide`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from baton import logs
from baton.errors import ConfigError
from baton.failover.decide import ClientReport, ClientState, Token
from baton.store.master_file import Address, parse_address


@dataclass
class Reply:
    client: str
    answer: str | None
    """None: not reached (or an error); the reason says why."""
    reason: str = ""
    report: ClientReport | None = None
    """The client's state after answering (None when it did not answer)."""

    @property
    def highest(self) -> Token | None:
        return None if self.report is None else self.report.state.highest

    def to_json(self) -> dict[str, Any]:
        state = None if self.report is None else self.report.state
        return {
            "client": self.client,
            "answer": self.answer,
            "reason": self.reason,
            **(ClientState() if state is None else state).to_json(),
            "master": None
            if self.report is None or self.report.master is None
            else str(self.report.master),
        }


def report_of(data: dict[str, Any]) -> ClientReport:
    """A client's ``/v1/state`` (or an answer carrying it) as a :class:`ClientReport`;
    :class:`ConfigError` when it is not one."""
    master = data.get("master")
    quiet = data.get("quiet", 0.0)
    return ClientReport(
        ClientState.from_json(data),
        None if not master else parse_address(str(master)),
        float(quiet) if isinstance(quiet, int | float) and not isinstance(quiet, bool) else 0.0,
    )


class Clients:
    """Every configuration client, as one configuration server reaches them."""

    def __init__(
        self, clients: Mapping[str, Address], request_timeout: float, token: str | None
    ) -> None:
        self.clients = clients
        # A client answers a ping or an invalidate after trying the old master for up to
        # request_timeout (sent as check_timeout): wait for that, plus a request's own time.
        self._http = httpx.AsyncClient(
            timeout=2 * request_timeout + 0.5,
            headers={"authorization": f"Bearer {token}"} if token else {},
        )

    async def close(self) -> None:
        await self._http.aclose()

    def url(self, cid: str) -> str:
        return f"http://{self.clients[cid]}"

    async def send(self, cid: str, kind: str, body: Mapping[str, Any]) -> Reply:
        url = f"{self.url(cid)}/v1/{kind}"
        try:
            res = await self._http.post(url, json={"client": cid, **body})
        except httpx.HTTPError as exc:
            return Reply(cid, None, f"not reached: {logs.describe(exc)}")
        try:
            data = res.json()
        except ValueError:
            data = {}
        if res.status_code != 200 or not isinstance(data, dict):
            detail = data.get("error") if isinstance(data, dict) else None
            return Reply(cid, None, f"answered {res.status_code}: {detail or res.text[:200]}")
        try:
            return Reply(
                cid, str(data.get("answer")), str(data.get("reason") or ""), report_of(data)
            )
        except ConfigError as exc:
            return Reply(cid, None, f"bad answer: {exc}")

    async def broadcast(self, kind: str, body: Mapping[str, Any]) -> list[Reply]:
        return list(await asyncio.gather(*(self.send(cid, kind, body) for cid in self.clients)))

    async def states(self) -> dict[str, dict[str, Any] | str]:
        """Each client's ``/v1/state`` (or why it could not be read)."""

        async def one(cid: str) -> tuple[str, dict[str, Any] | str]:
            try:
                res = await self._http.get(f"{self.url(cid)}/v1/state")
            except httpx.HTTPError as exc:
                return cid, f"not reached: {logs.describe(exc)}"
            if res.status_code != 200:
                return cid, f"answered {res.status_code}"
            try:
                data = res.json()
            except ValueError:
                data = None
            if not isinstance(data, dict):
                return cid, "answered something that is not a client's state"
            if data.get("client") != cid:
                return cid, f"answered as client {data.get('client')!r}"
            return cid, data

        return dict(await asyncio.gather(*(one(c) for c in self.clients)))

    async def reports(self) -> list[ClientReport]:
        """What every client that answers says of itself (``/v1/state``)."""
        out = []
        for data in (await self.states()).values():
            if isinstance(data, dict):
                with contextlib.suppress(ConfigError):
                    out.append(report_of(data))
        return out


__all__ = ["Clients", "Reply", "report_of"]
