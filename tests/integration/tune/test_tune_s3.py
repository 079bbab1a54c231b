"""Experiment state and checkpoints on S3 (a moto server on loopback): Tuner.fit writes them
through pyarrow's S3 filesystem from the driver and from the trial actors, results read back
from the bucket, and Tuner.restore continues from the s3:// URI."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pyarrow.fs
import pytest

import ember
from ember import tune

CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
         "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a free loopback port with bucket "bucket", and a cluster whose
    workers see the credentials; yields the storage URI prefix."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    saved = {k: os.environ.get(k) for k in CREDS}
    os.environ.update(CREDS)
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fs = pyarrow.fs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
                                 allow_bucket_creation=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            fs.create_dir("bucket")
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    try:
        yield fs, f"s3://bucket/results?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    finally:
        ember.shutdown()
        proc.terminate()
        proc.wait(20)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _trainable(config):
    ckpt = tune.get_checkpoint()
    start = ckpt.to_dict()["step"] if ckpt else 0
    for step in range(start + 1, 4):
        tune.report({"score": config["a"] * step}, checkpoint=tune.Checkpoint.from_dict({"step": step, "a": config["a"]}))


def test_experiment_on_s3_writes_state_and_checkpoints_and_restores(s3):
    fs, uri = s3
    results = tune.Tuner(_trainable, param_space={"a": tune.grid_search([1, 2, 3])},
                         tune_config=tune.TuneConfig(metric="score", mode="max"),
                         run_config=tune.RunConfig(storage_path=uri, name="exp", verbose=0)).fit()
    assert results.num_terminated == 3 and results.num_errors == 0
    best = results.get_best_result()
    assert isinstance(best.checkpoint.filesystem, pyarrow.fs.S3FileSystem)
    assert best.checkpoint.path.startswith("bucket/results/exp/")
    assert best.checkpoint.to_dict() == {"step": 3, "a": 3}
    names = {i.base_name for i in fs.get_file_info(pyarrow.fs.FileSelector("bucket/results/exp"))}
    assert {"experiment_state.pkl", "tuner.pkl"} <= names
    trial_files = {i.base_name for i in fs.get_file_info(pyarrow.fs.FileSelector(best.path, recursive=True))}
    assert {"params.json", "result.json", "checkpoint_000002"} <= trial_files
    exp_uri = uri.replace("/results?", "/results/exp?")
    assert tune.Tuner.can_restore(exp_uri)
    restored = tune.Tuner.restore(exp_uri, _trainable)
    again = restored.fit()  # every trial had finished: nothing runs again
    assert again.num_terminated == 3
    assert sorted(r.metrics["score"] for r in again) == [3, 6, 9]
