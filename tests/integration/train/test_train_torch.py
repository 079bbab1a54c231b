"""TorchTrainer on a real embedded cluster with 2 CPU workers (gloo): the seed article's 4.1
loop (DDP keeps the ranks' weights identical while they read different shards, loss falls, the
checkpoint's dict holds the model state), a rank's process killed at epoch 5 (restart from the
epoch-5 checkpoint, finish epoch 9), failures past max_failures, checkpoint retention, restore of
a failed run, and bad input."""
from __future__ import annotations

import json
import os
import signal

import pytest

torch = pytest.importorskip("torch", reason="the train extra (torch==2.13.0) is not installed")

import ember  # noqa: E402
import ember as ray  # noqa: E402
from ember import train  # noqa: E402
from ember.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig  # noqa: E402
from ember.train.torch import TorchConfig, TorchTrainer  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=2, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def build_model():
    torch.manual_seed(0)  # same initial weights on every rank, as a real job would load them
    return torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))


def build_dataloader():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    idx = torch.arange(512, dtype=torch.float32).unsqueeze(1)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y, idx), batch_size=32, shuffle=True)


def seed_loop(config):
    """The article's train_func, with the stand-ins above; writes each rank's final weights and
    the sample indices it saw to config["out"] so the test can compare ranks."""
    ctx = train.get_context()
    rank = ctx.get_world_rank()
    model = ray.train.torch.prepare_model(build_model())
    dataloader = ray.train.torch.prepare_data_loader(build_dataloader())
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    start = 0
    ckpt = train.get_checkpoint()
    if ckpt is not None:
        state = ckpt.to_dict()
        model.load_state_dict(state["model_state_dict"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
    seen = 0.0
    for epoch in range(start, config.get("epochs", 10)):
        total, n = 0.0, 0
        for xb, yb, ib in dataloader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, n, seen = total + loss.item(), n + 1, seen + ib.sum().item()
        ray.train.report(
            metrics={"loss": total / n, "epoch": epoch, "start_epoch": start, "pid": os.getpid(),
                     "score": config.get("scores", {}).get(epoch, 0.0)},
            checkpoint=ray.train.Checkpoint.from_dict(
                {"model_state_dict": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}))
        if epoch == config.get("kill_rank_at") and rank == 1 and start == 0:
            with open(os.path.join(config["out"], "killed"), "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        if epoch >= config.get("raise_at", 99) and (config.get("always") or start == 0):
            raise ValueError(f"bad batch at epoch {epoch}")
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.save({"weights": flat, "seen": seen, "world": ctx.get_world_size(),
                "local_rank": ctx.get_local_rank(), "omp": os.environ.get("OMP_NUM_THREADS"),
                "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}, os.path.join(config["out"], f"rank{rank}.pt"))


def _trainer(tmp_path, name, **config):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return TorchTrainer(
        seed_loop, train_loop_config={"out": str(out), **config},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(name=name, storage_path=str(tmp_path / "results"),
                             failure_config=FailureConfig(max_failures=config.pop("max_failures", 0)),
                             checkpoint_config=config.pop("checkpoint_config", None)),
        torch_config=TorchConfig(timeout_s=120))


def _rows(path):
    with open(os.path.join(path, "result.json")) as f:
        return [json.loads(line) for line in f]


def test_seed_loop_ddp_on_two_cpu_workers(cluster, tmp_path):
    result = _trainer(tmp_path, "seed").fit()
    assert result.error is None and result.metrics["epoch"] == 9
    ranks = [torch.load(tmp_path / "out" / f"rank{r}.pt") for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2] and [r["local_rank"] for r in ranks] == [0, 1]
    assert ranks[0]["seen"] != ranks[1]["seen"]  # each rank read its own shard ...
    assert torch.equal(ranks[0]["weights"], ranks[1]["weights"])  # ... yet DDP kept them equal
    assert ranks[0]["omp"] == "1" and ranks[0]["ifname"] == "lo"
    losses = result.metrics_dataframe["loss"].tolist()
    assert len(losses) == 10 and losses[-1] < losses[0] / 5
    state = result.checkpoint.to_dict()
    assert state["epoch"] == 9 and set(state["model_state_dict"]) == {
        "module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias"}
    flat = torch.cat([v.flatten() for v in state["model_state_dict"].values()])
    assert torch.equal(flat, ranks[0]["weights"])
    assert result.path == str(tmp_path / "results" / "seed")
    assert sorted(os.listdir(result.path)) == sorted(
        [f"checkpoint_{i:06d}" for i in range(10)] + ["result.json", "trainer.pkl", "trainer_state.json"])
    assert not [n for n in os.listdir("/tmp") if n.startswith("checkpoint_tmp_")
                and os.stat(os.path.join("/tmp", n)).st_mtime > os.stat(result.path).st_mtime]


def test_killed_rank_resumes_from_epoch_5_checkpoint(cluster, tmp_path):
    result = _trainer(tmp_path, "killed", kill_rank_at=5, max_failures=1).fit()
    assert (tmp_path / "out" / "killed").exists()
    assert result.error is None and result.metrics["epoch"] == 9 and result.metrics["start_epoch"] == 6
    rows = _rows(result.path)
    assert [r["epoch"] for r in rows] == list(range(10))  # each epoch recorded once
    assert {r["start_epoch"] for r in rows[6:]} == {6} and rows[5]["pid"] != rows[6]["pid"]
    state = json.loads((tmp_path / "results" / "killed" / "trainer_state.json").read_text())
    assert state["failures"] == 1 and state["status"] == "FINISHED"
    ranks = [torch.load(tmp_path / "out" / f"rank{r}.pt") for r in (0, 1)]
    assert torch.equal(ranks[0]["weights"], ranks[1]["weights"])


def test_failures_past_max_failures_fail_the_run_with_the_cause(cluster, tmp_path):
    with pytest.raises(train.TrainingFailedError, match="bad batch at epoch 2") as info:
        _trainer(tmp_path, "fails", raise_at=1, always=True, epochs=4, max_failures=1).fit()
    result = info.value.result
    assert isinstance(result.error, train.WorkerGroupError)
    assert {type(e) for e in result.error.worker_failures.values()} == {ValueError}
    assert result.checkpoint is not None and result.checkpoint.to_dict()["epoch"] == 2
    assert [r["start_epoch"] for r in _rows(result.path)] == [0, 0, 2]
    state = json.loads((tmp_path / "results" / "fails" / "trainer_state.json").read_text())
    assert state["failures"] == 2 and state["status"] == "ERRORED"
    assert ember.get(ember.remote(lambda: 7).remote(), timeout=30) == 7  # cluster still works


def test_checkpoint_retention_keeps_the_best_and_the_latest(cluster, tmp_path):
    scores = {0: 3.0, 1: 1.0, 2: 4.0, 3: 1.5, 4: 5.0, 5: 0.0}
    cc = CheckpointConfig(num_to_keep=2, checkpoint_score_attribute="score", checkpoint_score_order="max")
    result = _trainer(tmp_path, "keep", epochs=6, scores=scores, checkpoint_config=cc).fit()
    kept = sorted(n for n in os.listdir(result.path) if n.startswith("checkpoint_"))
    assert kept == ["checkpoint_000002", "checkpoint_000004", "checkpoint_000005"]
    assert [m["score"] for _, m in result.best_checkpoints] == [4.0, 5.0, 0.0]
    assert result.get_best_checkpoint("score", "max").to_dict()["epoch"] == 4
    assert result.checkpoint.to_dict()["epoch"] == 5


def test_restore_a_failed_run(cluster, tmp_path):
    path = tmp_path / "results" / "interrupted"
    assert not TorchTrainer.can_restore(path)
    with pytest.raises(train.TrainingFailedError):
        _trainer(tmp_path, "interrupted", raise_at=3, epochs=6).fit()
    assert TorchTrainer.can_restore(path)
    result = TorchTrainer.restore(str(path)).fit()
    assert result.error is None and result.metrics["start_epoch"] == 4 and result.metrics["epoch"] == 5
    assert [r["epoch"] for r in _rows(path)] == list(range(6))
    assert len(result.metrics_dataframe) == 6


def test_bad_input_fails_clearly_and_the_cluster_keeps_working(cluster, tmp_path):
    with pytest.raises(TypeError, match="train_loop_per_worker must be a callable"):
        TorchTrainer("not a function")
    with pytest.raises(ValueError, match="0 or 1 argument"):
        TorchTrainer(lambda a, b: None)
    with pytest.raises(TypeError, match="scaling_config must be a ScalingConfig"):
        TorchTrainer(seed_loop, scaling_config={"num_workers": 2})
    with pytest.raises(ValueError, match="TorchConfig.backend"):
        TorchConfig(backend="carrier-pigeon")
    rc = RunConfig(storage_path=str(tmp_path))
    with pytest.raises(ValueError, match=r"TPU=1 \(largest node has 0\)"):
        TorchTrainer(seed_loop, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1, "TPU": 1}),
                     run_config=rc).fit()
    with pytest.raises(ValueError, match="can hold at most 2"):
        TorchTrainer(seed_loop, scaling_config=ScalingConfig(num_workers=3), run_config=rc).fit()
    with pytest.raises(ValueError, match="not a Train run directory"):
        TorchTrainer.restore(str(tmp_path))
    with pytest.raises(RuntimeError, match="inside a training function"):
        train.report({"loss": 1.0})
    assert ember.get(ember.remote(lambda: 7).remote(), timeout=30) == 7


def fsdp_loop(config):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule

    torch.manual_seed(0)
    model = train.torch.prepare_model(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)),
                                      parallel_strategy="fsdp")
    assert isinstance(model, FSDPModule)
    local = model[0].weight.to_local().shape[0]  # this rank's shard of the 8x4 weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(train.get_context().get_world_rank())
    for _step in range(3):
        loss = model(torch.randn(16, 4, generator=g)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    rank0 = train.get_context().get_world_rank() == 0
    train.report({"loss": loss.item(), "local_rows": local},
                 checkpoint=train.Checkpoint.from_dict({"model": full}) if rank0 else None)


def test_fsdp_shards_the_model_across_cpu_ranks(cluster, tmp_path):
    result = TorchTrainer(fsdp_loop, scaling_config=ScalingConfig(num_workers=2),
                          run_config=RunConfig(storage_path=str(tmp_path))).fit()
    assert result.metrics["local_rows"] == 4  # half of the 8 rows on each of 2 ranks
    state = result.checkpoint.to_dict()["model"]
    assert {k: tuple(v.shape) for k, v in state.items()} == {
        "0.weight": (8, 4), "0.bias": (8,), "1.weight": (1, 8), "1.bias": (1,)}


def gpu_loop(config):
    device = train.torch.get_device()
    model = train.torch.prepare_model(torch.nn.Linear(4, 1))
    loss = model(torch.ones(8, 4, device=device)).sum()
    loss.backward()
    import torch.distributed as dist

    train.report({"device": str(device), "param_device": str(next(model.parameters()).device),
                  "backend": dist.get_backend(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")})


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="NCCL/GPU path: torch sees no CUDA device on this machine (CI covers the CPU paths)")
def test_nccl_on_gpus(cluster, tmp_path):
    n = min(2, torch.cuda.device_count(), int(ember.cluster_resources().get("GPU", 0)))
    result = TorchTrainer(gpu_loop, scaling_config=ScalingConfig(num_workers=n, use_gpu=True,
                                                                 resources_per_worker={"CPU": 0, "GPU": 1}),
                          run_config=RunConfig(storage_path=str(tmp_path))).fit()
    m = result.metrics
    assert m["backend"] == "nccl" and m["device"].startswith("cuda:") and m["param_device"] == m["device"]
    assert len(m["visible"].split(",")) == n  # every GPU of the node's ranks, for peer-to-peer
