"""Where a node's worker ledger lives in the GCS internal KV, and how it is written.

The raylet keeps the ids of the workers it started under `workers/<node id>` in the `raylet`
namespace (services/raylet/ember_raylet/worker_ledger.py): space-separated ASCII ids. The GCS
reads it when it declares the node dead (and deletes it: see ember_gcs.core), so both sides
share the key and the format from here.
"""
from __future__ import annotations

__all__ = ["KV_NAMESPACE", "ledger_key", "parse_ledger"]

KV_NAMESPACE = "raylet"


def ledger_key(node_id: str) -> bytes:
    """The KV key of node_id's worker ledger."""
    return f"workers/{node_id}".encode()


def parse_ledger(blob: bytes | None) -> list[str]:
    """The worker ids a stored ledger holds (a missing or empty one holds none)."""
    return blob.decode("ascii", "replace").split() if blob else []
