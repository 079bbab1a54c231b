"""The scale envelope on one machine, Ember and Ray 2.60 side by side, printed as one table.

Each scenario of scripts/scale_workloads.py runs in its own process, for Ember (this
interpreter) and then Ray (`--ray-python`), under a time limit; a scenario that fails or runs
out of time shows as such in the table (an Ember failure makes the exit status 1). Full sizes:
100 lightweight nodes joining and heart-beating (GCS CPU per node per second, memory per node);
300 actors alive at once (creation rate, GCS memory per actor) and 10,000 actor records waiting
for a resource; 10,000 placement groups; 1,000,000 small puts held by one driver (20,000
through the store); 1,000,000 no-op tasks from one driver; get of 100,000 refs; 10 one-CPU
nodes running 1,000 tasks of 50 ms (the spread), grown to 20 nodes (join time, GCS idle CPU, a
10,000-task fan-out); 1,000,000 tasks pending behind busy CPUs (driver memory per pending
task). `--quick` runs the short form (12 nodes, 50 actors, 1,000 records and groups, 50k puts,
100k tasks, 20k refs, 20k pending, 5 -> 10 nodes) in a few minutes. docs/scale.md reads it.

    .venv/bin/python scripts/scale_envelope.py --quick
    .venv/bin/python scripts/scale_envelope.py --only nodes,actors --ray-python .rayvenv/bin/python

Ray's side of "actors" is capped by memory (about 60 MB per idle Ray actor), and of
"lightnodes" (about 300 MB per Ray node: a raylet and its two agents): the cap is shown.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "scale_workloads.py")
SCENARIOS = ("lightnodes", "nodes", "actors", "actor_records", "pgs", "objects", "store_objects",
             "tasks", "get", "pending")
# (scenario, key, label) rows of the table, in order.
ROWS = [
    ("lightnodes", "light_nodes", "lightweight nodes started"),
    ("lightnodes", "light_alive", "lightweight nodes alive"),
    ("lightnodes", "node_deaths", "nodes declared dead by a late heartbeat (flaps)"),
    ("lightnodes", "heartbeat_period_s", "heartbeat period (s)"),
    ("lightnodes", "light_join_per_s", "nodes joined per second"),
    ("lightnodes", "light_node_pss_mb", "memory per node (PSS MB: raylet + store)"),
    ("lightnodes", "light_gcs_cpu_pct_quarter", "GCS CPU at N/4 nodes (% of a core)"),
    ("lightnodes", "light_gcs_cpu_pct", "GCS CPU at N nodes (% of a core)"),
    ("lightnodes", "gcs_us_per_node_s", "GCS CPU per node per second (us, slope)"),
    ("lightnodes", "light_gcs_pss_mb", "GCS memory at N nodes (PSS MB)"),
    ("lightnodes", "node_idle_cpu_pct", "idle CPU per node (% of a core: raylet + store)"),
    ("lightnodes", "churn_cycles", "churn: all nodes' free CPU flipped (cycles)"),
    ("lightnodes", "churn_gcs_cpu_pct", "churn: GCS CPU (% of a core)"),
    ("lightnodes", "gcs_us_per_node_change", "churn: GCS CPU per node change (us)"),
    ("lightnodes", "gcs_us_per_change_per_reader", "churn: GCS CPU per change per reader (us)"),
    ("nodes", "join_s_first", "nodes: first N joined (s)"),
    ("nodes", "spread_s", "spread: 50 ms tasks on N one-CPU nodes (s)"),
    ("nodes", "spread_nodes_used", "spread: nodes used"),
    ("nodes", "spread_min", "spread: fewest tasks on a node"),
    ("nodes", "spread_max", "spread: most tasks on a node"),
    ("nodes", "join_s_more", "nodes: more nodes joined (s)"),
    ("nodes", "nodes", "nodes: total"),
    ("nodes", "gcs_idle_cpu_pct", "GCS idle CPU with all nodes (% of a core)"),
    ("nodes", "gcs_pss_mb", "GCS memory (PSS MB)"),
    ("nodes", "fanout_s", "fan-out: no-op tasks over all nodes (s)"),
    ("nodes", "fanout_nodes_used", "fan-out: nodes used"),
    ("actors", "actors", "actors alive at once"),
    ("actors", "actors_per_s", "actors created per second"),
    ("actors", "pss_mb_median", "PSS per idle actor (MB)"),
    ("actors", "all_answer", "all actors still answer"),
    ("actors", "gcs_kb_per_actor", "GCS memory per live actor (KB)"),
    ("actor_records", "actor_records", "actors waiting for a resource"),
    ("actor_records", "records_per_s", "actor submissions per second"),
    ("actor_records", "gcs_kb_per_actor_record", "GCS memory per actor record (KB)"),
    ("pgs", "pgs", "placement groups"),
    ("pgs", "pgs_ready", "placement groups ready"),
    ("pgs", "pgs_ready_per_s", "placement groups ready per second"),
    ("pgs", "gcs_kb_per_pg", "GCS memory per placement group (KB)"),
    ("pgs", "pgs_removed_per_s", "removals per second (the calls)"),
    ("pgs", "node_resource_entries", "resource entries in the node's record"),
    ("objects", "objects", "small puts held by one driver (own path)"),
    ("objects", "puts_per_s", "puts per second"),
    ("objects", "owner_bytes_per_object", "owner memory per object (bytes)"),
    ("objects", "store_bytes_per_object", "store memory per object (bytes)"),
    ("objects", "free_s", "free them all (s)"),
    ("store_objects", "store_objects", "small puts through the store"),
    ("store_objects", "store_puts_per_s", "store puts per second"),
    ("store_objects", "store_owner_bytes_per_object", "owner memory per stored object (bytes)"),
    ("store_objects", "store_store_bytes_per_object", "store memory per stored object (bytes)"),
    ("tasks", "tasks", "no-op tasks from one driver"),
    ("tasks", "tasks_per_s", "tasks per second"),
    ("tasks", "peak_driver_rss_mb", "peak driver RSS (MB)"),
    ("get", "refs", "refs in one get"),
    ("get", "get_s", "get of all refs (s)"),
    ("pending", "pending", "tasks pending behind busy CPUs"),
    ("pending", "bytes_per_pending_task", "driver memory per pending task (bytes)"),
    ("pending", "submit_cpu_us", "driver CPU per submitted task (us)"),
    ("pending", "drain_per_s", "pending tasks run per second"),
    ("scenario", "load", "load average (start->end)"),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the short form")
    p.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    p.add_argument("--ray-python", default=os.environ.get("EMBER_TEST_RAY_PYTHON",
                                                          os.path.abspath(".rayvenv/bin/python")),
                   help="Ray 2.60's interpreter ('' to skip Ray)")
    p.add_argument("--ember-python", default=sys.executable)
    p.add_argument("--timeout-s", type=float, default=0,
                   help="limit per scenario and runtime (default 300 quick, 2400 full)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return p.parse_args(argv)


def ray_cap(scenario: str, quick: bool) -> int:
    """Ray's size for scenarios capped by memory: how many idle Ray actors (~60 MB each) or
    Ray nodes (~300 MB each) fit in a third of the available memory, at most 8 GiB; 0: no cap."""
    per_mb = {"actors": 60, "lightnodes": 300}.get(scenario)
    if per_mb is None:
        return 0
    with open("/proc/meminfo") as f:
        avail_kb = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    want = {"actors": (300, 50), "lightnodes": (100, 12)}[scenario][1 if quick else 0]
    return max(4, min(want, int(min(avail_kb / 3, 8 * 2**20) / (per_mb * 1024))))


def run_one(python: str, runtime: str, scenario: str, quick: bool, timeout_s: float,
            n: int = 0) -> dict[str, Any]:
    cmd = [python, WORKLOADS, "--runtime", runtime, "--scenario", scenario]
    cmd += ["--quick"] if quick else []
    cmd += ["--n", str(n)] if n else []
    t0 = time.monotonic()
    print(f"--- {runtime} {scenario} ...", flush=True, file=sys.stderr)
    tmp = tempfile.mkdtemp(prefix="scale-envelope-")  # the `ember start` nodes' records
    env = dict(os.environ, SCALE_ENVELOPE_TMP=tmp)
    # Own session: on a timeout the whole process group goes (drivers, Ray's daemons).
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=os.path.expanduser("~") if runtime == "ray" else None,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        print(f"    {runtime} {scenario} timed out after {timeout_s:g}s", file=sys.stderr, flush=True)
        return {"error": f"timed out after {timeout_s:g}s"}
    finally:
        if os.path.isdir(os.path.join(tmp, "nodes")) and os.listdir(os.path.join(tmp, "nodes")):
            subprocess.run([sys.executable, "-m", "ember._tools.cli", "stop", "--force"],
                           env=dict(os.environ, EMBER_TEMP_DIR=tmp), stdout=subprocess.DEVNULL,
                           timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    proc = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines()[-3:]
        print(f"    {runtime} {scenario} FAILED (exit {proc.returncode}):\n" +
              "\n".join(proc.stderr.strip().splitlines()[-15:]), file=sys.stderr, flush=True)
        return {"error": f"exit {proc.returncode}: {' | '.join(tail)[-300:]}"}
    res: dict[str, Any] = json.loads(lines[-1])
    print(f"    {runtime} {scenario}: {res} ({time.monotonic() - t0:.0f}s)", flush=True,
          file=sys.stderr)
    return res


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def table(results: dict[str, dict[str, dict[str, Any]]], scenarios: list[str]) -> str:
    rows = [("figure", "ember", "ray 2.60")]
    for scen in scenarios:
        for rt in ("ember", "ray"):
            err = results.get(rt, {}).get(scen, {}).get("error")
            if err:
                short = err if len(err) <= 70 else err[:32] + "..." + err[-35:]
                rows.append((f"{scen}: FAILED ({rt})", short if rt == "ember" else "",
                             short if rt == "ray" else ""))
    for scen, key, label in ROWS:
        wanted = scenarios if scen == "scenario" else [scen]
        for s in wanted:
            if s not in scenarios:
                continue
            e = results.get("ember", {}).get(s, {}).get(key)
            r = results.get("ray", {}).get(s, {}).get(key)
            if e is None and r is None:
                continue
            name = f"{label} [{s}]" if scen == "scenario" else label
            rows.append((name, fmt(e), fmt(r)))
    w = [max(len(row[i]) for row in rows) for i in range(3)]
    out = [f"{rows[0][0]:<{w[0]}}  {rows[0][1]:>{w[1]}}  {rows[0][2]:>{w[2]}}",
           "-" * (w[0] + w[1] + w[2] + 4)]
    out += [f"{a:<{w[0]}}  {b:>{w[1]}}  {c:>{w[2]}}" for a, b, c in rows[1:]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scenarios = [s for s in args.only.split(",") if s]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad:
        print(f"unknown scenario(s) {bad}; choose from {SCENARIOS}", file=sys.stderr)
        return 2
    timeout_s = args.timeout_s or (300 if args.quick else 2400)
    runtimes = [("ember", args.ember_python)]
    if args.ray_python and os.path.exists(args.ray_python):
        runtimes.append(("ray", args.ray_python))
    elif args.ray_python:
        print(f"no Ray interpreter at {args.ray_python}: Ember only", file=sys.stderr)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for scen in scenarios:
        for rt, py in runtimes:
            n = ray_cap(scen, args.quick) if rt == "ray" else 0
            results.setdefault(rt, {})[scen] = run_one(py, rt, scen, args.quick, timeout_s, n)
    mode = "quick" if args.quick else "full"
    print(f"\nScale envelope ({mode}), {os.cpu_count()} CPUs, "
          f"load average now {open('/proc/loadavg').read().split()[0]}")
    print(table(results, scenarios))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    failed = [(rt, s) for rt in results for s, r in results[rt].items() if "error" in r]
    return 1 if any(rt == "ember" for rt, _ in failed) else 0


if __name__ == "__main__":
    sys.exit(main())
