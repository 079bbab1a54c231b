"""Cost of token auth on the task and actor hot paths: `ember microbenchmark` rows with auth on
(EMBER_AUTH_TOKEN set) and off (EMBER_AUTH_MODE=disabled) in the same run, interleaved round by
round so that load from other processes on the machine hits both alike.

    .venv/bin/python scripts/bench_auth.py [--rounds 2] [--duration-s 1] [--filter tasks ...]

Prints, per workload, the median over rounds of each mode's mean rate and on/off - 1.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile

DEFAULT_FILTERS = ["tasks", "1:1 actor calls", "n:n actor calls async"]


def run_once(filt: str, auth_on: bool, args: argparse.Namespace) -> dict[str, float]:
    """One `ember microbenchmark --filter filt` in a fresh process; name -> ops/s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMBER_AUTH")}
    if auth_on:
        env["EMBER_AUTH_TOKEN"] = args.token
    else:
        env["EMBER_AUTH_MODE"] = "disabled"
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, "-m", "ember._tools.cli", "microbenchmark", "--filter", filt,
                        "--duration-s", str(args.duration_s), "--trials", str(args.trials),
                        "--warmup-s", "0.5", "--num-cpus", str(args.num_cpus), "--json", out.name],
                       env=env, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       timeout=600)
        with open(out.name) as f:
            return {r["name"]: float(r["per_second"]) for r in json.load(f)}


def main() -> int:
    """Runs the rounds and prints the comparison."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration-s", type=float, default=1.0)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--num-cpus", type=int, default=os.cpu_count() or 1)
    p.add_argument("--filter", action="append", default=None)
    args = p.parse_args()
    args.token = secrets.token_hex(32)
    rates: dict[tuple[str, bool], list[float]] = {}
    for rnd in range(args.rounds):
        for filt in args.filter or DEFAULT_FILTERS:
            order = (True, False) if rnd % 2 == 0 else (False, True)
            for on in order:
                for name, rate in run_once(filt, on, args).items():
                    rates.setdefault((name, on), []).append(rate)
                    print(f"round {rnd} auth {'on ' if on else 'off'} {name}: {rate:.1f}/s",
                          file=sys.stderr, flush=True)
    names = sorted({n for n, _ in rates}, key=lambda n: list(dict.fromkeys(n for n, _ in rates)).index(n))
    print(f"{'workload':45s} {'auth on':>12s} {'auth off':>12s} {'on/off-1':>9s}")
    for name in names:
        on, off = statistics.median(rates[(name, True)]), statistics.median(rates[(name, False)])
        print(f"{name:45s} {on:12.1f} {off:12.1f} {on / off - 1:+9.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
