"""Runs Ray's microbenchmark workloads on Ember and on Ray, and prints them side by side.

Both runs use the same code, client/ember/_tools/perf.py: first with Ember
(`<ember-python> -m ember._tools.perf`), then with Ray, by running perf.py as a plain script
under the Ray venv's interpreter (`<ray-python> .../perf.py --module ray`). Each writes its
results as JSON; this script then prints one table: name, ember/s, ray/s, ember/ray. The rows
are Ray's `ray microbenchmark` workloads plus "actor creation" (10 `num_cpus=0` actors, each
answering one call, then killed; per second = actors), which Ray's list lacks.

Ray lives in its own virtual environment so it never mixes with Ember's packages:

    python -m venv .rayvenv && .rayvenv/bin/pip install ray==2.60.0 numpy

By default each system runs every workload in one process, Ember first. On a shared or
virtual machine whose speed drifts over minutes (this project's: a sync round trip's rate
swings by several times with the host's idle state), `--alternate` is fairer: each workload runs in a fresh
process per system, Ember and Ray back to back, the one that goes first swapping from row to
row, so both sides of a ratio see the same minute. It costs a cluster start per row and side.

Usage (from the repository root):

    .venv/bin/python scripts/compare_ray.py --duration-s 2 --trials 2
    .venv/bin/python scripts/compare_ray.py --filter tasks --ray-python /path/to/python
    .venv/bin/python scripts/compare_ray.py --alternate --duration-s 1 --trials 2
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERF = os.path.join(ROOT, "client", "ember", "_tools", "perf.py")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ray-python", default=os.environ.get("EMBER_TEST_RAY_PYTHON",
                                                          os.path.join(ROOT, ".rayvenv", "bin", "python")),
                   help="python of a venv with ray installed (default $EMBER_TEST_RAY_PYTHON, "
                        "else .rayvenv/bin/python in the repository root)")
    p.add_argument("--ember-python", default=sys.executable,
                   help="python of a venv with ember installed (default: this one)")
    p.add_argument("--filter", default="", metavar="SUBSTRING",
                   help="only workloads whose name contains SUBSTRING")
    p.add_argument("--duration-s", type=float, default=2.0, help="seconds per trial (default 2)")
    p.add_argument("--trials", type=int, default=4, help="trials per workload (default 4)")
    p.add_argument("--warmup-s", type=float, default=1.0, help="warm-up seconds (default 1)")
    p.add_argument("--alternate", action="store_true",
                   help="one process per workload and system, Ember and Ray back to back, "
                        "alternating which goes first")
    return p.parse_args(argv)


def run_perf(label: str, cmd: list[str], json_path: str, cwd: str) -> list[dict[str, Any]]:
    """Runs one perf.py process (its output goes straight to the terminal); returns its results."""
    print(f"\n=== {label}: {shlex.join(cmd)}", flush=True)
    rc = subprocess.call(cmd + ["--json", json_path], cwd=cwd)
    if rc != 0:
        print(f"=== {label}: exited with status {rc}", flush=True)
    try:
        with open(json_path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def load() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg gives them."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def names_of(python: str, script: list[str], cwd: str) -> list[str]:
    """The workload names a perf.py process lists (--list), in running order."""
    out = subprocess.run([python] + script + ["--list"], cwd=cwd, capture_output=True, text=True)
    return out.stdout.split("\n") if out.returncode == 0 else []


def alternated(wanted: dict[str, list[str]], common: list[str], ember_cmd: list[str],
               ray_cmd: list[str], tmp: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Runs each chosen workload as its own Ember and Ray processes, back to back; row i runs
    Ember first when i is even, Ray first when it is odd."""
    names = wanted["ember"]
    ray_names = set(wanted["ray"])
    ember: list[dict[str, Any]] = []
    ray: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        sides = [("ember", ember_cmd, ember)] + ([("ray", ray_cmd, ray)] if name in ray_names else [])
        for label, cmd, into in (sides if i % 2 == 0 else sides[::-1]):
            path = os.path.join(tmp, f"{label}-{i}.json")
            into.extend(run_perf(f"{label} (load {load()})", cmd + common + ["--name", name], path, tmp))
    return ember, ray


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.2f}" if x < 100 else f"{x:,.0f}"


def table(names: list[str], ember: dict[str, float], ray: dict[str, float]) -> str:
    rows = [("workload", "ember/s", "ray/s", "ember/ray")]
    for n in names:
        e, r = ember.get(n), ray.get(n)
        ratio = f"{e / r:.2f}x" if e is not None and r else "-"
        rows.append((n, fmt(e), fmt(r), ratio))
    w = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for i, row in enumerate(rows):
        lines.append(f"{row[0]:<{w[0]}}  {row[1]:>{w[1]}}  {row[2]:>{w[2]}}  {row[3]:>{w[3]}}")
        if i == 0:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not os.path.exists(args.ray_python):
        print(f"no Ray interpreter at {args.ray_python}; make one with:\n"
              "  python -m venv .rayvenv && .rayvenv/bin/pip install ray==2.60.0 numpy",
              file=sys.stderr)
        return 2
    common = ["--duration-s", str(args.duration_s), "--trials", str(args.trials),
              "--warmup-s", str(args.warmup_s)]
    ember_cmd = [args.ember_python, "-m", "ember._tools.perf"]
    ray_cmd = [args.ray_python, PERF, "--module", "ray"]
    start_load = load()
    print(f"load average at the start: {start_load}", flush=True)
    with tempfile.TemporaryDirectory(prefix="compare_ray_") as tmp:
        # Both run from an empty directory: Ray puts the driver's cwd on its workers' sys.path.
        wanted = {label: [n for n in names_of(cmd[0], cmd[1:], tmp) if n and args.filter in n]
                  for label, cmd in (("ember", ember_cmd), ("ray", ray_cmd))}
        if args.alternate:
            ember, ray = alternated(wanted, common, ember_cmd, ray_cmd, tmp)
        else:
            chosen = ["--filter", args.filter] if args.filter else []
            ember = run_perf("ember", ember_cmd + common + chosen, os.path.join(tmp, "ember.json"), tmp)
            ray = run_perf("ray", ray_cmd + common + chosen, os.path.join(tmp, "ray.json"), tmp)
    ember_rates = {r["name"]: r["per_second"] for r in ember}
    ray_rates = {r["name"]: r["per_second"] for r in ray}
    names = list(ember_rates) + [n for n in ray_rates if n not in ember_rates]
    if not names:
        print("no results", file=sys.stderr)
        return 1
    print(f"\nload average at the start: {start_load}, at the end: {load()}"
          + (" (alternating, a process per row and side)" if args.alternate else ""))
    print(table(names, ember_rates, ray_rates))
    slower = [n for n in names if n in ember_rates and ray_rates.get(n)
              and ember_rates[n] < ray_rates[n]]
    if slower:
        print("\nEmber is slower than Ray on: " + ", ".join(slower))
    missing = ([f"{n} (ember)" for n in wanted["ember"] if n not in ember_rates]
               + [f"{n} (ray)" for n in wanted["ray"] if n not in ray_rates])
    if missing:
        print("\nNo result for: " + ", ".join(missing))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
