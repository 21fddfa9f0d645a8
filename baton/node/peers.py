"""Node-to-node HTTP calls (httpx), authenticated with the cluster token.

Outgoing connections leave from the node's listen address when it listens on a specific one, so
that what another node sees as the source is this node (and a firewall rule about this node
applies to its calls as well as to its API).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx

from baton.errors import PeerError


def _local_address(host: str) -> str | None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return None if ip.is_unspecified else str(ip)


class Peers:
    """A pooled client for calling other nodes' APIs."""

    def __init__(self, token: str, timeout: float, listen_host: str) -> None:
        self._token = token
        transport = httpx.AsyncHTTPTransport(local_address=_local_address(listen_host))
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=timeout,
            headers={"authorization": f"Bearer {token}"},
        )

    async def call(
        self, address: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``method path`` on the node at ``address`` (host:port); the JSON answer."""
        try:
            res = await self._client.request(method, f"http://{address}{path}", json=body)
        except httpx.HTTPError as exc:
            # httpx messages never include headers, so the token cannot leak from here.
            raise PeerError(f"{address} unreachable: {type(exc).__name__}") from None
        if res.status_code >= 400:
            detail = res.text[:200] if res.status_code != 401 else "unauthorized"
            raise PeerError(f"{address} answered {res.status_code}: {detail}", res.status_code)
        data = res.json()
        if not isinstance(data, dict):
            raise PeerError(f"{address} answered something that is not a JSON object")
        return data

    async def close(self) -> None:
        await self._client.aclose()


__all__ = ["PeerError", "Peers"]
