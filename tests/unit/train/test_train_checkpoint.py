"""ember.train's shared pieces without a cluster: Checkpoint (directory, dict, metadata),
storage helpers, configuration validation, the session dispatch, and lazy library imports."""
from __future__ import annotations

import os
import pathlib

import pyarrow.fs
import pytest

from ember import train
from ember.air import session, storage


def test_checkpoint_from_directory_round_trip(tmp_path):
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "model.bin").write_bytes(b"\x00\x01weights")
    (src / "sub" / "opt.txt").write_text("adam")
    ckpt = train.Checkpoint.from_directory(src)
    assert ckpt.path == str(src) and isinstance(ckpt.filesystem, pyarrow.fs.LocalFileSystem)
    out = ckpt.to_directory(tmp_path / "copy")
    assert pathlib.Path(out, "model.bin").read_bytes() == b"\x00\x01weights"
    assert pathlib.Path(out, "sub", "opt.txt").read_text() == "adam"
    with ckpt.as_directory() as d:
        assert d == str(src)  # local checkpoints are not copied


def test_checkpoint_from_dict_keeps_the_seed_form(tmp_path):
    state = {"model_state_dict": {"w": [1.0, 2.0]}, "epoch": 3}
    ckpt = train.Checkpoint.from_dict(state)
    assert ckpt.to_dict() == state
    moved = train.Checkpoint.from_directory(ckpt.to_directory(tmp_path / "moved"))
    assert moved.to_dict() == state
    with pytest.raises(ValueError, match="from_dict"):
        train.Checkpoint.from_directory(tmp_path).to_dict()
    with pytest.raises(TypeError, match="dict"):
        train.Checkpoint.from_dict([1, 2])  # type: ignore[arg-type]


def test_checkpoint_metadata_and_uri_paths(tmp_path):
    ckpt = train.Checkpoint.from_directory(tmp_path)
    assert ckpt.get_metadata() == {}
    ckpt.set_metadata({"step": 1})
    ckpt.update_metadata({"loss": 0.5})
    assert ckpt.get_metadata() == {"step": 1, "loss": 0.5}
    uri = train.Checkpoint(f"file://{tmp_path}")
    assert uri.path == str(tmp_path) and uri.get_metadata()["step"] == 1
    with pytest.raises(ValueError, match="not a directory"):
        train.Checkpoint.from_directory(tmp_path / "missing")


def test_storage_upload_replaces_whole_directory(tmp_path):
    fs, root = storage.resolve(str(tmp_path / "results"))
    local = tmp_path / "local"
    local.mkdir()
    (local / "a").write_text("1")
    dest = storage.join(root, "exp", "checkpoint_000000")
    storage.upload_dir(str(local), fs, dest)
    (local / "a").unlink()
    (local / "b").write_text("2")
    storage.upload_dir(str(local), fs, dest)
    assert sorted(os.listdir(dest)) == ["b"]
    assert not [n for n in os.listdir(os.path.dirname(dest)) if n.startswith(".tmp-")]
    storage.write_bytes(fs, storage.join(root, "exp", "state.json"), b"{}")
    assert storage.read_bytes(fs, storage.join(root, "exp", "state.json")) == b"{}"
    storage.delete_dir(fs, dest)
    assert not storage.exists(fs, dest)
    with pytest.raises(ValueError, match="empty"):
        storage.resolve("")


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="num_workers"):
        train.ScalingConfig(num_workers=0)
    with pytest.raises(NotImplementedError, match=r"num_workers=\(1, 4\).*elastic training"):
        train.ScalingConfig(num_workers=(1, 4))  # Ray 2.60's elastic range
    with pytest.raises(ValueError, match="placement_strategy"):
        train.ScalingConfig(placement_strategy="DIAGONAL")
    with pytest.raises(ValueError, match="num_to_keep"):
        train.CheckpointConfig(num_to_keep=0)
    with pytest.raises(ValueError, match="max_failures"):
        train.FailureConfig(max_failures=-2)
    sc = train.ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"CPU": 4, "GPU": 1})
    assert sc.total_resources == {"CPU": 8.0, "GPU": 2.0}
    assert train.ScalingConfig(num_workers=3).total_resources == {"CPU": 3.0}
    rc = train.RunConfig(name="exp")
    assert rc.failure_config == train.FailureConfig() and rc.checkpoint_config == train.CheckpointConfig()


def test_report_outside_a_run_is_a_clear_error_and_sessions_dispatch():
    with pytest.raises(RuntimeError, match="inside a training function"):
        train.report({"loss": 1.0})

    class Recorder:
        def __init__(self) -> None:
            self.reports: list = []

        def report(self, metrics, checkpoint, checkpoint_dir_name):
            self.reports.append((metrics, checkpoint, checkpoint_dir_name))

        def get_checkpoint(self):
            return None

        def get_context(self):
            return session.TrainContext(world_rank=1, world_size=2, trial_name="t0")

        def get_dataset_shard(self, name):
            return name

    rec = Recorder()
    session.set_session(rec)
    try:
        train.report({"loss": 1.0})
        assert rec.reports == [({"loss": 1.0}, None, None)]
        ctx = train.get_context()
        assert (ctx.get_world_rank(), ctx.get_world_size(), ctx.get_trial_name()) == (1, 2, "t0")
        assert train.get_dataset_shard("eval") == "eval"
        with pytest.raises(TypeError, match="dict"):
            train.report([1.0])  # type: ignore[arg-type]
    finally:
        session.set_session(None)
