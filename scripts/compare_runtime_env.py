"""Runtime envs, Ember vs Ray, in one run.

Each system runs in its own process (Ember under this interpreter, Ray under the Ray venv's) on
a one-node cluster (2 CPUs) and times, per workload, the first task in a new env (set-up
included) and then `rounds` sequential tasks in the same env (a worker of the env reused):
- env_vars: a new env_vars env;
- working_dir: a directory of 50 small files (zipped, uploaded, unpacked on the node); Ember
  only: Ray 2.60 refuses local directories in a task's env (job level only);
- pip: a one-module wheel written here, installed with --no-index from a local directory (a new
  virtualenv); then `pip_again`: the same requirements under other env_vars (the venv reused).
Plus `plain`: `rounds` sequential tasks without an env, as the reference.

    .venv/bin/python scripts/compare_runtime_env.py [--rounds 200] [--ray-python .rayvenv/bin/python]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap

WORKER = textwrap.dedent("""
    import json, os, sys, time, zipfile
    module, rounds, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if module == "ray":
        import ray as system
        system.init(num_cpus=2, include_dashboard=False)
    else:
        import ember as system
        system.init(num_cpus=2)

    @system.remote
    def f(name):
        import importlib
        return importlib.import_module(name).VALUE if name else os.environ.get("BENCH")

    wd = os.path.join(tmp, f"wd-{module}")
    os.makedirs(wd)
    for i in range(50):
        with open(os.path.join(wd, f"m{i}.py"), "w") as fh:
            fh.write(f"VALUE = {i}\\n" + "# padding\\n" * 50)
    dist = os.path.join(tmp, f"dist-{module}")
    os.makedirs(dist)
    name = f"benchpkg_{module}"
    info = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(os.path.join(dist, f"{name}-1.0-py3-none-any.whl"), "w") as zf:
        files = {f"{name}/__init__.py": "VALUE = 7\\n",
                 f"{info}/METADATA": f"Metadata-Version: 2.1\\nName: {name}\\nVersion: 1.0\\n",
                 f"{info}/WHEEL": "Wheel-Version: 1.0\\nGenerator: bench\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
        for p, t in files.items():
            zf.writestr(p, t)
        zf.writestr(f"{info}/RECORD", "".join(f"{p},,\\n" for p in files) + f"{info}/RECORD,,\\n")
    pip = {"packages": [f"{name}==1.0"], "pip_install_options": ["--no-index", "--find-links", dist]}
    workloads = [
        ("plain", None, ""),
        ("env_vars", {"env_vars": {"BENCH": "1"}}, ""),
        ("working_dir", {"working_dir": wd}, "m7"),
        ("pip", {"pip": pip}, name),
        ("pip_again", {"pip": pip, "env_vars": {"BENCH": "2"}}, name),
    ]
    system.get(f.remote(""))  # the cluster is up and a plain worker is warm
    out = {}
    for label, env, arg in workloads:
        if module == "ray" and label == "working_dir":
            continue  # Ray 2.60 takes local directories only in ray.init's (job) env
        g = f.options(runtime_env=env) if env else f
        t = time.perf_counter()
        system.get(g.remote(arg))
        first = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(rounds):
            system.get(g.remote(arg))
        out[label] = {"first_s": first, "warm_per_s": rounds / (time.perf_counter() - t)}
    system.shutdown()
    print("RESULT " + json.dumps(out))
""")


def run(python: str, module: str, rounds: int) -> dict | None:
    """One system's figures, or None (after printing why) when its run failed."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            r = subprocess.run([python, "-c", WORKER, module, str(rounds), tmp], capture_output=True,
                               text=True, timeout=900)
        except subprocess.TimeoutExpired:
            print(f"{module}: timed out", file=sys.stderr)
            return None
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    print(f"{module} failed (exit {r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--ray-python", default=".rayvenv/bin/python")
    ns = ap.parse_args()
    ember = run(sys.executable, "ember", ns.rounds)
    ray = run(ns.ray_python, "ray", ns.rounds)
    print(f"{'workload':12} {'ember first s':>14} {'ray first s':>12} {'ember warm/s':>13} {'ray warm/s':>11}")
    for label in ("plain", "env_vars", "working_dir", "pip", "pip_again"):
        e = (ember or {}).get(label, {})
        r = (ray or {}).get(label, {})
        print(f"{label:12} {e.get('first_s', float('nan')):14.3f} {r.get('first_s', float('nan')):12.3f} "
              f"{e.get('warm_per_s', float('nan')):13.0f} {r.get('warm_per_s', float('nan')):11.0f}")
    return 0 if ember and ray else 1


if __name__ == "__main__":
    sys.exit(main())
