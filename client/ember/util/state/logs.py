"""Ray's log state API (`ray.util.state.list_logs` / `get_log`): each node's log files, read
through its raylet's log service (`ember._private.doors.logs`).

    list_logs(node_id=NODE)                         {"worker_out": [...], "raylet": [...], ...}
    for chunk in get_log(filename="raylet-1a2b3c4d.err", node_id=NODE, tail=100): print(chunk, end="")
    get_log(actor_id=A, follow=True)                the actor's worker's output, as it grows

An actor, a task or a worker pid is mapped to its worker's file (`worker-<worker id>.out`, or
`.err` with suffix="err") on its node: an actor through the actor table (node, pid), a task
through the task events (node, worker pid; the lines the worker printed while it ran tasks of
that name of that job: a worker's output is marked whenever the job or task name changes),
submission_id to the job's driver log (`job-driver-<id>.log`). The markers themselves read as
Ray's `:task_name:NAME` lines.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ember._private.doors import logs as _logs
from ember._private.doors import state as _state

from .common import DEFAULT_RPC_TIMEOUT

_MARKER, _SEP = b"\x1e", b"\x1f"
_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ray's categories (dashboard/modules/log), with Ember's service file names: (category, prefixes).
_CATEGORIES = (("raylet", ("raylet-", "raylet.")), ("gcs_server", ("gcs.", "gcs_server.")),
               ("objmgr", ("objmgr-",)), ("dashboard", ("dashboard.",)), ("driver", ("job-driver-",)))


def _category(name: str) -> str:
    if name.startswith("worker-"):
        return "worker_err" if ".err" in name else "worker_out"
    return next((c for c, prefixes in _CATEGORIES if name.startswith(prefixes)), "internal")


def categorize(names: list[str]) -> dict[str, list[str]]:
    """File names grouped as Ray's list_logs groups them (worker_out, worker_err, raylet,
    gcs_server, dashboard, driver, ..., internal for the rest)."""
    out: dict[str, list[str]] = {}
    for name in names:
        out.setdefault(_category(name), []).append(name)
    return out


def pick_node(nodes: list[dict[str, Any]], node_id: str | None, node_ip: str | None) -> dict[str, Any]:
    """The node a call names: by id (or a unique prefix of one), else by ip (ValueError when
    several nodes share it), else the head node."""
    if node_id:
        found = [n for n in nodes if n["node_id"] == node_id] or \
                [n for n in nodes if n["node_id"].startswith(node_id)]
        if len(found) != 1:
            raise ValueError(f"node id {node_id!r} names {len(found) or 'no'} alive nodes")
        return found[0]
    if node_ip:
        found = [n for n in nodes if n["node_ip"] == node_ip]
        if len(found) != 1:
            raise ValueError(f"node ip {node_ip!r} has {len(found) or 'no'} alive nodes" +
                             ("; give node_id" if found else ""))
        return found[0]
    heads = [n for n in nodes if n["is_head"]] or nodes
    if not heads:
        raise ValueError("the cluster has no alive node")
    return heads[0]


def list_logs(address: str | None = None, node_id: str | None = None, node_ip: str | None = None,
              glob_filter: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT) -> dict[str, list[str]]:
    """The log files of one node (node_id or node_ip; Ray requires one, Ember takes the head
    node when neither is given) whose names match glob_filter, grouped by component."""
    node = pick_node(_logs.nodes(_state.resolve_address(address), timeout), node_id, node_ip)
    files = _logs.list_files(node["raylet_address"], node["node_id"], glob_filter or "", timeout)
    return categorize([f["name"] for f in files])


def list_log_files(address: str | None = None, node_id: str | None = None, node_ip: str | None = None,
                   glob_filter: str | None = None, timeout: int = DEFAULT_RPC_TIMEOUT) -> list[dict[str, Any]]:
    """Ember's detailed listing: every alive node's files (or one node's) with node_id, node_ip,
    name, size and mtime; nodes that do not answer are left out with a `missing` row."""
    nodes = _logs.nodes(_state.resolve_address(address), timeout)
    if node_id or node_ip:
        nodes = [pick_node(nodes, node_id, node_ip)]

    def one(n: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            files = _logs.list_files(n["raylet_address"], n["node_id"], glob_filter or "", timeout)
        except ConnectionError as e:
            return [{"node_id": n["node_id"], "node_ip": n["node_ip"], "missing": str(e)}]
        return [{"node_id": n["node_id"], "node_ip": n["node_ip"], "is_head": n["is_head"], **f} for f in files]

    if len(nodes) <= 1:
        return [row for n in nodes for row in one(n)]
    with ThreadPoolExecutor(min(16, len(nodes))) as pool:  # a slow node delays only its own row
        return [row for rows in pool.map(one, nodes) for row in rows]


def resolve_target(address: str, node_id: str | None, node_ip: str | None, actor_id: str | None,
                   task_id: str | None, pid: int | None, submission_id: str | None, attempt_number: int,
                   timeout: float) -> tuple[dict[str, Any], int, tuple[bytes, str] | None, str | None]:
    """(node, pid, (job, task name) to keep or None, file name or None) for get_log's arguments."""
    nodes = _logs.nodes(address, timeout)
    if actor_id:
        rows, _ = _state.fetch("actors", address, timeout)
        actor = next((a for a in rows if a["actor_id"] == actor_id), None)
        if actor is None:
            raise ValueError(f"no actor {actor_id!r}")
        if not actor["node_id"] or not actor["pid"]:
            raise ValueError(f"actor {actor_id} has no worker yet (state {actor['state']})")
        return pick_node(nodes, actor["node_id"], None), int(actor["pid"]), None, None
    if task_id:
        tasks, _, _ = _state.fetch_tasks(address, [("task_id", "=", task_id)], 0, timeout)
        attempts = [t for t in tasks if t["attempt_number"] == attempt_number]
        if not attempts:
            raise ValueError(f"no attempt {attempt_number} of task {task_id!r} in the task events")
        t = attempts[0]
        if not t["node_id"] or not t["worker_pid"]:
            raise ValueError(f"task {task_id} has not run on a worker (state {t['state']})")
        keep = None if t["actor_id"] else (bytes.fromhex(t["job_id"]), t["name"])
        return pick_node(nodes, t["node_id"], None), int(t["worker_pid"]), keep, None
    if submission_id:
        name = f"job-driver-{submission_id}.log"
        for n in nodes:
            if _logs.list_files(n["raylet_address"], n["node_id"], name, timeout):
                return n, 0, None, name
        raise ValueError(f"no driver log of job {submission_id!r} on any alive node")
    return pick_node(nodes, node_id, node_ip), int(pid or 0), None, None


def readable(chunks: Iterable[bytes], keep: tuple[bytes, str] | None = None, strip_ansi: bool = False) -> Iterator[bytes]:
    """Whole lines of the chunks, markers as `:task_name:NAME`; with `keep`, only the lines
    under a marker of that (job, task name)."""
    rest = b""
    current: tuple[bytes, str] | None = None
    for chunk in _with_end(chunks):
        if chunk is None:
            data, rest = rest, b""
            if not data:
                return
        else:
            *full, rest = (rest + chunk).split(b"\n")
            if not full:
                continue
            data = b"\n".join(full) + b"\n"
        out = []
        for line in data.splitlines(keepends=True):
            if line.startswith(_MARKER):
                job_hex, _, name = line[1:].rstrip(b"\n").partition(_SEP)
                try:
                    current = (bytes.fromhex(job_hex.decode()), name.decode("utf-8", "replace"))
                except ValueError:
                    current = None
                if keep is None:
                    out.append(b":task_name:" + name + b"\n")
                continue
            if keep is None or current == keep:
                out.append(_ANSI.sub(b"", line) if strip_ansi else line)
        if out:
            yield b"".join(out)


def _with_end(chunks: Iterable[bytes]) -> Iterator[bytes | None]:
    yield from chunks
    yield None


def get_log(address: str | None = None, node_id: str | None = None, node_ip: str | None = None,
            filename: str | None = None, actor_id: str | None = None, task_id: str | None = None,
            pid: int | None = None, follow: bool = False, tail: int = -1, timeout: int = DEFAULT_RPC_TIMEOUT,
            suffix: str = "out", encoding: str | None = "utf-8", errors: str | None = "strict",
            submission_id: str | None = None, attempt_number: int = 0, _interval: float | None = None,
            filter_ansi_code: bool = False) -> Iterator[Any]:
    """One log file's content, as Ray's get_log: chunks of whole lines (str, or bytes when
    encoding is None). Name the file by filename (on node_id / node_ip, default the head node),
    or by actor_id, task_id (+ attempt_number), pid (on node_id / node_ip) or submission_id.
    tail: the last N lines (-1: all); follow: keep reading what is appended until the caller
    stops iterating (timeout does not apply then)."""
    given = [k for k, v in (("filename", filename), ("actor_id", actor_id), ("task_id", task_id),
                            ("pid", pid), ("submission_id", submission_id)) if v]
    if len(given) != 1:
        raise ValueError(f"get_log needs exactly one of filename, actor_id, task_id, pid, submission_id; "
                         f"got {', '.join(given) or 'none'}")
    if suffix not in ("out", "err"):
        raise ValueError(f"suffix must be 'out' or 'err', got {suffix!r}")
    if not isinstance(tail, int) or tail < -1:
        raise ValueError(f"tail must be -1 (everything) or a number of lines >= 0, got {tail!r}")
    gcs = _state.resolve_address(address)
    node, wpid, keep, name = resolve_target(gcs, node_id, node_ip, actor_id, task_id, pid, submission_id,
                                     attempt_number, timeout)
    # A task's lines are picked from its worker's whole output: the tail applies after picking.
    chunks = _logs.stream(node["raylet_address"], node["node_id"], filename=name or filename or "",
                          pid=wpid, suffix=suffix if wpid else "", lines=-1 if keep else tail,
                          follow=follow, interval_s=_interval or 0.0, timeout_s=None if follow else timeout)
    out = readable(chunks, keep, filter_ansi_code)
    if keep is not None and tail >= 0 and not follow:
        kept = b"".join(out).splitlines(keepends=True)
        out = iter([b"".join(kept[max(0, len(kept) - tail):] if tail else [])])
    for data in out:
        if not data:
            continue
        yield data if encoding is None else data.decode(encoding, errors or "strict")

