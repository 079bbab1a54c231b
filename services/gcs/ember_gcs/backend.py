"""Opens the GCS storage backend named by a URL ("memory" or "etcd://[user@]host:port[,...]").

An etcd with authentication on (the ember-etcd image's) takes the password from
EMBER_ETCD_PASSWORD (ember_gcs.storage.ETCD_PASSWORD_ENV), never from the URL, which the GCS logs;
the user is the URL's `user@` part, `root` by default.

Kept apart from storage.py (the interface) so that the interface never imports a backend:
storage <- etcd_storage, and both <- backend.
"""
from __future__ import annotations

from .storage import MemoryStorage, Storage


def open_storage(url: str, cluster_name: str = "default", password: str | None = None) -> Storage:
    """Storage for a URL: "memory" or "etcd://[user@]host:port[,host:port...]" (password: etcd's
    password of that user, for an etcd with authentication on)."""
    if url in ("", "memory", "memory://"):
        return MemoryStorage()
    if url.startswith("etcd://"):
        from .etcd_storage import EtcdStorage

        user, _, endpoints = url[len("etcd://"):].rpartition("@")
        if ":" in user:
            raise ValueError(f"GCS storage {url!r}: a password in the URL is refused (the GCS logs its "
                             "storage URL); set EMBER_ETCD_PASSWORD instead")
        return EtcdStorage(endpoints, cluster_name=cluster_name, user=user or None, password=password)
    raise ValueError(f"unknown GCS storage {url!r}: expected 'memory' or 'etcd://host:port'")
