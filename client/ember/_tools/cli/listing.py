"""`ember list nodes|actors|jobs|placement-groups|workers|objects|tasks` and `ember memory` (= `ember
list objects`), on the state API (`ember.util.state`) as `ray list ...` is on Ray's:

    ember list actors --filter state=ALIVE --filter "class_name!=Foo" --limit 10 --detail
    ember list nodes --format json

--filter takes Ray's `COLUMN=VALUE` / `COLUMN!=VALUE` (repeatable, all must hold); --format
table (default) prints aligned columns, json prints Ray's dicts.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import ADDRESS_HELP, clip, cluster_address, table

RESOURCES = {"actors": "actors", "nodes": "nodes", "jobs": "jobs", "objects": "objects",
             "placement-groups": "placement_groups", "workers": "workers", "tasks": "tasks"}


def add_parser(sub: Any) -> None:
    """`list` and `memory`."""
    ls = sub.add_parser("list", help="list " + ", ".join(RESOURCES) + " (Ray's state API)")
    ls.add_argument("what", choices=list(RESOURCES))
    add_state_flags(ls)
    ls.add_argument("--filter", action="append", default=[], metavar="COLUMN=VALUE",
                    help="keep entries whose COLUMN is (=) or is not (!=) VALUE; repeatable")
    ls.add_argument("--limit", type=int, default=100, help="at most this many entries (default 100)")
    ls.add_argument("--detail", action="store_true", help="every column (tables: death causes, why "
                    "a placement group waits)")
    ls.set_defaults(func=cmd_list)
    mm = sub.add_parser("memory", help="objects in the object stores (= ember list objects)")
    add_state_flags(mm)
    mm.set_defaults(func=cmd_list, what="objects", detail=False, filter=[], limit=10_000)


def add_state_flags(p: argparse.ArgumentParser) -> None:
    """--address and --format, shared by list/get/summary."""
    p.add_argument("--address", default=None, help=ADDRESS_HELP)
    p.add_argument("--format", choices=["table", "json"], default="table")


def parse_filters(texts: list[str]) -> list[tuple[str, str, str]]:
    """`a=b` / `a!=b` strings as Ray's filter tuples; ValueError naming a malformed one."""
    out = []
    for t in texts:
        if "!=" in t:
            column, value = t.split("!=", 1)
            predicate = "!="
        elif "=" in t:
            column, value = t.split("=", 1)
            predicate = "="
        else:
            raise ValueError(f"--filter {t!r}: expected COLUMN=VALUE or COLUMN!=VALUE")
        out.append((column.strip(), predicate, value.strip()))
    return out


def cmd_list(ns: argparse.Namespace) -> int:
    """Prints the entries; 1 (with the reason on stderr) on a bad flag or an unreachable cluster."""
    from ember.util.state import common

    address = cluster_address(ns)
    resource = RESOURCES[ns.what]
    try:
        if resource == "tasks":  # filtered and limited in the GCS (10,000s of attempts)
            entries, matched = fetch_tasks(address, parse_filters(ns.filter), ns.limit,
                                           ns.detail or ns.format == "table")
        else:
            rows = fetch_rows(resource, address)
            entries, matched = common.apply(resource, rows, filters=parse_filters(ns.filter), limit=ns.limit,
                                            detail=ns.detail or ns.format == "table")
    except (ValueError, ConnectionError, RuntimeError) as e:
        print(f"ember: error: {e}", file=sys.stderr)
        return 1
    dicts = [e.asdict() for e in entries]
    if ns.format == "json":
        if not ns.detail:
            keep = common.SCHEMAS[resource].list_columns(detail=False)
            dicts = [{k: d[k] for k in keep} for d in dicts]
        print(json.dumps(dicts, indent=2, default=str))
    else:
        for line in TABLES[resource](dicts, ns.detail):
            print(line)
    if matched > len(entries):
        print(f"({matched - len(entries)} more entries; raise --limit to see them)", file=sys.stderr)
    return 0


def fetch_rows(resource: str, address: str) -> list[dict[str, Any]]:
    """Every entry of a resource through the state door; unreachable parts noted on stderr."""
    from ember._private.doors import state

    rows, missing = state.fetch(resource, address, timeout_s=10)
    for m in missing:
        print(f"  {m} did not answer; its entries are missing", file=sys.stderr)
    return rows


def fetch_tasks(address: str, filters: list[tuple[str, str, str]], limit: int,
                detail: bool) -> tuple[list[Any], int]:
    """Task attempts (newest first) and how many matched; lost events noted on stderr."""
    from ember._private.doors import state
    from ember.util.state import common

    if limit <= 0:
        raise ValueError(f"--limit must be positive, got {limit}")
    rows, matched, dropped = state.fetch_tasks(address, common.validate_filters("tasks", filters), limit,
                                               timeout_s=10)
    lost = sum(dropped.values())
    if lost:
        print(f"  {lost} task events were dropped (store bound or full reporter buffers); "
              "the list may be incomplete", file=sys.stderr)
    entries, _ = common.apply("tasks", rows, limit=max(len(rows), 1), detail=detail)
    return entries, matched


def task_lines(tasks: list[dict[str, Any]], detail: bool) -> list[str]:
    """One row per task attempt; with detail the first line of a failed one's error under it."""
    header = ["TASK_ID", "ATTEMPT", "NAME", "STATE", "TYPE", "JOB_ID", "NODE", "PID", "ERROR_TYPE"]
    rows, errors = [], {}
    for t in tasks:
        rows.append([t["task_id"], str(t["attempt_number"]), t["name"], t["state"], t["type"], t["job_id"],
                     _short(t["node_id"]), str(t["worker_pid"] or "-"), t["error_type"] or "-"])
        if detail and t.get("error_message"):
            lines = [ln for ln in t["error_message"].splitlines() if ln.strip()]
            errors[len(rows) - 1] = lines[-1] if lines else ""
    return _with_notes(table(header, rows, right=("ATTEMPT", "PID")), errors, "error: ")


def _short(node_id: str | None) -> str:
    return node_id[:12] if node_id else "-"


def actor_lines(actors: list[dict[str, Any]], detail: bool) -> list[str]:
    """The actor table: NAME is the actor's name and NAMESPACE its namespace (as `ray list
    actors`), both in full; '-' when unnamed; with detail the death cause under a dead one."""
    header = ["ACTOR_ID", "CLASS", "STATE", "NAME", "NAMESPACE", "NODE", "PID", "RESTARTS"]
    rows, causes = [], {}
    for a in actors:
        node = _short(a["node_id"]) if a["state"] != "DEAD" else "-"
        rows.append([a["actor_id"], a["class_name"], a["state"], a["name"] or "-", a["ray_namespace"] or "-",
                     node, str(a["pid"] or "-"), str(a["num_restarts"] or 0)])
        if detail and a["state"] == "DEAD":
            msg = (a.get("death_cause") or {}).get("error_message") or "-"
            causes[len(rows) - 1] = msg.splitlines()[0]
    return _with_notes(table(header, rows, right=("PID", "RESTARTS")), causes, "death cause: ")


def _with_notes(lines: list[str], notes: dict[int, str], prefix: str = "") -> list[str]:
    out = lines[:1]
    for i, line in enumerate(lines[1:]):
        out.append(line)
        if i in notes:
            out.append(f"    {prefix}{notes[i]}")
    return out


def node_lines(nodes: list[dict[str, Any]], detail: bool) -> list[str]:
    """One row per node: id, ip, head, state, used/total resources (and why a dead one died)."""
    from .common import usage

    header = ["NODE_ID", "NODE_IP", "IS_HEAD_NODE", "STATE", "RESOURCES"]
    rows, why = [], {}
    for n in nodes:
        avail = n.get("resources_available") or {}
        rows.append([n["node_id"], n["node_ip"], str(n["is_head_node"]), n["state"],
                     usage(n["resources_total"], avail) if n["state"] == "ALIVE" else "-"])
        if detail and n["state_message"]:
            why[len(rows) - 1] = n["state_message"]
    return _with_notes(table(header, rows), why)


def placement_group_lines(groups: list[dict[str, Any]], detail: bool) -> list[str]:
    """The placement group table: id, name, state, strategy, lifetime, bundles with their nodes;
    with detail, why a group waits or was removed."""
    header = ["PLACEMENT_GROUP_ID", "NAME", "STATE", "STRATEGY", "LIFETIME", "BUNDLES"]
    rows, why = [], {}
    for g in groups:
        bundles = " ".join(f"{b['bundle_id']}:{_fmt(b['unit_resources'])}@{(b['node_id'] or '-')[:8]}"
                           for b in g["bundles"] or [])
        rows.append([g["placement_group_id"], g["name"] or "-", g["state"], g["strategy"] or "-",
                     "detached" if g["is_detached"] else "job", bundles])
        if detail and g.get("state_message"):
            why[len(rows) - 1] = g["state_message"]
    return _with_notes(table(header, rows), why)


def _fmt(resources: dict[str, float]) -> str:
    return ",".join(f"{k}={v:g}" for k, v in sorted(resources.items()))


def job_lines(jobs: list[dict[str, Any]], detail: bool) -> list[str]:
    """One row per job: job id, submission id, type, status, entrypoint (cut at a word, 60 wide)."""
    header = ["JOB_ID", "SUBMISSION_ID", "TYPE", "STATUS", "ENTRYPOINT"]
    rows = [[j["job_id"] or "-", j["submission_id"] or "-", j["type"], j["status"],
             clip(j["entrypoint"] or "", 60)] for j in jobs]
    return table(header, rows)


def worker_lines(workers: list[dict[str, Any]], detail: bool) -> list[str]:
    """One row per worker or driver: id, type, alive, node, ip, pid (and the task it runs)."""
    header = ["WORKER_ID", "WORKER_TYPE", "IS_ALIVE", "NODE", "IP", "PID", "TASK"]
    rows = [[w["worker_id"], w["worker_type"], str(w["is_alive"]), _short(w["node_id"]), w["ip"],
             str(w["pid"]), w.get("current_task") or "-"] for w in workers]
    return table(header, rows, right=("PID",))


def object_lines(objects: list[dict[str, Any]], detail: bool) -> list[str]:
    """Every object in every alive node's store: id, size, state, node, owner, pins; a total."""
    out = [f"{'OBJECT_ID':42} {'SIZE':>12} {'STATE':8} {'NODE':14} {'OWNER':18} PINS"]
    total = 0
    for o in objects:
        total += o["object_size"]
        out.append(f"{o['object_id']:42} {o['object_size']:>12} {o['store_state']:8} {_short(o['node_id']):14} "
                   f"{(o['owner_worker_id'] or '')[:16]:18} {o['pins']}")
    out.append(f"total {total / 2**20:.1f} MiB in shared memory and spill")
    return out


TABLES = {"actors": actor_lines, "nodes": node_lines, "jobs": job_lines, "objects": object_lines,
          "placement_groups": placement_group_lines, "workers": worker_lines, "tasks": task_lines}
