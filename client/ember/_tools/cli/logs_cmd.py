"""`ember logs`, as Ray's `ray logs`: each node's log files, read through its raylet
(`ember.util.state.get_log` / the log door).

    ember logs                                  every node's files (a table: node, file, size, time)
    ember logs [cluster] GLOB [--node-id ID | --node-ip IP] [--tail N] [--follow]
                                                one file when GLOB names exactly one, else the list
    ember logs actor --id ACTOR_ID [--err]      an actor's worker output (--follow, --tail too)
    ember logs task --id TASK_ID [--attempt-number N] [--err]   what a task printed
    ember logs worker --pid PID --node-id ID    a worker's output by its process id
    ember logs job --id SUBMISSION_ID           a submitted job's driver output

Without --node-id/--node-ip a GLOB is looked for on every alive node (Ray looks on the head
node only); --tail defaults to 1000 lines (-1: the whole file) and a cut file says so on stderr.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .common import ADDRESS_HELP, UsageError, cluster_address, table

KINDS = ("cluster", "actor", "task", "worker", "job")
DEFAULT_TAIL = 1000


def add_parser(sub: Any) -> None:
    """`logs`."""
    p = sub.add_parser("logs", help="list or print the log files of the cluster's nodes (as `ray logs`)")
    p.add_argument("args", nargs="*", metavar="[KIND] [GLOB]",
                   help=f"KIND: one of {', '.join(KINDS)} (default cluster); GLOB: file names (cluster)")
    p.add_argument("--address", help=ADDRESS_HELP)
    p.add_argument("--node-id", "-id", dest="node_id", help="the node (its id, or a unique prefix)")
    p.add_argument("--node-ip", "-ip", dest="node_ip", help="the node, by its IP address")
    p.add_argument("--id", "-a", dest="id", help="the actor, task or job submission id")
    p.add_argument("--pid", type=int, help="a worker's process id (worker; actor too)")
    p.add_argument("--attempt-number", type=int, default=0, help="the task's attempt (default 0)")
    p.add_argument("--err", action="store_true", help="stderr instead of stdout (actor, task, worker)")
    p.add_argument("--tail", type=int, default=DEFAULT_TAIL,
                   help=f"the last N lines (default {DEFAULT_TAIL}; -1: everything)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing what is appended")
    p.add_argument("--interval", type=float, default=None, help="how often --follow looks for more (s)")
    p.add_argument("--timeout", type=int, default=30, help="seconds for each request (not --follow)")
    p.add_argument("--encoding", default="utf-8", help="the files' encoding (default utf-8)")
    p.add_argument("--encoding-errors", default="strict", help="what to do with bytes that do not decode")
    p.set_defaults(func=cmd_logs)


def _split(args: list[str]) -> tuple[str, str]:
    if args and args[0] in KINDS:
        kind, rest = args[0], args[1:]
    else:
        kind, rest = "cluster", args
    if len(rest) > (1 if kind == "cluster" else 0):
        raise UsageError(f"unexpected argument {rest[-1]!r} for `ember logs {kind}`")
    return kind, rest[0] if rest else "*"


_NEEDS = {"actor": ("id", "pid"), "task": ("id",), "worker": ("pid",), "job": ("id",)}
_FLAG = {"id": "--id", "pid": "--pid"}


def check(ns: argparse.Namespace) -> tuple[str, str]:
    """(kind, glob) of the command line; UsageError naming what is missing or wrong."""
    kind, glob = _split(ns.args)
    if ns.tail < -1:
        raise UsageError(f"--tail must be -1 (everything) or >= 0, got {ns.tail}")
    needs = _NEEDS.get(kind, ())
    if needs and not any(getattr(ns, n) for n in needs):
        raise UsageError(f"`ember logs {kind}` needs {' or '.join(_FLAG[n] for n in needs)}")
    if kind in ("task", "job") and ns.pid:
        raise UsageError(f"`ember logs {kind}` takes --id, not --pid")
    if ns.node_id and ns.node_ip:
        raise UsageError("give --node-id or --node-ip, not both")
    return kind, glob


def cmd_logs(ns: argparse.Namespace) -> int:
    """Lists files, or prints one (following it with --follow)."""
    kind, glob = check(ns)
    address = cluster_address(ns)
    common: dict[str, Any] = {"address": address, "tail": ns.tail, "follow": ns.follow, "timeout": ns.timeout,
                              "encoding": ns.encoding, "errors": ns.encoding_errors, "_interval": ns.interval,
                              "suffix": "err" if ns.err else "out"}
    if kind == "actor":
        if ns.id:
            return _print(actor_id=ns.id, **common)
        return _print(pid=ns.pid, node_id=ns.node_id, node_ip=ns.node_ip, **common)
    if kind == "task":
        return _print(task_id=ns.id, attempt_number=ns.attempt_number, **common)
    if kind == "worker":
        return _print(pid=ns.pid, node_id=ns.node_id, node_ip=ns.node_ip, **common)
    if kind == "job":
        common.pop("suffix")
        return _print(submission_id=ns.id, **common)
    return _cluster(ns, glob, common)


def _cluster(ns: argparse.Namespace, glob: str, common: dict[str, Any]) -> int:
    from ember.util.state.logs import list_log_files

    rows = list_log_files(common["address"], ns.node_id, ns.node_ip, glob, ns.timeout)
    files = [r for r in rows if "name" in r]
    for r in rows:
        if "missing" in r:
            print(f"ember: warning: node {r['node_id'][:12]} left out: {r['missing']}", file=sys.stderr)
    if len(files) == 1 and glob not in ("", "*"):
        common.pop("suffix")
        return _print(filename=files[0]["name"], node_id=files[0]["node_id"], **common)
    if not files:
        print(f"no log files match {glob!r}" if glob not in ("", "*") else "no log files", file=sys.stderr)
        return 1 if glob not in ("", "*") else 0
    body = [[r["node_id"][:12] + (" (head)" if r.get("is_head") else ""), r["node_ip"], r["name"],
             str(r["size"]), time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["mtime"]))] for r in files]
    for line in table(["NODE", "IP", "FILE", "BYTES", "MODIFIED"], body, right=("BYTES",)):
        print(line)
    return 0


def _print(**kw: Any) -> int:
    from ember.util.state import get_log

    if kw["tail"] > 0 and not kw["follow"]:
        print(f"--- the last {kw['tail']} lines; --tail -1 prints everything ---", file=sys.stderr)
    try:
        for chunk in get_log(**kw):
            sys.stdout.write(chunk)
            sys.stdout.flush()
    except LookupError as e:
        raise ValueError(str(e).strip("'\"")) from None
    return 0
