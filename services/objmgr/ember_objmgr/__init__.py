"""Ember object manager: the node's shared-memory object store and node-to-node transfer."""
