"""Helpers the command groups share: reaching the GCS, finding the cluster, printing usage."""
from __future__ import annotations

import argparse
import sys
from typing import Any


def gcs(address: str) -> Any:
    """A blocking GCS client for one CLI command: one try per call, 5 s each."""
    from ember_common import backoff
    from ember_common.gcs_client import SyncGcsClient

    return SyncGcsClient(address, retry=backoff.NO_RETRY, timeout_s=5)


def check_gcs(address: str) -> None:
    """RuntimeError naming the address when no GCS answers there."""
    from ember_common import rpc

    with gcs(address) as client:
        try:
            client.get_all_node_info()
        except rpc.ServiceError as e:
            raise RuntimeError(f"cannot reach the GCS at {address}: {e.code.name}") from None


def cluster_address(ns: argparse.Namespace) -> str | None:
    """The GCS address from --address or the cluster `ember start` made; None (after printing
    why) when there is none."""
    from ember._private.worker import _resolve_address

    try:
        return _resolve_address(ns.address or "auto")
    except ConnectionError as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def usage(total: dict[str, float], avail: dict[str, float]) -> str:
    """'used/total' per resource, memory in GiB."""
    parts = []
    for k in sorted(total):
        used = max(total[k] - avail.get(k, 0.0), 0.0)
        if k == "memory":
            parts.append(f"memory {used / 2**30:.1f}/{total[k] / 2**30:.1f} GiB")
        else:
            parts.append(f"{used:g}/{total[k]:g} {k}")
    return ", ".join(parts)


def table(header: list[str], rows: list[list[str]], *, right: tuple[str, ...] = ()) -> list[str]:
    """Rows as aligned columns, each as wide as its widest cell (nothing is cut)."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        out = [c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(cells, widths, header, strict=True)]
        return "  ".join(out).rstrip()

    return [line(header)] + [line(r) for r in rows]
