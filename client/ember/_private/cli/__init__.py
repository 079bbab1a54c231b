"""The `ember` command line, one module per command group:

    ember start --head [--port 6379] [--num-cpus N] [--num-gpus N] [--resources JSON]
                [--gcs-storage memory|etcd://host:port] [--object-store-memory BYTES]
                [--metrics-export-port N]  # Prometheus: raylet N, objmgr N+1, GCS N+2 (head)
    ember start --address HOST:PORT [--num-cpus N ...]     # add a node     (start_stop.py)
    ember stop [--force]                                   # stop every node started here
    ember status [--address HOST:PORT]                     # nodes, resources, actors (status.py)
    ember list actors|nodes|jobs|objects|placement-groups|workers [--filter C=V] [--limit N]
               [--detail] [--format table|json]            # Ray's state API (listing.py)
    ember get actors|nodes|jobs|placement-groups|workers|objects ID   # one entry (state_cli.py)
    ember summary actors|objects                           # counts by class / call site
    ember memory                                           # objects in the stores (listing.py)
    ember job submit|status|logs|stop ...                  # job submission (job.py)
    ember trace show TRACE_ID [--dir SPAN_DIR]             # one trace as a tree (trace.py)
    ember microbenchmark [--filter NAME] [--duration-s S]  # Ray's microbenchmarks (bench.py)
    ember get-auth-token [--generate]                      # the cluster token (auth_cmd.py)
    ember tls generate DIR [--hostname NAME ...]           # CA + node certs for mTLS (tls_cmd.py)

Each module adds its sub-parsers with `add_parser(sub)` and binds its command with
`set_defaults(func=...)`; heavy imports (the core worker, protos) happen inside the commands,
so `ember --help` stays quick. The console script `ember` is `ember._private.cli:main`.
"""
from __future__ import annotations

import argparse
import sys

from . import auth_cmd, bench, job, listing, start_stop, state_cli, status, tls_cmd, trace

_GROUPS = (start_stop, status, listing, state_cli, trace, bench, job, auth_cmd, tls_cmd)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command."""
    p = argparse.ArgumentParser(prog="ember", description="Ember cluster command line")
    sub = p.add_subparsers(dest="cmd", required=True)
    for group in _GROUPS:
        group.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == bench.COMMAND:  # its own flags, parsed by the benchmark runner
        return bench.run(argv[1:])
    ns = build_parser().parse_args(argv)
    return int(ns.func(ns))
