"""Put bandwidth of a large numpy array as a user gets it, beside the machine's limit.

In ONE fresh process:
1. the limit: a bare copy (numpy.copyto) of the same array into an mmap of a /dev/shm file
   whose pages were touched first (median of 3 copies);
2. `ember.init(object_store_memory=...)` (otherwise default settings), then --puts puts of the
   array straight after it, each timed (the first included), each dropping the previous ref;
3. gets of the last put: timed, and checked zero-copy (the returned array's memory lies inside
   a mapping of the store's arena file, read from /proc/self/maps).

`--ray PYTHON` runs the same puts and gets with Ray in a separate process started with that
interpreter (Ray is never a project dependency). The store is --store-gib (default 2 GiB: an
800 MB put needs at least 1 GB; /dev/shm must hold it).

    python scripts/bench_put.py [--mb 800] [--puts 5] [--store-gib 2] [--settle 0] [--ray PYTHON]

Prints one JSON line per backend: GB/s per put and each put's ratio to the copy limit.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np


def copy_limit(src: np.ndarray, repeats: int = 3) -> float:
    """GB/s of numpy.copyto into an already-touched shared-memory mapping (median)."""
    fd, path = tempfile.mkstemp(dir="/dev/shm", prefix="bench-put-")
    try:
        os.ftruncate(fd, src.nbytes)
        mm = mmap.mmap(fd, src.nbytes)
        dst = np.frombuffer(mm, dtype=np.uint8)
        dst[:] = 1  # touch every page first
        rates = []
        for _ in range(repeats):
            t = time.perf_counter()
            np.copyto(dst, src)
            rates.append(src.nbytes / (time.perf_counter() - t) / 1e9)
        del dst
        mm.close()
        return statistics.median(rates)
    finally:
        os.close(fd)
        os.unlink(path)


def _arena_ranges() -> list[tuple[int, int]]:
    """Address ranges of this process's mappings of an object-store file (Ember's arena, Ray's
    plasma files)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and (parts[5].endswith("/arena") or "plasma" in parts[5]):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi))
    return out


def run_puts(backend: str, src: np.ndarray, puts: int, store_bytes: int, settle_s: float) -> dict[str, Any]:
    """Init the backend, then time each put (first included) and the gets."""
    if backend == "ray":
        import ray as api
        t = time.perf_counter()
        api.init(object_store_memory=store_bytes, include_dashboard=False)
    else:
        import ember as api
        t = time.perf_counter()
        api.init(object_store_memory=store_bytes)
    init_s = time.perf_counter() - t
    time.sleep(settle_s)
    rates = []
    ref = None
    for _ in range(puts):
        ref = None  # the previous object is freed, as when a user rebinds a name
        t = time.perf_counter()
        ref = api.put(src)
        rates.append(src.nbytes / (time.perf_counter() - t) / 1e9)
    get_s = []
    zero_copy = True
    for _ in range(3):
        t = time.perf_counter()
        out = api.get(ref)
        get_s.append(time.perf_counter() - t)
        addr = out.__array_interface__["data"][0]
        zero_copy &= any(lo <= addr and addr + out.nbytes <= hi for lo, hi in _arena_ranges())
        assert out.nbytes == src.nbytes and out[0] == src[0] and out[-1] == src[-1]
        del out
    api.shutdown()
    return {"init_s": round(init_s, 3), "put_gbps": [round(r, 2) for r in rates],
            "get_ms_median": round(statistics.median(get_s) * 1e3, 3), "get_zero_copy": zero_copy}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=800, help="array size in MB (10^6 bytes)")
    ap.add_argument("--puts", type=int, default=5)
    ap.add_argument("--store-gib", type=float, default=2.0, help="object_store_memory, GiB")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds to wait between init and the first put (default 0: straight after)")
    ap.add_argument("--ray", metavar="PYTHON", help="also run with Ray, in a process of this interpreter")
    ap.add_argument("--backend", choices=["ember", "ray"], default="ember", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    src = np.ones(ns.mb * 10**6, dtype=np.uint8)  # allocated and touched before anything is timed
    limit = copy_limit(src)
    res = run_puts(ns.backend, src, ns.puts, int(ns.store_gib * 2**30), ns.settle)
    res = {"backend": ns.backend, "mb": ns.mb, "store_gib": ns.store_gib, "settle_s": ns.settle, "copy_limit_gbps": round(limit, 2),
           **res, "ratio_to_limit": [round(r / limit, 2) for r in res["put_gbps"]]}
    print(json.dumps(res), flush=True)
    if ns.ray and ns.backend == "ember":
        subprocess.run([ns.ray, __file__, "--backend", "ray", "--mb", str(ns.mb), "--puts", str(ns.puts),
                        "--store-gib", str(ns.store_gib), "--settle", str(ns.settle)], check=True)


if __name__ == "__main__":
    sys.exit(main())
