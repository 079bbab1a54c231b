"""`ember get RESOURCE ID` and `ember summary actors|objects`, as `ray get` / `ray summary`:

    ember get actors 5f3a...          # every column of one actor (json, or key: value lines)
    ember summary actors              # actors per class, counted by state
    ember summary objects --format json
    ember get tasks 9c1e...           # every attempt of one task
    ember summary tasks               # tasks per function, counted by state
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import cluster_address, table
from .listing import RESOURCES, add_state_flags, fetch_rows

GETTABLE = RESOURCES


def add_parser(sub: Any) -> None:
    """`get` and `summary`."""
    g = sub.add_parser("get", help="one actor, node, job, placement group, worker, object or task by id")
    g.add_argument("what", choices=list(GETTABLE))
    g.add_argument("id")
    add_state_flags(g)
    g.set_defaults(func=cmd_get)
    s = sub.add_parser("summary", help="actors per class / objects per call site / tasks per function, by state")
    s.add_argument("what", choices=["actors", "objects", "tasks"])
    add_state_flags(s)
    s.set_defaults(func=cmd_summary)


def cmd_get(ns: argparse.Namespace) -> int:
    """Prints one entry; 1 when it is unknown or the cluster cannot be reached."""
    from ember.util.state import common

    address = cluster_address(ns)
    resource = GETTABLE[ns.what]
    try:
        if resource == "tasks":
            from ember._private.doors import state

            rows = state.fetch_tasks(address, [("task_id", "=", ns.id)], 0, timeout_s=10)[0]
        else:
            rows = fetch_rows(resource, address)
    except (ValueError, ConnectionError, RuntimeError) as e:
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    if resource == "jobs":
        rows = [r for r in rows if ns.id in (r["job_id"], r["submission_id"])]
    else:
        rows = [r for r in rows if r[common.ID_COLUMNS[resource]] == ns.id]
    if not rows:
        print(f"ember: error: no {ns.what[:-1].replace('-', ' ')} with id {ns.id!r}", file=sys.stderr)
        return 1
    entries, _ = common.apply(resource, rows, detail=True, limit=len(rows))
    dicts = [e.asdict() for e in entries]
    if ns.format == "json":
        print(json.dumps(dicts[0] if len(dicts) == 1 else dicts, indent=2, default=str))
    else:
        for i, d in enumerate(dicts):
            if i:
                print("---")
            width = max(len(k) for k in d)
            for k, v in d.items():
                print(f"{k:{width}}  {json.dumps(v, default=str) if isinstance(v, (dict, list)) else v}")
    return 0


def cmd_summary(ns: argparse.Namespace) -> int:
    """Prints the summary as a table (or Ray's dict as json)."""
    from ember.util.state import common

    address = cluster_address(ns)
    if ns.what == "tasks":
        return _summary_tasks(ns, address)
    try:
        rows = fetch_rows(ns.what, address)
    except (ConnectionError, RuntimeError) as e:
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    if ns.what == "actors":
        summary = common.summarize_actors(rows)
        if ns.format == "json":
            print(json.dumps(summary, indent=2))
            return 0
        c = summary["cluster"]
        print(f"======== Actors Summary: {c['total_actors']} actors ========")
        body = [[cls, ", ".join(f"{k}: {v}" for k, v in sorted(e["state_counts"].items()))]
                for cls, e in sorted(c["summary"].items())]
        for line in table(["CLASS_NAME", "STATE_COUNTS"], body):
            print(line)
        return 0
    summary = common.summarize_objects(rows)
    if ns.format == "json":
        print(json.dumps(summary, indent=2))
        return 0
    c = summary["cluster"]
    print(f"======== Object Summary: {c['total_objects']} objects, {c['total_size_mb']:.2f} MiB ========")
    body = [[site, str(e["total_objects"]), f"{e['total_size_mb']:.2f}", str(e["total_num_nodes"]),
             ", ".join(f"{k}: {v}" for k, v in sorted(e["ref_type_counts"].items()))]
            for site, e in sorted(c["summary"].items())]
    for line in table(["CALL_SITE", "OBJECTS", "SIZE_MB", "NODES", "REFERENCE_TYPES"], body,
                      right=("OBJECTS", "SIZE_MB", "NODES")):
        print(line)
    return 0


def _summary_tasks(ns: argparse.Namespace, address: str) -> int:
    """Tasks per function (or Class.method) and type, counted by state in the GCS."""
    from ember._private.doors import state
    from ember.util.state import common

    try:
        counts, total, lost = state.task_summary(address, None, timeout_s=10)
    except (ValueError, ConnectionError) as e:
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    summary = common.summarize_tasks(counts, total)
    if ns.format == "json":
        print(json.dumps(summary, indent=2))
        return 0
    c = summary["cluster"]
    print(f"======== Tasks Summary: {c['total_tasks']} tasks, {c['total_actor_tasks']} actor tasks, "
          f"{c['total_actor_scheduled']} actors scheduled ========")
    body = [[name, e["type"], ", ".join(f"{k}: {v}" for k, v in sorted(e["state_counts"].items()))]
            for name, e in sorted(c["summary"].items())]
    for line in table(["FUNC_OR_CLASS_NAME", "TYPE", "STATE_COUNTS"], body):
        print(line)
    if lost:
        print(f"({lost} task events were dropped; counts may be low)", file=sys.stderr)
    return 0
