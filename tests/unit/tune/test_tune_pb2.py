"""PB2's pure parts: the GP bandit picks the hyperparameters whose observed improvement is best,
draws uniformly before it has data, fills missing hyperparameters from the bounds, and bad bounds
are refused naming the key."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("sklearn", reason="PB2 needs scikit-learn")

from ember.tune.schedulers import PB2, create_scheduler  # noqa: E402
from ember.tune.schedulers.pb2 import _flat_bounds, select_config  # noqa: E402


def test_the_bandit_moves_to_where_improvement_was_observed():
    rng = random.Random(0)
    bounds = _flat_bounds({"lr": [0.0, 1.0]})
    # improvement per step peaks at lr = 0.3 (noise-free), observed over a few periods
    rows = [(t, [lr], -((lr - 0.3) ** 2)) for t in (4.0, 8.0, 12.0) for lr in (0.0, 0.1, 0.25, 0.5, 0.7, 0.9, 1.0)]
    picks = [select_config(rows, bounds, 16.0, random.Random(s))[0] for s in range(5)]
    assert all(0.15 <= p <= 0.45 for p in picks), picks
    assert all(0.0 <= v <= 1.0 for v in select_config(rows[:1], bounds, 4.0, rng))  # no model yet: uniform


def test_nested_bounds_flatten_and_bad_ones_are_named():
    assert _flat_bounds({"opt": {"lr": [1e-4, 1e-1]}, "m": (0, 1)}) == [(("opt", "lr"), 1e-4, 1e-1), (("m",), 0.0, 1.0)]
    for bad in ({"lr": [1, 1]}, {"lr": [0.1]}, {"lr": "0..1"}, {"lr": [True, 2]}):
        with pytest.raises(ValueError, match="hyperparam_bounds\\['lr'\\] must be \\[low, high\\]"):
            PB2(metric="m", mode="max", hyperparam_bounds=bad)
    with pytest.raises(ValueError, match="PB2 needs hyperparam_bounds"):
        PB2(metric="m", mode="max")
    assert isinstance(create_scheduler("pb2", hyperparam_bounds={"lr": [0, 1]}), PB2)


def test_missing_hyperparameters_are_drawn_from_the_bounds():
    class FakeTrial:
        trial_id = "t0"
        config = {"lr": 0.5}

        def set_config(self, c):
            self.config = c

    pb2 = PB2(metric="m", mode="max", hyperparam_bounds={"lr": [0, 1], "opt": {"wd": [0.0, 0.1]}})
    t = FakeTrial()
    pb2.on_trial_add(None, t)
    assert t.config["lr"] == 0.5 and 0.0 <= t.config["opt"]["wd"] <= 0.1
