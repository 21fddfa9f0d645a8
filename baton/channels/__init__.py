"""Live channels (seed 000): one upstream stream per channel across the cluster, led under a
fenced lease; subscribers at any node. See ``docs/channels.md``.

* :class:`Handler` is the contract a namespace's handler implements (entry points
  ``baton.channels``); ``tick:`` and ``cascade:`` are built in.
* :class:`~baton.channels.hub.ChannelHub` runs a node's channels (the node agent serves it).
* :class:`Client` subscribes at any node, reconnects and recovers.
"""

from baton.channels.client import Client, Message, Subscription
from baton.channels.handler import Channel, Context, Handler, User, parse_channel

__all__ = [
    "Channel",
    "Client",
    "Context",
    "Handler",
    "Message",
    "Subscription",
    "User",
    "parse_channel",
]
