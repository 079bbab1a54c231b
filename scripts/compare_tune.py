"""Tune overhead, Ember vs Ray Tune 2.60, in one run on this machine.

100 trials of a no-op function trainable (one report each), 4 at a time, on a 4-CPU cluster;
the wall time of `Tuner.fit()` is measured in a fresh process per system (cluster start-up is
not counted). Both use their defaults for function trainables (actors reused, each with its
trial's placement group), verbose=0; `--no-reuse` makes every trial a new actor in a new
placement group (reuse_actors=False) on both; `--systems` picks which run.

    .venv/bin/python scripts/compare_tune.py [--trials 100] [--concurrency 4] [--repeat 1]
        [--no-reuse] [--systems ray,ember] [--ray-python .rayvenv/bin/python]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

PROGRAM = r"""
import json, sys, time
MOD = sys.argv[1]
if MOD == "ray":
    import ray
    from ray import tune
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
else:
    import ember as ray
    from ember import tune
    ray.init(num_cpus=4, log_to_driver=False)

def noop(config):
    tune.report({"score": config["x"]})

trials, conc, storage = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
reuse = None if sys.argv[5] == "default" else False
tuner = tune.Tuner(noop, param_space={"x": tune.uniform(0, 1)},
                   tune_config=tune.TuneConfig(num_samples=trials, max_concurrent_trials=conc,
                                               reuse_actors=reuse),
                   run_config=tune.RunConfig(storage_path=storage, name="noop", verbose=0))
t0 = time.perf_counter()
results = tuner.fit()
wall = time.perf_counter() - t0
ok = sum(1 for r in results if r.error is None and r.metrics.get("score") is not None)
print("RESULT " + json.dumps({"wall_s": wall, "ok": ok, "n": len(results)}), flush=True)
ray.shutdown()
"""


def run(python: str, mod: str, trials: int, conc: int, reuse: str = "default") -> dict:
    env = dict(os.environ, RAY_AIR_NEW_OUTPUT="0", TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="0")
    with tempfile.TemporaryDirectory(prefix=f"compare_tune_{mod}_") as storage:
        p = subprocess.run([python, "-c", PROGRAM, mod, str(trials), str(conc), storage, reuse],
                           capture_output=True, text=True, timeout=900, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{mod} run failed (rc={p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--ray-python", default=".rayvenv/bin/python")
    ap.add_argument("--no-reuse", action="store_true", help="reuse_actors=False on both")
    ap.add_argument("--systems", default="ray,ember")
    args = ap.parse_args()
    systems = args.systems.split(",")
    rows = []
    for i in range(args.repeat):
        for mod, python in (("ray", args.ray_python), ("ember", sys.executable)):
            if mod not in systems:
                continue
            r = run(python, mod, args.trials, args.concurrency, "false" if args.no_reuse else "default")
            rows.append((mod, r))
            print(f"[{i + 1}/{args.repeat}] {mod:5s}: fit() {r['wall_s']:.2f} s for {r['n']} trials "
                  f"({r['ok']} ok), {args.trials / r['wall_s']:.1f} trials/s", flush=True)
    best = {m: min(r["wall_s"] for mm, r in rows if mm == m) for m in systems}
    if len(best) < 2:
        return
    print(f"best of {args.repeat}: Ray Tune {best['ray']:.2f} s, Ember {best['ember']:.2f} s, "
          f"Ember/Ray = {best['ember'] / best['ray']:.2f} (goal <= 0.50)")


if __name__ == "__main__":
    main()
