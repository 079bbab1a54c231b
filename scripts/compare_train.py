"""The same 2-worker DDP job (small MLP, 5 epochs, gloo on CPU) on Ember's TorchTrainer, on Ray
Train 2.60 and launched directly with torch.multiprocessing, in one run on this machine.

Each system runs in a fresh interpreter (`python compare_train.py --system NAME`), started by
the harness, which times from just before it launches the interpreter:
- first step: until a rank finishes its first optimizer step (imports, cluster start, worker
  start-up and process-group set-up included);
- total: until the driver's fit (or the direct launch) returns (cluster shutdown excluded);
- CPU: user + system seconds of the interpreter and every process it started and reaped
  (cluster services and workers included), shutdown included: on a shared machine this is
  steadier than wall time.
Rounds alternate between the systems; the medians are reported.

Every launcher gets the same environment: OMP_NUM_THREADS=1 per worker (torchrun's setting for
more than one process per node; Ember sets it itself, Ray is given it through the environment it
inherits). The direct launch also sets GLOO_SOCKET_IFNAME=lo, as Ember does; Ray runs as users
run it (no GLOO_SOCKET_IFNAME) unless --ray-gloo-ifname is given.

    .venv/bin/python scripts/compare_train.py [--rounds 3] [--ray-python .rayvenv/bin/python]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

EPOCHS = 5
SAMPLES = 8192
BATCH = 64


def train_loop(config: dict) -> None:
    """The job: identical on every system; `report` is the system's report function or None."""
    import torch
    import torch.distributed as dist

    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 1))
    model = torch.nn.parallel.DistributedDataParallel(model)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(SAMPLES, 32, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    ds = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=dist.get_world_size(), rank=rank)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    first = True
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        total = 0.0
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
            if first and rank == 0:
                with open(config["mark"], "w") as f:
                    f.write(repr(time.time()))
                first = False
        report = config.get("report")
        if report is not None:
            report({"epoch": epoch, "loss": total / len(loader)})


# --- one system per interpreter ---------------------------------------------------------------

def run_ember(mark: str) -> None:
    import ember
    from ember import train
    from ember.train.torch import TorchTrainer

    ember.init(num_cpus=2, log_to_driver=False)
    TorchTrainer(lambda: train_loop({"mark": mark, "report": train.report}),
                 scaling_config=train.ScalingConfig(num_workers=2),
                 run_config=train.RunConfig(storage_path=tempfile.mkdtemp(prefix="cmp-ember-"))).fit()
    print("END", repr(time.time()), flush=True)
    ember.shutdown()


def run_ray(mark: str) -> None:
    import ray
    from ray import train
    from ray.train.torch import TorchTrainer

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    TorchTrainer(lambda: train_loop({"mark": mark, "report": train.report}),
                 scaling_config=train.ScalingConfig(num_workers=2),
                 run_config=train.RunConfig(storage_path=tempfile.mkdtemp(prefix="cmp-ray-"))).fit()
    print("END", repr(time.time()), flush=True)
    ray.shutdown()


def _direct_worker(rank: int, world: int, port: int, mark: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    train_loop({"mark": mark})
    dist.destroy_process_group()


def run_direct(mark: str) -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_direct_worker, args=(2, port, mark), nprocs=2, start_method="spawn")
    print("END", repr(time.time()), flush=True)


# --- harness ----------------------------------------------------------------------------------

def measure(system: str, python: str, env: dict[str, str]) -> tuple[float, float, float]:
    import resource

    with tempfile.TemporaryDirectory() as d:
        mark = os.path.join(d, "first_step")
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        out = subprocess.run([python, os.path.abspath(__file__), "--system", system, "--mark", mark],
                             env=env, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"{system} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
        end = float(next(line.split()[1] for line in out.stdout.splitlines() if line.startswith("END ")))
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        with open(mark) as f:
            first = float(f.read())
        return first - t0, end - t0, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["ember", "ray", "direct"])
    ap.add_argument("--mark")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--systems", default="direct,ember,ray")
    ap.add_argument("--ray-python", default=".rayvenv/bin/python")
    ap.add_argument("--ray-gloo-ifname", action="store_true")
    ns = ap.parse_args()
    if ns.system:
        {"ember": run_ember, "ray": run_ray, "direct": run_direct}[ns.system](ns.mark)
        return
    base = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.path.dirname(os.path.abspath(__file__))}
    envs = {"ember": base, "direct": {**base, "GLOO_SOCKET_IFNAME": "lo"},
            "ray": {**base, **({"GLOO_SOCKET_IFNAME": "lo"} if ns.ray_gloo_ifname else {}),
                    "RAY_USAGE_STATS_ENABLED": "0"}}
    pythons = {"ember": sys.executable, "direct": sys.executable, "ray": ns.ray_python}
    systems = ns.systems.split(",")
    results: dict[str, list[tuple[float, float, float]]] = {s: [] for s in systems}
    for r in range(ns.rounds):
        for s in systems:
            first, total, cpu = measure(s, pythons[s], envs[s])
            results[s].append((first, total, cpu))
            print(f"round {r + 1} {s:>6}: first step {first:6.2f} s, total {total:6.2f} s, "
                  f"CPU {cpu:6.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    print(f"\n2 workers, gloo, MLP 32-256-256-1, {SAMPLES} samples, batch {BATCH}, {EPOCHS} epochs; "
          f"median of {ns.rounds} rounds, load average {os.getloadavg()[0]:.1f}")
    med = {s: tuple(statistics.median(x[i] for x in v) for i in range(3)) for s, v in results.items()}
    for s, (f, t, c) in med.items():
        print(f"{s:>6}: time to first step {f:6.2f} s   total {t:6.2f} s   CPU {c:6.2f} s")
    if "ember" in med:
        for ref in ("ray", "direct"):
            if ref in med:
                print(f"ember / {ref}: total {med['ember'][1] / med[ref][1]:.2f}x, "
                      f"first step {med['ember'][0] / med[ref][0]:.2f}x")
    print(json.dumps({s: {"first_step_s": round(f, 3), "total_s": round(t, 3), "cpu_s": round(c, 3)}
                      for s, (f, t, c) in med.items()}))


if __name__ == "__main__":
    main()
