"""Ember GCS service: node table, job table, internal KV and the cluster change feed."""
