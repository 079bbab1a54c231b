"""Test helpers for Ember users and Ember's own tests: real etcd processes (EtcdProcess),
multi-node clusters of real service processes on loopback (LocalCluster), and wait_for."""
from __future__ import annotations

from ._etcd import EtcdProcess, find_etcd
from .cluster import LocalCluster, Node, wait_for

__all__ = ["EtcdProcess", "LocalCluster", "find_etcd", "Node", "wait_for"]
