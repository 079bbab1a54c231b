"""Ember Data vs Ray Data 2.60 vs the bare library, side by side (issue workloads beyond `map`).

Workloads (the same generated files for every side):
  join        inner join of two 2M-row parquet tables on an int64 key (half the keys match)
  groupby     groupby(k).aggregate(Sum(x), Mean(y)) over 10M rows, 1,000 groups
  preprocess  StandardScaler(x, y) then OneHotEncoder(cat), fitted and applied to 5M rows
  images      read_images of 2,000 32x32 PNGs -> map_batches(normalize) -> iter_torch_batches(64)
The bare side is the limit: pyarrow's Table.join and group_by, numpy/pandas for the scaler and
the encoder, Pillow + numpy + torch for the images, in one process with no cluster.
Every (workload, side) runs in a fresh process with its own cluster (num_cpus=2, progress bars
off); each side materializes or consumes the full result, and the time starts after init and a
warm-up. Rounds alternate the order of Ember and Ray.

    .venv/bin/python scripts/compare_data_ops.py --ray-python /path/to/ray-venv/bin/python [--only join,groupby]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = ("join", "groupby", "preprocess", "images")


def make_data(base: str, scale: float = 1.0) -> None:
    """The files of every workload; `scale` shrinks the row and image counts (a smoke run)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    n = int(2_000_000 * scale)
    for name, keys in (("left", np.arange(n)), ("right", np.arange(n // 2, n + n // 2))):
        os.makedirs(f"{base}/{name}")
        for i, part in enumerate(np.array_split(rng.permutation(keys), 8)):
            pq.write_table(pa.table({"id": part.astype(np.int64), f"v_{name}": rng.random(len(part))}),
                           f"{base}/{name}/p{i}.parquet")
    os.makedirs(f"{base}/g")
    for i in range(10):
        m = int(1_000_000 * scale)
        pq.write_table(pa.table({"k": rng.integers(0, 1000, m), "x": rng.random(m), "y": rng.random(m)}),
                       f"{base}/g/p{i}.parquet")
    os.makedirs(f"{base}/pre")
    cats = np.array(["red", "green", "blue", "cyan", "magenta"])
    for i in range(5):
        m = int(1_000_000 * scale)
        pq.write_table(pa.table({"x": rng.normal(3, 2, m), "y": rng.random(m),
                                 "cat": cats[rng.integers(0, len(cats), m)]}), f"{base}/pre/p{i}.parquet")
    from PIL import Image

    os.makedirs(f"{base}/img")
    for i in range(int(2000 * scale)):
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(f"{base}/img/{i:05d}.png")


def _normalize(batch):
    batch["image"] = batch["image"].astype("float32") / 255.0
    return batch


def run_bare(workload: str, base: str) -> int:
    import numpy as np
    import pyarrow.dataset as pds

    if workload == "join":
        left = pds.dataset(f"{base}/left").to_table()
        right = pds.dataset(f"{base}/right").to_table()
        return left.join(right, "id", join_type="inner").num_rows
    if workload == "groupby":
        t = pds.dataset(f"{base}/g").to_table()
        return t.group_by("k").aggregate([("x", "sum"), ("y", "mean")]).num_rows
    if workload == "preprocess":
        df = pds.dataset(f"{base}/pre").to_table().to_pandas()
        for c in ("x", "y"):
            df[c] = (df[c] - df[c].mean()) / df[c].std(ddof=0)
        cats = sorted(df["cat"].unique())
        codes = df["cat"].map({c: i for i, c in enumerate(cats)}).to_numpy()
        df["cat"] = list(np.eye(len(cats), dtype=np.int64)[codes])
        return len(df)
    import torch
    from PIL import Image

    files = sorted(os.listdir(f"{base}/img"))
    n = 0
    for s in range(0, len(files), 64):
        arr = np.stack([np.asarray(Image.open(f"{base}/img/{f}").convert("RGB")) for f in files[s:s + 64]])
        n += len(torch.as_tensor(arr.astype("float32") / 255.0))
    return n


def run_system(system: str, workload: str, base: str) -> tuple[int, float]:
    """Rows out and seconds, timed after init and a warm-up."""
    if system == "ember":
        import ember as ray
    else:
        import ray  # type: ignore[no-redef]
    ray.data.DataContext.get_current().enable_progress_bars = False
    kw: dict = {"num_cpus": 2}
    if system == "ray":
        kw.update(include_dashboard=False, log_to_driver=False)
    ray.init(**kw)
    ray.data.range(100).map_batches(lambda b: b).materialize()  # warm the worker pool
    t = time.perf_counter()
    if workload == "join":
        left, right = ray.data.read_parquet(f"{base}/left"), ray.data.read_parquet(f"{base}/right")
        n = left.join(right, join_type="inner", num_partitions=8, on=("id",)).count()
    elif workload == "groupby":
        from importlib import import_module

        agg = import_module(f"{system}.data.aggregate")
        n = ray.data.read_parquet(f"{base}/g").groupby("k").aggregate(agg.Sum("x"), agg.Mean("y")).count()
    elif workload == "preprocess":
        from importlib import import_module

        pre = import_module(f"{system}.data.preprocessors")
        chain = pre.Chain(pre.StandardScaler(columns=["x", "y"]), pre.OneHotEncoder(columns=["cat"]))
        n = chain.fit_transform(ray.data.read_parquet(f"{base}/pre")).materialize().count()
    else:
        n = 0
        ds = ray.data.read_images(f"{base}/img", mode="RGB").map_batches(_normalize, batch_format="numpy")
        for b in ds.iter_torch_batches(batch_size=64):
            n += len(b["image"])
    dt = time.perf_counter() - t
    ray.shutdown()
    return n, dt


def _one(py: str, side: str, workload: str, base: str, timeout: float) -> dict:
    try:
        p = subprocess.run([py, __file__, "--side", side, "--workload", workload, "--base", base],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    out = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not out:
        return {"error": f"exit {p.returncode}: {p.stderr[-1500:]}"}
    return json.loads(out[-1][7:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ray-python", help="python of a venv with ray[data] 2.60 installed")
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per workload and side")
    ap.add_argument("--scale", type=float, default=1.0, help="shrink the data (e.g. 0.01 for a smoke run)")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--base", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        if a.side == "bare":
            t = time.perf_counter()
            n, dt = run_bare(a.workload, a.base), time.perf_counter() - t
        else:
            n, dt = run_system(a.side, a.workload, a.base)
        print("RESULT " + json.dumps({"rows": n, "s": dt}))
        return 0
    only = a.only.split(",")
    unknown = sorted(set(only) - set(WORKLOADS))
    if unknown:
        ap.error(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    sides = {"ember": sys.executable, "bare": sys.executable, **({"ray": a.ray_python} if a.ray_python else {})}
    base = tempfile.mkdtemp(prefix="compare_data_ops_")
    try:
        make_data(base, a.scale)
        res: dict[str, dict[str, list[dict]]] = {w: {s: [] for s in sides} for w in only}
        for r in range(a.rounds):
            for w in only:
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for s in order:
                    res[w][s].append(_one(sides[s], s, w, base, a.timeout))
        print(f"{'workload':<11}" + "".join(f"{s + ' s':>12}" for s in sides)
              + ("  ember/ray" if "ray" in sides else "") + "  bare/ember")
        for w in only:
            med = {s: statistics.median(x["s"] for x in res[w][s]) if all("s" in x for x in res[w][s]) else None
                   for s in sides}
            rows = {s: {x.get("rows") for x in res[w][s]} for s in sides}
            cells = "".join(f"{med[s]:>12.2f}" if med[s] is not None else f"{'-':>12}" for s in sides)
            ratio = (f"  {med['ray'] / med['ember']:>8.2f}x" if "ray" in sides and med["ray"] and med["ember"]
                     else "")
            limit = f"  {med['bare'] / med['ember']:>8.2f}" if med["bare"] and med["ember"] else ""
            print(f"{w:<11}{cells}{ratio}{limit}   rows {rows}")
            for s in sides:
                for x in res[w][s]:
                    if "error" in x:
                        print(f"  {w} {s}: {x['error']}")
        print(json.dumps(res))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
