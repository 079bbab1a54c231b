"""The autoscaler process: `ember autoscaler --config cluster.yaml [--address HOST:PORT]`, or
`python -m ember.autoscaler._private.main ...` (what `ember start --head --autoscaling-config`
runs). Loops until SIGTERM or SIGINT, then waits for launches in flight and closes its provider
(the local provider stops the nodes it started)."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from . import config as config_mod
from . import monitor


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """--config PATH, --address HOST:PORT (the GCS)."""
    p = argparse.ArgumentParser(prog="ember autoscaler", description=__doc__)
    p.add_argument("--config", required=True, help="the cluster config (YAML or JSON)")
    p.add_argument("--address", required=True, help="the cluster's GCS HOST:PORT")
    return p.parse_args(argv)


def run(config_path: str, address: str) -> int:
    """Runs the autoscaler for the cluster at `address` until a stop signal; 1 on a bad config."""
    try:
        cfg = config_mod.load(config_path)
    except (config_mod.ConfigError, OSError) as e:
        print(f"ember: error: {config_path}: {e}", file=sys.stderr)
        return 1
    try:
        scaler = monitor.build(cfg, address)
    except ValueError as e:  # a provider's config
        print(f"ember: error: {config_path}: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger("ember.autoscaler").info(
        "autoscaler for cluster %r at %s: node types %s, idle timeout %gs", cfg.cluster_name, address,
        ", ".join(f"{t.name} ({t.min_workers}-{t.max_workers})" for t in cfg.node_types()), cfg.idle_timeout_s)
    try:
        scaler.run(stop)
    finally:
        scaler.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """The process entry."""
    ns = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(ns.config, ns.address)


if __name__ == "__main__":
    sys.exit(main())
