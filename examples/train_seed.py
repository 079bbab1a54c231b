"""The seed article's section 4.1 (Ray Train: distributed training) on Ember: the article's code
with `import ember as ray`, small real stand-ins for its placeholders (build_model,
build_dataloader, train_step) and 2 workers. The article asks for 4 workers with one GPU each;
this runs 2 CPU workers (gloo) unless the machine has 2 GPUs (then NCCL, one GPU per worker).

Checked at the end: the loss fell, both ranks hold identical weights (DDP synchronised the
gradients while each rank read its own half of the data), and `result.checkpoint.to_dict()`
returns the model state. Exit status 0 means all passed.

    .venv/bin/python examples/train_seed.py
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

import ember as ray
from ember.train import RunConfig, ScalingConfig
from ember.train.torch import TorchTrainer

OUT = tempfile.mkdtemp(prefix="train_seed_")


def check(cond: bool, what: str) -> None:
    """assert that also holds under `python -O`."""
    if not cond:
        raise AssertionError(what)


# --- stand-ins for the article's placeholders ----------------------------------------------

def build_model():
    import torch

    torch.manual_seed(0)  # every rank starts from the same weights, as when loading a model
    return torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def build_dataloader():
    import torch

    g = torch.Generator().manual_seed(42)
    x = torch.randn(2048, 8, generator=g)
    y = (x * torch.linspace(-1, 1, 8)).sum(dim=1, keepdim=True) + 0.1 * torch.randn(2048, 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)


_optimizers: dict[int, object] = {}


def train_step(model, batch):
    import torch

    opt = _optimizers.setdefault(id(model), torch.optim.SGD(model.parameters(), lr=0.05))
    x, y = batch
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


# --- the article's code (4.1) ----------------------------------------------------------------

def train_func():
    """每个 Worker 执行的训练逻辑"""
    import torch

    from ember.train import get_context
    model = build_model()
    # Ray 自动做 DDP 包装
    model = ray.train.torch.prepare_model(model)
    dataloader = build_dataloader()
    dataloader = ray.train.torch.prepare_data_loader(dataloader)
    for epoch in range(10):
        for batch in dataloader:
            loss = train_step(model, batch)
        # 报告指标 + 保存 checkpoint
        ray.train.report(
            metrics={"loss": loss.item(), "epoch": epoch},
            checkpoint=ray.train.Checkpoint.from_dict(
                {"model_state_dict": model.state_dict()}
            ),
        )
    # (not in the article) each rank writes its final weights, for the check below
    weights = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
    torch.save(weights, os.path.join(OUT, f"rank{get_context().get_world_rank()}.pt"))


def main() -> int:
    import torch

    ray.init(num_cpus=2)
    use_gpu = ray.cluster_resources().get("GPU", 0) >= 2
    trainer = TorchTrainer(
        train_func,
        scaling_config=ScalingConfig(
            num_workers=2,  # 2 个训练 Worker (the article: 4)
            use_gpu=use_gpu,  # the article: True, one GPU per worker
            resources_per_worker={"CPU": 1, "GPU": 1} if use_gpu else {"CPU": 1},
        ),
        run_config=RunConfig(storage_path=os.path.join(OUT, "results")),
    )
    result = trainer.fit()
    print(f"Best loss: {result.metrics['loss']}")

    losses = list(result.metrics_dataframe["loss"])
    check(losses[-1] < losses[0], f"loss did not fall: {losses}")
    w0, w1 = (torch.load(os.path.join(OUT, f"rank{r}.pt")) for r in (0, 1))
    check(torch.equal(w0, w1), "the ranks' weights differ after training (no gradient sync)")
    state = result.checkpoint.to_dict()["model_state_dict"]
    check(sorted(state) == ["module.0.bias", "module.0.weight", "module.2.bias", "module.2.weight"],
          f"unexpected checkpoint keys {sorted(state)}")
    check(torch.equal(torch.cat([v.flatten().cpu() for v in state.values()]), w0),
          "the checkpoint does not hold the final weights")
    print(f"4.1 Train: loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} epochs on 2 "
          f"{'GPU' if use_gpu else 'CPU'} workers, ranks identical, checkpoint at {result.checkpoint.path}: ok")
    ray.shutdown()
    shutil.rmtree(OUT, ignore_errors=True)  # the run's files (checkpoints, result.json) go with it
    return 0


if __name__ == "__main__":
    sys.exit(main())
