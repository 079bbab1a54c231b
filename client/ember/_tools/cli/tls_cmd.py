"""`ember tls generate DIR [--hostname NAME ...]`: a CA and a node certificate for mutual TLS.

Writes DIR/ca.crt, ca.key, node.crt, node.key (keys 0600). The node certificate is valid for
127.0.0.1, localhost and each --hostname; point every node at it with

    EMBER_USE_TLS=1 EMBER_TLS_SERVER_CERT=DIR/node.crt EMBER_TLS_SERVER_KEY=DIR/node.key \\
    EMBER_TLS_CA_CERT=DIR/ca.crt
"""
from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """`tls generate`."""
    t = sub.add_parser("tls", help="TLS certificates for the cluster's gRPC traffic")
    tsub = t.add_subparsers(dest="tls_action", required=True)
    g = tsub.add_parser("generate", help="write a CA and a node certificate into DIR")
    g.add_argument("dir")
    g.add_argument("--hostname", action="append", default=[],
                   help="another name or IP address the certificate is valid for (repeatable)")
    g.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    g.set_defaults(func=cmd_generate)


def cmd_generate(ns: argparse.Namespace) -> int:
    """Writes the files and prints the variables to set."""
    from ember_common import tls

    if ns.days < 1:
        print("ember: error: --days must be at least 1", file=sys.stderr)
        return 1
    try:
        paths = tls.generate(ns.dir, ns.hostname, days=ns.days)
    except (OSError, ValueError) as e:
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    print(f"export {tls.USE_ENV}=1 {tls.CERT_ENV}={paths['node.crt']} {tls.KEY_ENV}={paths['node.key']} "
          f"{tls.CA_ENV}={paths['ca.crt']}")
    return 0
