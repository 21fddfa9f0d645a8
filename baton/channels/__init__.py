"""Live channels (seed 000): one upstream stream per channel across the cluster, led under a
fenced lease; subscribers at any node."""
