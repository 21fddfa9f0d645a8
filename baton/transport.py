"""Node-to-node HTTP calls: one transport for every caller (the node agent's peers, a channel
hub forwarding subscribes to a leader and asking other nodes for their channels).

Calls carry the cluster token. Outgoing connections leave from the node's listen address when
it listens on a specific one, so that what another node sees as the source is this node (and a
firewall rule about this node applies to its calls as well as to its API). Failures are
:class:`~baton.errors.PeerError`: unreachable (``status`` None) or an error answer (its status).
"""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx

from baton.errors import PeerError


def local_address(host: str | None) -> str | None:
    """The address outgoing connections leave from: ``host`` when it is one specific IP
    address, else None (any: a name, or an unspecified address like ``0.0.0.0``)."""
    if not host:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return None if ip.is_unspecified else str(ip)


class PeerTransport:
    """A pooled HTTP client for calling other nodes' APIs (``address`` is ``host:port``).
    ``timeout`` bounds each call, in real seconds: it is about the network, not about any
    timer logic."""

    def __init__(self, token: str, timeout: float, listen_host: str | None) -> None:
        transport = httpx.AsyncHTTPTransport(local_address=local_address(listen_host))
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=timeout,
            headers={"authorization": f"Bearer {token}"},
        )

    async def call(
        self, address: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``method path`` on the node at ``address``; the JSON object it answered."""
        try:
            res = await self._client.request(method, f"http://{address}{path}", json=body)
        except httpx.HTTPError as exc:
            # httpx messages never include headers, so the token cannot leak from here.
            raise PeerError(f"{address} unreachable: {type(exc).__name__}") from None
        if res.status_code >= 400:
            detail = res.text[:200] if res.status_code != 401 else "unauthorized"
            raise PeerError(f"{address} answered {res.status_code}: {detail}", res.status_code)
        try:
            data = res.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise PeerError(f"{address} answered something that is not a JSON object")
        return data

    async def close(self) -> None:
        await self._client.aclose()


__all__ = ["PeerTransport", "local_address"]
