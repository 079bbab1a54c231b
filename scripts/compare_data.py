"""Ember Data vs Ray Data 2.60, side by side on this machine (one script runs both).

Workloads (same generated parquet files for both systems, numeric columns, zstd-free snappy):
  map       read_parquet -> map_batches(numpy UDF) -> write_parquet over ~300 MB
  shuffle   read_parquet -> random_shuffle -> iterate, ~150 MB
  iter      iter_batches(batch_size=4096, numpy) over a materialized ~300 MB dataset
  stream4x  a parquet dataset 4x the object store (1 GiB through a 256 MiB store) through
            map_batches (not fused with the read, so blocks cross the store) -> write_parquet,
            with each system's default budget (half the store); Ember's peak store use is
            read from the object manager's Prometheus endpoint every 10 ms.
Both clusters: embedded, num_cpus=2 (this machine has 2 cores), progress bars off. Every
workload runs in a fresh process per system (its own cluster, its own timeout), Ember then Ray,
so one that fails or hangs costs only its own row.

    .venv/bin/python scripts/compare_data.py [--ray-python .rayvenv/bin/python] [--only map,iter]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROW_BYTES = 32  # 4 columns of 8 bytes


def make_data(d: str, total_bytes: int, files: int) -> int:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(d, exist_ok=True)
    rows = total_bytes // ROW_BYTES // files
    rng = np.random.default_rng(0)
    for f in range(files):
        ids = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        t = pa.table({"id": ids, "x": rng.random(rows), "y": rng.random(rows),
                      "z": rng.integers(0, 1000, rows)})
        pq.write_table(t, f"{d}/part-{f:04d}.parquet", row_group_size=rows // 4)
    return rows * files


def udf(batch):
    batch["w"] = batch["x"] * 2.0 + batch["y"]
    return batch


def _peak_sampler(url: str, stop: threading.Event, out: list) -> None:
    peak = 0.0
    while not stop.is_set():
        try:
            text = urllib.request.urlopen(url, timeout=1).read().decode()
            for line in text.splitlines():
                if line.startswith("ember_object_store_used_bytes"):
                    peak = max(peak, float(line.rsplit(" ", 1)[1]))
        except OSError:
            pass
        stop.wait(0.01)
    out.append(peak)


def _free_ports(n: int) -> int:
    """A port p with p..p+n-1 free (Ember's metrics: raylet p, object manager p+1, GCS p+2)."""
    for _ in range(50):
        with socket.socket() as s0:
            s0.bind(("127.0.0.1", 0))
            base = s0.getsockname()[1]
        socks = []
        try:
            for k in range(n):
                sk = socket.socket()
                socks.append(sk)
                sk.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for sk in socks:
                sk.close()
    raise RuntimeError("no free ports")


def run_system(system: str, base: str, only: list[str]) -> dict:
    if system == "ember":
        import ember as ray
    else:
        import ray  # type: ignore[no-redef]
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    res: dict = {}
    kw = dict(num_cpus=2, object_store_memory=2 * 2**30)
    if system == "ray":
        kw.update(include_dashboard=False, log_to_driver=False)
    if {"map", "shuffle", "iter"} & set(only):
        _run_in_memory(ray, system, base, only, kw, res)
    if "stream4x" in only:
        _run_stream4x(ray, system, base, res)
    return res


def _run_in_memory(ray: object, system: str, base: str, only: list[str], kw: dict, res: dict) -> None:
    """map, shuffle and iter on a cluster whose store holds the whole dataset."""
    ray.init(**kw)
    try:
        ray.data.range(100).map_batches(lambda b: b).materialize()  # warm the worker pool
        if "map" in only:
            out = f"{base}/out-{system}"
            shutil.rmtree(out, ignore_errors=True)
            t = time.perf_counter()
            ray.data.read_parquet(f"{base}/d300").map_batches(udf, batch_format="numpy") \
                .write_parquet(out)
            dt = time.perf_counter() - t
            res["map"] = {"rows": _rows(f"{base}/d300"), "s": dt}
        if "shuffle" in only:
            t = time.perf_counter()
            n = 0
            for b in ray.data.read_parquet(f"{base}/d150").random_shuffle() \
                    .iter_batches(batch_size=None, batch_format="pyarrow"):
                n += b.num_rows
            res["shuffle"] = {"rows": n, "s": time.perf_counter() - t}
        if "iter" in only:
            ds = ray.data.read_parquet(f"{base}/d300").materialize()
            t = time.perf_counter()
            n = 0
            for b in ds.iter_batches(batch_size=4096, batch_format="numpy"):
                n += len(b["id"])
            res["iter"] = {"rows": n, "s": time.perf_counter() - t}
            del ds
    finally:
        ray.shutdown()


def _run_stream4x(ray: object, system: str, base: str, res: dict) -> None:
    """1 GiB through a 256 MiB store, each system with its default budget."""
    kw = dict(num_cpus=2, object_store_memory=256 * 2**20)
    stop, peak = threading.Event(), []
    port = _free_ports(3)
    if system == "ember":
        kw["_metrics_export_port"] = port
    else:
        kw.update(include_dashboard=False, log_to_driver=False)
    ray.init(**kw)
    th = None
    try:
        if system == "ember":
            th = threading.Thread(target=_peak_sampler, args=(
                f"http://127.0.0.1:{port + 1}/metrics", stop, peak), daemon=True)
            th.start()
        out = f"{base}/out4x-{system}"
        shutil.rmtree(out, ignore_errors=True)
        # no resource_limits: each system's budget follows the store it runs on
        t = time.perf_counter()
        # num_cpus=0.5 keeps the map out of the read tasks (no fusion), so every block
        # goes through the object store between the two operators
        ds = ray.data.read_parquet(f"{base}/d1g").map_batches(udf, batch_format="numpy",
                                                              num_cpus=0.5)
        ds.write_parquet(out)
        res["stream4x"] = {"rows": _rows(f"{base}/d1g"), "s": time.perf_counter() - t,
                           "out_rows": _rows(out)}
        if system == "ember":
            res["stream4x"]["budget_bytes"] = ds._last_stats.budget_bytes
    except Exception as e:  # report, do not hide
        res["stream4x"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        stop.set()
        if th is not None:
            th.join()
            res.setdefault("stream4x", {})["peak_store_bytes"] = peak[0] if peak else None
        ray.shutdown()


def _rows(d: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(os.path.join(d, f)).num_rows for f in os.listdir(d)
               if f.endswith(".parquet"))


def _run_one(py: str, system: str, base: str, workload: str, timeout: float) -> dict:
    """One workload on one system in a fresh process: its result, or why there is none."""
    try:
        p = subprocess.run([py, __file__, "--system", system, "--base", base, "--only", workload],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not line:
        print(f"{system} {workload} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
        return {"error": f"exit {p.returncode}"}
    return json.loads(line[-1][7:]).get(workload, {})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ray-python", default=".rayvenv/bin/python")
    ap.add_argument("--only", default="map,shuffle,iter,stream4x")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per workload and system")
    ap.add_argument("--system", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    only = ns.only.split(",")
    if ns.system:
        print("RESULT " + json.dumps(run_system(ns.system, ns.base, only)))
        return 0
    base = tempfile.mkdtemp(prefix="compare_data_")
    try:
        make_data(f"{base}/d300", 300 * 10**6, 16)
        make_data(f"{base}/d150", 150 * 10**6, 8)
        if "stream4x" in only:
            make_data(f"{base}/d1g", 2**30, 32)
        results: dict = {"ember": {}, "ray": {}}
        for w in only:
            for system, py in (("ember", sys.executable), ("ray", ns.ray_python)):
                results[system][w] = _run_one(py, system, base, w, ns.timeout)
        print(f"{'workload':10} {'ember rows/s':>14} {'ray rows/s':>14} {'ember/ray':>10}")
        for w in only:
            e, r = results["ember"].get(w, {}), results["ray"].get(w, {})
            er = e["rows"] / e["s"] if "s" in e else None
            rr = r["rows"] / r["s"] if "s" in r else None
            ratio = f"{er / rr:.2f}x" if er and rr else "-"
            print(f"{w:10} {er or 0:>14,.0f} {rr or 0:>14,.0f} {ratio:>10}"
                  + "".join(f"  {n}: {x['error']}" for n, x in (("ember", e), ("ray", r)) if "error" in x))
        s4 = results["ember"].get("stream4x")
        if s4:
            print(f"stream4x ember: {s4}")
            print(f"stream4x ray:   {results['ray'].get('stream4x')}")
        print(json.dumps(results))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
