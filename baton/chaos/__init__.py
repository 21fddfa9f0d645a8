"""baton's fault campaign: a cluster of hosts in network namespaces, a nemesis, a history and a
checker that judges the history and the node databases only (``make chaos``; docs/reliability.md).
"""
