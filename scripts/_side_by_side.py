"""Ember beside Ray in fresh processes, for the microbenchmarks that run one side per process
(bench_dag.py, bench_multiplex.py): each trial runs every side once, the order alternating so
both see the same minute of a shared machine; a side prints its results as one JSON line."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Callable


def alternate(script: str, sides: dict[str, str], args: list[str], trials: int) -> dict[str, list[dict[str, float]]]:
    """`python script --module SIDE *args` per side and trial: each side's results, in order."""
    results: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    for trial in range(trials):
        order = list(sides) if trial % 2 == 0 else list(reversed(sides))
        for side in order:
            cmd = [sides[side], script, "--module", side, *args]
            line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[side].append(json.loads(line.strip().splitlines()[-1]))
    return results


def print_medians(results: dict[str, list[dict[str, float]]], workloads: tuple[str, ...], unit: str) -> None:
    """One row per workload: each side's median rate, and Ember's over Ray's when both ran."""
    sides = list(results)
    print(f"{'workload':<12} " + " ".join(f"{s + ' ' + unit:>14}" for s in sides)
          + ("   ember/ray" if "ray" in sides else ""))
    for w in workloads:
        med = {s: statistics.median(r[w] for r in results[s]) for s in sides}
        ratio = f"   {med['ember'] / med['ray']:.2f}" if "ray" in sides else ""
        print(f"{w:<12} " + " ".join(f"{med[s]:>14.0f}" for s in sides) + ratio)


def main(script: str, doc: str, run_side: Callable[[str, int], dict[str, float]], workloads: tuple[str, ...],
         unit: str, n_default: int, n_help: str) -> dict[str, list[dict[str, float]]] | None:
    """The benchmark's command line: `--module SIDE` runs one side here and prints its JSON;
    otherwise every side runs in fresh processes and the medians are printed (the results are
    returned for a benchmark's own extra lines; None after a one-side run)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--module", choices=("ember", "ray"), help="run one side, print JSON")
    p.add_argument("--ray-python", help="python of a venv with ray installed")
    p.add_argument("-n", type=int, default=n_default, help=n_help)
    p.add_argument("--trials", type=int, default=3)
    a = p.parse_args()
    if a.module:
        print(json.dumps(run_side(a.module, a.n)))
        return None
    sides = {"ember": sys.executable, **({"ray": a.ray_python} if a.ray_python else {})}
    results = alternate(script, sides, ["-n", str(a.n)], a.trials)
    print_medians(results, workloads, unit)
    return results
