"""The autoscaler's insides: the pure policy (policy.py, binpack.py), the cluster config, the loop
and the node providers (README.md)."""
