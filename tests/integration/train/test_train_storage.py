"""Train with an s3:// storage_path, against a real S3 server (moto_server from the dev extra)
on a free loopback port: ranks upload their checkpoints to the bucket, old ones are deleted
there, the Result's checkpoint reads back from it, and a failed run restores from its URI. Also
the run's spans (start-up, reports, checkpoints) with the ember_file exporter."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pyarrow.fs
import pytest

pytest.importorskip("torch", reason="the train extra (torch==2.13.0) is not installed")

import ember  # noqa: E402
from ember import train  # noqa: E402
from ember.train import CheckpointConfig, RunConfig, ScalingConfig  # noqa: E402
from ember.train.torch import TorchTrainer  # noqa: E402


@pytest.fixture(scope="module")
def s3_server():
    """moto_server on 127.0.0.1:<free port>; yields (uri prefix for a bucket, filesystem)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        fs = pyarrow.fs.S3FileSystem(access_key="testing", secret_key="testing", scheme="http",
                                     endpoint_override=f"127.0.0.1:{port}", region="us-east-1",
                                     allow_bucket_creation=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                fs.create_dir("train-bucket")
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        query = f"endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
        yield f"s3://testing:testing@train-bucket/runs?{query}", fs, query
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def loop(config):
    import torch

    model = train.torch.prepare_model(torch.nn.Linear(3, 1))
    start = 0
    if train.get_checkpoint() is not None:
        start = train.get_checkpoint().to_dict()["epoch"] + 1
    for epoch in range(start, 4):
        loss = model(torch.ones(8, 3)).pow(2).mean()
        loss.backward()
        train.report({"epoch": epoch, "loss": float(loss)},
                     checkpoint=train.Checkpoint.from_dict({"epoch": epoch, "model": model.state_dict()}))
        if epoch == config.get("fail_at") and start == 0:
            raise RuntimeError("interrupted")


def test_s3_storage_checkpoints_retention_and_restore(cluster, s3_server):
    uri, fs, query = s3_server
    trainer = TorchTrainer(loop, train_loop_config={"fail_at": 2}, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name="s3run", storage_path=uri,
                                                checkpoint_config=CheckpointConfig(num_to_keep=2)))
    with pytest.raises(train.TrainingFailedError, match="interrupted"):
        trainer.fit()
    names = {i.base_name for i in fs.get_file_info(pyarrow.fs.FileSelector("train-bucket/runs/s3run"))}
    assert names == {"checkpoint_000001", "checkpoint_000002", "result.json", "trainer.pkl", "trainer_state.json"}
    run_uri = f"s3://testing:testing@train-bucket/runs/s3run?{query}"
    assert TorchTrainer.can_restore(run_uri)
    result = TorchTrainer.restore(run_uri).fit()
    assert result.metrics["epoch"] == 3 and result.path == "s3://train-bucket/runs/s3run"
    assert isinstance(result.checkpoint.filesystem, pyarrow.fs.S3FileSystem)
    assert result.checkpoint.to_dict()["epoch"] == 3
    assert set(result.checkpoint.to_dict()["model"]) == {"module.weight", "module.bias"}
    names = {i.base_name for i in fs.get_file_info(pyarrow.fs.FileSelector("train-bucket/runs/s3run"))}
    assert {n for n in names if n.startswith("checkpoint_")} == {"checkpoint_000002", "checkpoint_000003"}
    assert list(result.metrics_dataframe["epoch"]) == [0, 1, 2, 3]


DRIVER = textwrap.dedent("""
    import ember, torch
    from ember import train
    from ember.train.torch import TorchTrainer

    def loop():
        for i in range(2):
            train.report({"i": i}, checkpoint=train.Checkpoint.from_dict({"i": i}))

    ember.init(num_cpus=2)
    TorchTrainer(loop, scaling_config=train.ScalingConfig(num_workers=2),
                 run_config=train.RunConfig(name="traced", storage_path={storage!r})).fit()
    ember.shutdown()
""")


def test_spans_for_start_up_reports_and_checkpoints(tmp_path):
    """A traced driver in a subprocess (the SDK is configured from its environment)."""
    spans_dir = tmp_path / "spans"
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "ember_file", "EMBER_TRACE_DIR": str(spans_dir)}
    subprocess.run([sys.executable, "-c", DRIVER.replace("{storage!r}", repr(str(tmp_path / "r")))],
                   env=env, check=True, timeout=240, capture_output=True)
    spans = []
    for name in os.listdir(spans_dir):
        with open(spans_dir / name) as f:
            spans += [json.loads(line) for line in f if line.strip()]
    by_name: dict[str, list] = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    assert len(by_name["ember.train.start"]) == 1
    assert len(by_name["ember.train.report"]) == 2
    assert len(by_name["ember.train.checkpoint"]) == 4  # 2 reports x 2 ranks
    run = by_name["ember.train.run"][0]
    trace_ids = {s["trace_id"] for n in ("ember.train.start", "ember.train.report", "ember.train.checkpoint")
                 for s in by_name[n]}
    assert trace_ids == {run["trace_id"]}  # the workers' spans join the driver's run trace
