"""The `ember` command line, one module per command group:

    ember start --head [--port 6379] [--num-cpus N] [--num-gpus N] [--resources JSON]
                [--gcs-storage memory|etcd://host:port] [--object-store-memory BYTES]
                [--metrics-export-port N]  # Prometheus: raylet N, objmgr N+1, GCS N+2 (head)
                [--labels k=v,... | --labels-file YAML] [--temp-dir DIR]  # node labels, session root
    ember start --address ADDRESS [--num-cpus N ...]       # add a node     (start_stop.py)
    ember stop [--force]                                   # stop every node started here
    ember status [--address ADDRESS]                       # nodes, resources, actors (status.py)
    ember autoscaler --config cluster.yaml [--address ADDRESS]  # the autoscaler (autoscaler_cmd.py)
    ember list actors|nodes|jobs|objects|placement-groups|workers [--filter C=V] [--limit N]
               [--detail] [--format table|json]            # Ray's state API (listing.py)
    ember get actors|nodes|jobs|placement-groups|workers|objects ID   # one entry (state_cli.py)
    ember summary actors|objects                           # counts by class / call site
    ember memory                                           # objects in the stores (listing.py)
    ember job submit|status|logs|stop|list ...             # job submission (job.py)
    ember logs [GLOB | actor|task|worker|job ...] [--node-id ID] [--tail N] [--follow]
                                                           # each node's log files (logs_cmd.py)
    ember trace show TRACE_ID [--dir SPAN_DIR]             # one trace as a tree (trace.py)
    ember microbenchmark [--filter NAME] [--duration-s S]  # Ray's microbenchmarks (bench.py)
    ember get-auth-token [--generate]                      # the cluster token (auth_cmd.py)
    ember tls generate DIR [--hostname NAME ...]           # CA + node certs for mTLS (tls_cmd.py)
    ember --version

ADDRESS (common.py) is --address, else $EMBER_ADDRESS, else $RAY_ADDRESS, else the cluster
`ember start` made here; the GCS's HOST:PORT or the dashboard's http://HOST:PORT.
A usage error or a failure is one line on stderr, `ember: error: ...`, exit code 2 for usage and
1 for a failure; `--verbose` (anywhere before a `--`) or EMBER_LOG_LEVEL=DEBUG adds the traceback.

Each module adds its sub-parsers with `add_parser(sub)` and binds its command with
`set_defaults(func=...)`; heavy imports (the core worker, protos) happen inside the commands,
so `ember --help` stays quick. The console script `ember` is `ember._tools.cli:main`.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from typing import NoReturn

from . import auth_cmd, autoscaler_cmd, bench, job, listing, logs_cmd, start_stop, state_cli, status, tls_cmd, trace
from .common import CliError, UsageError

_GROUPS = (start_stop, status, listing, state_cli, logs_cmd, trace, bench, job, auth_cmd, tls_cmd, autoscaler_cmd)
_VERBOSE = ("--verbose", "-v")


class Parser(argparse.ArgumentParser):
    """argparse with its errors in one line: `ember: error: ...` and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """One line naming the problem and where the help is."""
        self.exit(2, f"ember: error: {message} (see `{self.prog} --help`)\n")


class _Version(argparse.Action):
    """--version: imports ember only when asked, so `ember --help` stays quick."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        import ember

        sys.stdout.write(f"ember {ember.__version__}\n")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command."""
    p = Parser(prog="ember", description="Ember cluster command line")
    p.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="print the traceback of a failure (also EMBER_LOG_LEVEL=DEBUG)")
    sub = p.add_subparsers(dest="cmd", required=True)
    for group in _GROUPS:
        group.add_parser(sub)
    return p


def _split_verbose(argv: list[str]) -> tuple[list[str], bool]:
    """argv without --verbose/-v (taken anywhere before a `--`), and whether it was there."""
    end = argv.index("--") if "--" in argv else len(argv)
    head = [a for a in argv[:end] if a not in _VERBOSE]
    return head + argv[end:], len(head) < end


def _debug() -> bool:
    from ember_common import envvars

    return (envvars.get("EMBER_LOG_LEVEL") or "").upper() == "DEBUG"


def main(argv: list[str] | None = None) -> int:
    """Runs one command; returns its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == bench.COMMAND:  # its own flags, parsed by the benchmark runner
        return bench.run(argv[1:])
    argv, verbose = _split_verbose(list(argv))
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns))
    except KeyboardInterrupt:
        print("ember: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # every failure is one line unless asked for the traceback
        if verbose or _debug():
            traceback.print_exc()
        text = " ".join(str(e).split()) or type(e).__name__
        if not isinstance(e, CliError | ConnectionError | ValueError):
            text = f"{type(e).__name__}: {text}"
        print(f"ember: error: {text}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
