"""Store failover (seed 002): a Redis master switch that happens only when every client agrees."""
