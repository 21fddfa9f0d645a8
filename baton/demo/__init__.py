"""``baton demo``: a walk through every part of baton on one machine (:mod:`baton.demo.tour`),
one module per part: placement, channels, the cascade on Spark and its partitions, store
failover."""

from baton.demo.tour import run_demo

__all__ = ["run_demo"]
