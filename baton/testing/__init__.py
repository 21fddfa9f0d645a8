"""baton's public test kit: real servers, waiting with deadlines, fenced resources.

Tests built on it never sleep and then assert: they wait for a condition with a deadline
(:func:`wait_for`, :func:`await_for`) and fail with a message naming what did not happen.
"""

from baton.local.ports import free_port
from baton.local.waiting import await_for, wait_for
from baton.testing.clock import ManualClock
from baton.testing.fenced import FencedLog
from baton.testing.servers import EtcdCluster, EtcdServer, PostgresServer, RedisServer

__all__ = [
    "EtcdCluster",
    "EtcdServer",
    "FencedLog",
    "ManualClock",
    "PostgresServer",
    "RedisServer",
    "await_for",
    "free_port",
    "wait_for",
]
