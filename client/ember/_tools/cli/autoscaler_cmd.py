"""`ember autoscaler --config cluster.yaml [--address ADDRESS]`: runs the autoscaler for a
running cluster in the foreground (ember.autoscaler._private.main)."""
from __future__ import annotations

import argparse
import logging
from typing import Any

from .common import ADDRESS_HELP, resolve_address


def add_parser(sub: Any) -> None:
    """`autoscaler`."""
    s = sub.add_parser("autoscaler", help="grow and shrink the cluster with its load (Ray's autoscaler)")
    s.add_argument("--config", required=True, help="cluster config: node types, min/max workers, provider")
    s.add_argument("--address", default=None, help=ADDRESS_HELP)
    s.set_defaults(func=cmd_autoscaler)


def cmd_autoscaler(ns: argparse.Namespace) -> int:
    """Runs until SIGTERM / Ctrl-C; 1 on a bad config."""
    from ember.autoscaler._private.main import run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(ns.config, resolve_address(ns.address))
