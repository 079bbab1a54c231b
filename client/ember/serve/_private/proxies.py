"""The registry of running HTTP proxies in the GCS KV (namespace "serve", keys "proxies/...").

Each proxy registers itself when it serves and removes itself on a graceful stop. `serve.run`
without an explicit host/port uses a registered proxy (e.g. the one docker compose runs) instead
of starting an embedded one. Entries of proxies that died on this host are ignored and removed.
"""
from __future__ import annotations

import json
import os
import socket
from typing import Any

import psutil

from ember._private.doors import internal_kv as kv

NAMESPACE = "serve"
PREFIX = b"proxies/"


def register(host: str, port: int) -> bytes:
    """Records this process's proxy at host:port; returns its key (for `unregister`)."""
    key = PREFIX + f"{socket.gethostname()}:{port}".encode()
    value = json.dumps({"host": host, "port": port, "hostname": socket.gethostname(), "pid": os.getpid()}).encode()
    kv._internal_kv_put(key, value, overwrite=True, namespace=NAMESPACE)
    return key


def unregister(key: bytes) -> None:
    """Removes a proxy's entry; gives up after 5 s (the GCS may be gone at shutdown)."""
    kv._internal_kv_del(key, namespace=NAMESPACE, timeout=5)


def running() -> list[dict[str, Any]]:
    """Registered proxies that are not known to be dead."""
    out = []
    for key in kv._internal_kv_list(PREFIX, namespace=NAMESPACE):
        value = kv._internal_kv_get(key, namespace=NAMESPACE)
        if value is None:
            continue
        info = json.loads(value)
        if info.get("hostname") == socket.gethostname() and not psutil.pid_exists(info.get("pid", -1)):
            unregister(key)
            continue
        out.append(info)
    return out
