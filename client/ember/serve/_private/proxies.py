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

from ember_common import backoff

NAMESPACE = "serve"
PREFIX = b"proxies/"


def _core() -> Any:
    from ember._private.worker import global_worker

    return global_worker().core


def register(host: str, port: int) -> bytes:
    core = _core()
    key = PREFIX + f"{socket.gethostname()}:{port}".encode()
    value = json.dumps({"host": host, "port": port, "hostname": socket.gethostname(), "pid": os.getpid()}).encode()
    core.gcs_call(lambda: core.gcs.internal_kv_put(NAMESPACE, key, value, overwrite=True, timeout_s=10))
    return key


def unregister(key: bytes) -> None:
    core = _core()
    core.gcs_call(lambda: core.gcs.internal_kv_del(NAMESPACE, key, timeout_s=10,
                                                   retry=backoff.SERVICE_RESTART.replace(deadline_s=5)))


def running() -> list[dict[str, Any]]:
    """Registered proxies that are not known to be dead."""
    core = _core()
    keys = core.gcs_call(lambda: core.gcs.internal_kv_keys(NAMESPACE, PREFIX, timeout_s=10))
    out = []
    for key in keys:
        value = core.gcs_call(lambda: core.gcs.internal_kv_get(NAMESPACE, key, timeout_s=10))
        if value is None:
            continue
        info = json.loads(value)
        if info.get("hostname") == socket.gethostname() and not psutil.pid_exists(info.get("pid", -1)):
            unregister(key)
            continue
        out.append(info)
    return out
