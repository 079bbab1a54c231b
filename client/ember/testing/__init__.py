"""Test helpers for Ember users and Ember's own tests: real etcd processes (EtcdProcess),
multi-node clusters of real service processes on loopback (LocalCluster), replicated GCS
processes that elect a leader (GcsReplicas), wait_for and process_gone."""
from __future__ import annotations

from ._etcd import EtcdProcess, find_etcd
from .cluster import LocalCluster, Node, process_gone, wait_for
from .gcs_replicas import GcsReplicas

__all__ = ["EtcdProcess", "GcsReplicas", "LocalCluster", "find_etcd", "Node", "process_gone", "wait_for"]
