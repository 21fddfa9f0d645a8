"""``baton up``'s local cluster: real ``baton node`` processes on one host
(:class:`~baton.local.cluster.LocalCluster`), with the process, port and waiting tools it is
built on. The test kit (:mod:`baton.testing`) builds on it and re-exports what tests use."""
