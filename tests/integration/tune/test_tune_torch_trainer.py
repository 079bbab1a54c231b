"""Tuner(TorchTrainer(...)): each trial runs a real TorchTrainer (DDP ranks as actors) with the
trial's train_loop_config; rank 0's reports reach Tune one by one as the trial's results, so
Tune's stop criteria and schedulers end a trainer trial early (and its workers go), and the
trainer's checkpoints become the trial's."""
from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the train extra (torch==2.13.0) is not installed")

import ember  # noqa: E402
from ember import train, tune  # noqa: E402
from ember.testing import wait_for  # noqa: E402
from ember.train import ScalingConfig  # noqa: E402
from ember.train.torch import TorchTrainer  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=4, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def loop(config):
    """Fits y = 3x with a linear layer under DDP; reports the loss each epoch with a checkpoint."""
    import torch

    from ember.train.torch import prepare_model

    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"])
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    y = 3 * x
    for epoch in range(config["epochs"]):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        train.report({"loss": loss.item(), "epoch": epoch},
                     checkpoint=train.Checkpoint.from_dict({"epoch": epoch}))


def _tuner(tmp_path, name, lrs, **rc):
    trainer = TorchTrainer(loop, train_loop_config={"epochs": 6, "lr": 0.0},
                           scaling_config=ScalingConfig(num_workers=2))
    return tune.Tuner(trainer, param_space={"train_loop_config": {"lr": tune.grid_search(lrs)}},
                      tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
                      run_config=tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0, **rc))


def test_each_trial_is_a_torch_trainer_with_its_config_and_every_report(cluster, tmp_path):
    results = _tuner(tmp_path, "grid", [0.01, 0.3]).fit()
    assert results.num_terminated == 2, results.errors
    best = results.get_best_result()
    assert best.config == {"train_loop_config": {"lr": 0.3}}
    # every rank-0 report arrived as its own Tune result, in order
    assert best.metrics_dataframe["epoch"].tolist() == list(range(6))
    assert best.metrics["training_iteration"] == 6
    losses = best.metrics_dataframe["loss"].tolist()
    assert losses[-1] < losses[0]
    assert best.checkpoint is not None and best.checkpoint.to_dict()["epoch"] == 5


def test_a_stop_criterion_ends_a_trainer_trial_after_that_report(cluster, tmp_path):
    results = _tuner(tmp_path, "stopped", [0.1], stop={"training_iteration": 2}).fit()
    assert results.num_errors == 0, results.errors
    (result,) = list(results)
    assert result.metrics_dataframe["epoch"].tolist() == [0, 1]  # not 6: Tune stopped the trainer
    assert result.checkpoint.to_dict()["epoch"] == 1
    # the stopped trainer's workers went with it: the whole cluster is free again
    wait_for(lambda: ember.available_resources().get("CPU", 0) == 4, timeout_s=30,
             what="the stopped trial's workers to release their CPUs")


def test_the_trainers_own_run_config_reaches_each_trials_run(cluster, tmp_path):
    """worker_runtime_env and the Train callbacks of the trainer's RunConfig hold in every trial."""
    seen = tmp_path / "seen.txt"

    class Seen(train.UserCallback):  # runs in the trial's process: it writes down what it saw
        def after_report(self, run_context, metrics, checkpoint):
            with open(seen, "a") as f:
                f.write(f"{metrics[0]['x']}\n")

    def env_loop(config):
        import os

        train.report({"x": os.environ.get("EMBER_TEST_TRIAL_ENV", "missing"), "loss": config["lr"]})

    trainer = TorchTrainer(env_loop, train_loop_config={"lr": 0.0}, scaling_config=ScalingConfig(num_workers=2),
                           run_config=train.RunConfig(worker_runtime_env={"env_vars": {"EMBER_TEST_TRIAL_ENV": "set"}},
                                                      callbacks=[Seen()]))
    results = tune.Tuner(trainer, param_space={"train_loop_config": {"lr": tune.grid_search([0.1, 0.2])}},
                         tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
                         run_config=tune.RunConfig(storage_path=str(tmp_path), name="env", verbose=0)).fit()
    assert results.num_terminated == 2, results.errors
    assert sorted(r.metrics["x"] for r in results) == ["set", "set"]
    assert seen.read_text().split() == ["set", "set"]
