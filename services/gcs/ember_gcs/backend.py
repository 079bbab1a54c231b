"""Opens the GCS storage backend named by a URL ("memory" or "etcd://host:port[,...]").

Kept apart from storage.py (the interface) so that the interface never imports a backend:
storage <- etcd_storage, and both <- backend.
"""
from __future__ import annotations

from .storage import MemoryStorage, Storage


def open_storage(url: str, cluster_name: str = "default") -> Storage:
    """Storage for a URL: "memory" or "etcd://host:port[,host:port...]"."""
    if url in ("", "memory", "memory://"):
        return MemoryStorage()
    if url.startswith("etcd://"):
        from .etcd_storage import EtcdStorage

        return EtcdStorage(url[len("etcd://"):], cluster_name=cluster_name)
    raise ValueError(f"unknown GCS storage {url!r}: expected 'memory' or 'etcd://host:port'")
