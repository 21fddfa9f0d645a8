"""Node-to-node HTTP calls, authenticated with the cluster token: the node agent's name for the
one shared transport (:mod:`baton.transport`), which the channel hub uses too."""

from __future__ import annotations

from baton.errors import PeerError
from baton.transport import PeerTransport


class Peers(PeerTransport):
    """A pooled client for calling other nodes' APIs (the controller's ``Peers``)."""


__all__ = ["PeerError", "Peers"]
