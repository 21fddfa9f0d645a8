"""baton: fenced leadership, placement and cascaded replication."""
