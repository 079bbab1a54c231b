"""The seed article's section 4.4 (Ray Tune: hyperparameter tuning) on Ember.

The article's code runs as written after `import ember as ray` (and `from ember import tune`);
its `train_func` is a placeholder, so here it is a real small one: an MLP with `num_layers`
hidden layers trained with Adam (numpy) on a synthetic regression task, `batch_size` examples
per step, one epoch per reported iteration, `loss` the validation MSE. ASHAScheduler() with its
defaults (max_t=100 iterations, grace_period=1, reduction_factor=4) stops weak trials early.

The article stores results in `s3://bucket/ray_results`; this example stores them in a local
directory, or with `--s3` in an S3 bucket served by a local moto server on loopback (the `dev`
extra installs moto).

    .venv/bin/python examples/tune_seed.py [--num-samples 50] [--s3]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

import ember as ray
from ember import tune
from ember.tune.schedulers import ASHAScheduler


def _dataset(seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(768, 8))
    y = (np.sin(x[:, :1] * 2) + x[:, 1:2] * x[:, 2:3] + 0.1 * rng.normal(size=(768, 1)))
    return x[:512], y[:512], x[512:], y[512:]


def train_func(config):
    """One trial: trains the MLP, reporting the validation loss after every epoch."""
    xtr, ytr, xva, yva = _dataset()
    rng = np.random.default_rng(1)
    width, layers = 32, int(config["num_layers"])
    sizes = [xtr.shape[1]] + [width] * layers + [1]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=False):
        params += [rng.normal(scale=np.sqrt(2 / a), size=(a, b)), np.zeros(b)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    lr, bs, step = config["lr"], int(config["batch_size"]), 0

    def forward(x):
        acts = [x]
        for i in range(0, len(params) - 2, 2):
            acts.append(np.maximum(acts[-1] @ params[i] + params[i + 1], 0))
        return acts, acts[-1] @ params[-2] + params[-1]

    for epoch in range(100):
        order = rng.permutation(len(xtr))
        for s in range(0, len(xtr), bs):
            idx = order[s:s + bs]
            acts, out = forward(xtr[idx])
            grad = 2 * (out - ytr[idx]) / len(idx)
            grads = [None] * len(params)
            for i in range(len(params) - 2, -1, -2):
                grads[i], grads[i + 1] = acts[i // 2].T @ grad, grad.sum(0)
                if i:
                    grad = (grad @ params[i].T) * (acts[i // 2] > 0)
            step += 1
            for i, g in enumerate(grads):  # Adam
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                params[i] -= lr * (m[i] / (1 - 0.9 ** step)) / (np.sqrt(v[i] / (1 - 0.999 ** step)) + 1e-8)
        loss = float(np.mean((forward(xva)[1] - yva) ** 2))
        ray.train.report({"loss": loss, "epoch": epoch})


def _moto_s3() -> tuple[subprocess.Popen, str]:
    """A local S3 (moto) on a free loopback port, with a bucket named "bucket"."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    import pyarrow.fs

    fs = pyarrow.fs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
                                 allow_bucket_creation=True)
    for _ in range(100):
        try:
            fs.create_dir("bucket")
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"s3://bucket/ray_results?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"


def main() -> None:
    ap = argparse.ArgumentParser(description="the seed article's Ray Tune example on Ember")
    ap.add_argument("--num-samples", type=int, default=50)
    ap.add_argument("--s3", action="store_true", help="store results in a local moto S3 bucket")
    args = ap.parse_args()
    ray.init(num_cpus=4)
    moto = None
    storage_path = os.path.join(tempfile.gettempdir(), "ember_tune_seed")
    if args.s3:
        moto, storage_path = _moto_s3()
    t0 = time.time()
    try:
        # --- the article's code (section 4.4) -------------------------------------------------
        search_space = {
            "lr": tune.loguniform(1e-5, 1e-3),
            "batch_size": tune.choice([16, 32, 64]),
            "num_layers": tune.randint(2, 8),
        }
        tuner = tune.Tuner(
            train_func,
            param_space=search_space,
            tune_config=tune.TuneConfig(
                metric="loss",
                mode="min",
                num_samples=args.num_samples,  # 尝试 50 组超参
                scheduler=ASHAScheduler(),  # 早停表现差的试验
            ),
            run_config=tune.RunConfig(
                storage_path=storage_path,
            ),
        )
        results = tuner.fit()
        best = results.get_best_result()
        print(f"Best config: {best.config}")
        # --------------------------------------------------------------------------------------
        iters = sum(r.metrics.get("training_iteration", 0) for r in results)
        full = sum(1 for r in results if r.metrics.get("training_iteration") == 100)
        print(f"{len(results)} trials, {results.num_errors} errors, {iters} iterations in total against "
              f"{args.num_samples} x max_t = {args.num_samples * 100}; {full} trials ran all 100 epochs; "
              f"best loss {best.metrics['loss']:.4f}; {time.time() - t0:.1f} s")
        if results.num_errors or len(results) != args.num_samples or iters >= args.num_samples * 100:
            raise SystemExit("the seed 4.4 example did not run as expected")
    finally:
        ray.shutdown()
        if moto is not None:
            moto.terminate()
            moto.wait(10)


if __name__ == "__main__":
    main()
