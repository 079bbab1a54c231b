"""Ember raylet: per-node resources, worker pool, worker leases and local-first scheduling."""
