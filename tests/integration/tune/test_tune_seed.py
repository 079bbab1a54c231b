"""The seed article's section 4.4 as `examples/tune_seed.py` runs it: 50 samples, ASHA with its
defaults, 4 CPUs, a real (small) training function; ASHA stops most trials early, so far fewer
than 50 x max_t iterations run. With --s3 the results go to an S3 bucket (moto on loopback), as
the article's storage_path does."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "tune_seed.py"


def _run(*args):
    r = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = re.search(r"(\d+) trials, (\d+) errors, (\d+) iterations in total against (\d+) x max_t = (\d+)", r.stdout)
    assert m, r.stdout[-3000:]
    assert "Best config: {'lr': " in r.stdout
    return [int(g) for g in m.groups()]


@pytest.mark.timeout(600)
def test_seed_4_4_runs_50_samples_with_asha():
    trials, errors, iters, samples, full = _run("--num-samples", "50")
    assert (trials, errors, samples, full) == (50, 0, 50, 5000)
    assert iters < full / 3  # ASHA stopped most trials long before max_t


@pytest.mark.timeout(600)
def test_seed_4_4_stores_results_on_s3():
    trials, errors, iters, _, full = _run("--num-samples", "6", "--s3")
    assert (trials, errors) == (6, 0) and iters < full
