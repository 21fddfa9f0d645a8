"""Store failover (seed 002): a Redis master switch that happens only when every client agrees.

* :func:`master_client` (from :mod:`baton.store.master_file`): the worker library, a redis-py
  client that follows the master file its host's configuration client keeps.
* :mod:`baton.failover.client`: the configuration client role (one per worker host).
* :mod:`baton.failover.server`: the configuration server role (one or more): checks, rounds,
  periodic reconfigure; it talks to the Redis servers through :mod:`baton.failover.redis_io`
  and to the clients through :mod:`baton.failover.messages`, and shows itself through
  :mod:`baton.failover.status`. :mod:`baton.failover.serve` runs it and holds the planned
  :func:`~baton.failover.serve.switch`.
* :mod:`baton.failover.decide`: round tokens and the rules, pure.

See ``docs/failover.md``.
"""

from baton.store.master_file import async_master_client, master_client, read_master

__all__ = ["async_master_client", "master_client", "read_master"]
