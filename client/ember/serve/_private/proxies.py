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

from ember_common.proto import gcs_pb2

NAMESPACE = "serve"
PREFIX = b"proxies/"


def _core() -> Any:
    from ember._private.worker import global_worker

    return global_worker().core


def register(host: str, port: int) -> bytes:
    core = _core()
    key = PREFIX + f"{socket.gethostname()}:{port}".encode()
    value = json.dumps({"host": host, "port": port, "hostname": socket.gethostname(), "pid": os.getpid()}).encode()
    core.gcs_call(lambda: core.gcs.KVPut(gcs_pb2.KVPutRequest(namespace=NAMESPACE, key=key, value=value,
                                                              overwrite=True), timeout=10))
    return key


def unregister(key: bytes) -> None:
    core = _core()
    core.gcs_call(lambda: core.gcs.KVDel(gcs_pb2.KVDelRequest(namespace=NAMESPACE, key=key), timeout=10),
                  retry_for_s=5)


def running() -> list[dict[str, Any]]:
    """Registered proxies that are not known to be dead."""
    core = _core()
    keys = core.gcs_call(lambda: core.gcs.KVKeys(gcs_pb2.KVKeysRequest(namespace=NAMESPACE, prefix=PREFIX),
                                                 timeout=10)).keys
    out = []
    for key in keys:
        reply = core.gcs_call(lambda: core.gcs.KVGet(gcs_pb2.KVGetRequest(namespace=NAMESPACE, key=key), timeout=10))
        if not reply.found:
            continue
        info = json.loads(reply.value)
        if info.get("hostname") == socket.gethostname() and not psutil.pid_exists(info.get("pid", -1)):
            unregister(key)
            continue
        out.append(info)
    return out
