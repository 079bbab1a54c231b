"""Helpers the command groups share: finding and reaching the cluster, one-line errors, tables.

Every command finds its cluster as `ray` does: --address, else $EMBER_ADDRESS, else $RAY_ADDRESS,
else the cluster `ember start` made on this machine. An address is the GCS's `HOST:PORT` (or
`ember://HOST:PORT`) or the dashboard's `http(s)://HOST:PORT` (Ray's job address), which the
dashboard answers with its GCS's address (GET /api/cluster).
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any


class CliError(Exception):
    """A failure the CLI reports in one line (`ember: error: ...`, exit code 1)."""


class UsageError(CliError):
    """Bad input on the command line (exit code 2)."""


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


def given_address(flag: str | None, *, jobs: bool = False) -> str:
    """The address as given: the flag, $EMBER_ADDRESS, ($RAY_API_SERVER_ADDRESS for the job
    commands, as `ray job`), $RAY_ADDRESS, else 'auto'."""
    from ember_common import envvars

    api = os.environ.get("RAY_API_SERVER_ADDRESS") if jobs else None
    return flag or envvars.get("EMBER_ADDRESS") or api or os.environ.get("RAY_ADDRESS") or "auto"


def resolve_address(flag: str | None, *, jobs: bool = False) -> str:
    """The GCS HOST:PORT a command talks to; CliError saying why there is none."""
    from ember._private.worker import _resolve_address

    raw = given_address(flag, jobs=jobs).strip()
    if raw.startswith(("http://", "https://")):
        return gcs_from_dashboard(raw)
    if raw in ("local", ""):
        raise UsageError(f"address {raw!r} starts a new cluster; give a running one's HOST:PORT")
    try:
        address = _resolve_address(raw)
    except ConnectionError as e:
        raise CliError(str(e)) from None
    assert address is not None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"address {raw!r}: expected the GCS's HOST:PORT or the dashboard's "
                         "http://HOST:PORT")
    return address


def gcs_from_dashboard(url: str) -> str:
    """The GCS address the dashboard at `url` serves (its host when the dashboard says loopback)."""
    import urllib.error
    import urllib.parse
    import urllib.request

    from ember_common import auth

    base = url.rstrip("/")
    try:
        headers = auth.http_headers()
    except auth.AuthConfigError:
        headers = {}
    req = urllib.request.Request(base + "/api/cluster", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            address = str(json.loads(resp.read())["gcs_address"])
    except urllib.error.HTTPError as e:
        raise CliError(f"the dashboard at {url} answered {e.code} {e.reason}") from None
    except (OSError, ValueError, KeyError) as e:
        why = getattr(e, "reason", None) or e
        raise CliError(f"cannot reach the dashboard at {url}: {why}") from None
    host, _, port = address.rpartition(":")
    url_host = urllib.parse.urlsplit(base).hostname or ""
    if host in ("", "0.0.0.0", "localhost") or host.startswith("127."):
        host = url_host if ":" not in url_host else f"[{url_host}]"
    return f"{host}:{port}"


ADDRESS_HELP = ("the GCS's HOST:PORT or the dashboard's http://HOST:PORT (default $EMBER_ADDRESS, "
                "$RAY_ADDRESS, the cluster started here)")


def cluster_address(ns: argparse.Namespace) -> str:
    """The GCS address of a command's --address (see resolve_address)."""
    return resolve_address(getattr(ns, "address", None))


def clip(text: str, width: int) -> str:
    """`text` in at most `width` characters: cut at the last word boundary, ending with '…'."""
    text = " ".join(text.split()) if "\n" in text else text
    if len(text) <= width:
        return text
    cut = text[:width - 1]
    space = cut.rfind(" ")
    if space > width // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


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
