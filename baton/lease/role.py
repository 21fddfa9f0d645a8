"""What a node is for one thing led under a lease (a placed group's member, a channel's
stream): its leader, a follower of it, or neither (placed but not started, not subscribed)."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"
