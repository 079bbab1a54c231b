"""PopulationBasedTraining on a real run: a trial whose own learning rate is hopeless ends far
beyond what it could reach alone, which only happens if it really copied a better trial's
weights (its checkpoint) and kept training from them."""
from __future__ import annotations

import os
import time

import pytest

import ember
from ember import tune
from ember.tune.schedulers import PopulationBasedTraining

LRS = [0.001, 0.01, 0.1, 1.0]
STEPS = 20


@pytest.fixture(scope="module")
def cluster():
    ember.init(num_cpus=4, object_store_memory=128 * 2**20)
    yield
    ember.shutdown()


def _train_weights(barrier):
    """A trainable whose weight grows by its learning rate per step, checkpointed every step;
    the trials start together (actors may come up seconds apart on a loaded machine), so the
    population is compared at the same steps."""

    def train_weights(config):
        (barrier / tune.get_context().get_trial_id()).touch()
        deadline = time.monotonic() + 120
        while len(os.listdir(barrier)) < len(LRS) and time.monotonic() < deadline:
            time.sleep(0.05)
        ckpt = tune.get_checkpoint()
        state = ckpt.to_dict() if ckpt else {"w": 0.0, "step": 0}
        w, step = state["w"], state["step"]
        while step < STEPS:
            step += 1
            w += config["lr"]  # "training": the weight grows by the learning rate per step
            time.sleep(0.05)
            tune.report({"score": w, "lr": config["lr"]},
                        checkpoint=tune.Checkpoint.from_dict({"w": w, "step": step}))

    return train_weights


def test_pbt_copies_a_better_trials_weights(cluster, tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    train_weights = _train_weights(barrier)

    # No resampling: explore moves the donor's lr one step along LRS, so the slow trial's new lr
    # (from a donor at 0.1 or 1.0) is at least 0.01; a resample could draw 0.001 again.
    pbt = PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=4,
                                  hyperparam_mutations={"lr": LRS}, quantile_fraction=0.25,
                                  resample_probability=0.0)
    results = tune.Tuner(
        train_weights, param_space={"lr": tune.grid_search(LRS)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pbt),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="pbt", verbose=0)).fit()
    assert results.num_errors == 0 and len(results) == 4
    assert pbt.exploits, "PBT never exploited"
    exploited = {t for t, _ in pbt.exploits}
    slow = results[0]  # the trial that started with lr=0.001: alone it reaches 20 * 0.001 = 0.02
    assert slow.path.endswith(next(t for t in exploited if t.endswith("_00000")))
    assert slow.metrics["score"] > 10 * STEPS * LRS[0], slow.metrics_dataframe[["training_iteration", "score", "lr"]]
    assert slow.metrics["training_iteration"] == STEPS
    # after the exploit the trial's config came from a better trial (explored around its lr)
    assert slow.config["lr"] >= 0.01
    # its history jumps: a step where the score rose by more than its own lr could ever add
    scores = slow.metrics_dataframe["score"].tolist()
    assert max(b - a for a, b in zip(scores, scores[1:], strict=False)) > 0.05


def test_pb2_copies_a_better_trial_and_picks_its_lr_within_the_bounds(cluster, tmp_path):
    pytest.importorskip("sklearn", reason="PB2 needs scikit-learn")
    from ember.tune.schedulers import PB2

    barrier = tmp_path / "barrier"
    barrier.mkdir()
    train_weights = _train_weights(barrier)

    pb2 = PB2(time_attr="training_iteration", perturbation_interval=4, quantile_fraction=0.25,
              hyperparam_bounds={"lr": [0.001, 1.0]})
    results = tune.Tuner(
        train_weights, param_space={"lr": tune.grid_search(LRS)},
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=pb2),
        run_config=tune.RunConfig(storage_path=str(tmp_path), name="pb2", verbose=0)).fit()
    assert results.num_errors == 0 and len(results) == 4
    assert pb2.exploits, "PB2 never exploited"
    slow = results[0]  # started with lr=0.001: alone it reaches 0.02
    assert slow.metrics["score"] > 10 * STEPS * LRS[0] and slow.metrics["training_iteration"] == STEPS
    lrs = set(slow.metrics_dataframe["lr"].tolist())
    assert len(lrs) > 1 and all(0.001 <= lr <= 1.0 for lr in lrs), lrs  # re-picked, within the bounds
