"""Schedulers as pure policies (no cluster): ASHA rungs and promotion, HyperBand brackets and
halving, the median stopping rule, PBT's exploit/explore decisions, and bad arguments."""
from __future__ import annotations

import random

import pytest

from ember.train import Checkpoint
from ember.tune.experiment.trial import Trial
from ember.tune.schedulers import (
    ASHAScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialList,
    TrialScheduler,
    create_scheduler,
)
from ember.tune.schedulers.pbt import explore

C, P, S = TrialScheduler.CONTINUE, TrialScheduler.PAUSE, TrialScheduler.STOP


def _trials(n, **config):
    return [Trial(trial_id=f"t{i}", config=dict(config, i=i), status=Trial.RUNNING) for i in range(n)]


def _add(sched, trials):
    ctl = TrialList(trials)
    for t in trials:
        sched.on_trial_add(ctl, t)
    return ctl


def _res(sched, ctl, trial, t, value, metric="acc", time_attr="training_iteration"):
    result = {time_attr: t, metric: value}
    trial.update_last_result(result)
    return sched.on_trial_result(ctl, trial, result)


def test_asha_rungs_follow_grace_period_and_reduction_factor():
    sched = ASHAScheduler(metric="acc", mode="max", max_t=16, grace_period=1, reduction_factor=4)
    assert [m for m, _ in sched._brackets[0].rungs] == [16, 4, 1]
    three = ASHAScheduler(metric="acc", mode="max", max_t=100, grace_period=1, reduction_factor=4, brackets=3)
    assert [[m for m, _ in b.rungs] for b in three._brackets] == [[64, 16, 4, 1], [64, 16, 4], [64, 16]]


def test_asha_stops_trials_below_the_rung_quantile_and_promotes_the_rest():
    sched = ASHAScheduler(metric="acc", mode="max", max_t=16, grace_period=1, reduction_factor=4)
    a, b, c, d = trials = _trials(4)
    ctl = _add(sched, trials)
    assert _res(sched, ctl, a, 1, 1.0) == C  # first at the rung: nothing to compare with
    assert _res(sched, ctl, b, 1, 2.0) == C  # above the 75th percentile of {1}
    assert _res(sched, ctl, c, 1, 0.5) == S  # below the 75th percentile of {1, 2}
    assert _res(sched, ctl, d, 1, 3.0) == C
    assert _res(sched, ctl, a, 2, 0.0) == C  # between rungs nothing is judged
    assert _res(sched, ctl, d, 4, 5.0) == C
    assert _res(sched, ctl, b, 4, 4.0) == S  # rung 4: below d's 5
    assert _res(sched, ctl, d, 16, 9.0) == S  # max_t reached: stop_last_trials


def test_asha_mode_min_flips_the_comparison():
    sched = ASHAScheduler(metric="loss", mode="min", max_t=16, grace_period=1, reduction_factor=2)
    a, b = trials = _trials(2)
    ctl = _add(sched, trials)
    assert _res(sched, ctl, a, 1, 0.1, metric="loss") == C
    assert _res(sched, ctl, b, 1, 0.9, metric="loss") == S
    c, = _trials(1)
    c.trial_id = "t9"
    sched.on_trial_add(ctl, c)
    assert _res(sched, ctl, c, 1, 0.01, metric="loss") == C


def test_asha_brackets_spread_trials():
    sched = ASHAScheduler(metric="acc", mode="max", max_t=64, grace_period=1, reduction_factor=4, brackets=3)
    sched._rng.bit_generator.state = __import__("numpy").random.default_rng(0).bit_generator.state
    trials = [Trial(trial_id=f"t{i}", config={}) for i in range(300)]
    _add(sched, trials)
    used = {id(b) for b in sched._trial_info.values()}
    assert len(used) == 3


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_t=0), "max_t"), (dict(grace_period=0), "grace_period"), (dict(reduction_factor=1), "reduction_factor"),
    (dict(brackets=0), "brackets"), (dict(grace_period=10, max_t=5), "grace_period"), (dict(mode="up"), "mode"),
])
def test_asha_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ASHAScheduler(**kwargs)


def test_scheduler_metric_conflicts_with_tune_config():
    sched = ASHAScheduler(metric="acc", mode="max")
    with pytest.raises(ValueError, match="set it in one place"):
        sched.set_search_properties("loss", "max")
    with pytest.raises(ValueError, match="mode"):
        ASHAScheduler().set_search_properties("loss", "best")
    with pytest.raises(ValueError, match="unknown scheduler"):
        create_scheduler("nope")


def test_hyperband_fills_brackets_and_halves_synchronously():
    sched = HyperBandScheduler(metric="acc", mode="max", max_t=9, reduction_factor=3)
    trials = _trials(10)
    ctl = _add(sched, trials)
    first, second = sched._brackets
    assert (first.n0, first.milestone, len(first.trials)) == (9, 1, 9)
    assert (second.n0, second.milestone) == (5, 3)
    # the first 8 trials of bracket 1 reach the milestone and wait (paused)
    for i, t in enumerate(trials[:8]):
        assert _res(sched, ctl, t, 1, float(i)) == P
        t.status = Trial.PAUSED
    assert sched.choose_trial_to_run(ctl) is None  # all waiting, none pending
    # the last one completes the rung: the best 3 (scores 6, 7, 8) continue, the others stop
    assert _res(sched, ctl, trials[8], 1, 8.0) == C
    assert sorted(t.trial_id for t in trials[:9] if t.status == Trial.TERMINATED) == [f"t{i}" for i in range(6)]
    assert first.milestone == 3
    resumable = sched.choose_trial_to_run(ctl)
    assert resumable.trial_id in ("t6", "t7")


def test_median_stopping_rule_stops_below_the_median_of_running_averages():
    sched = MedianStoppingRule(time_attr="training_iteration", metric="acc", mode="max", grace_period=2,
                               min_samples_required=2)
    a, b, c = trials = _trials(3)
    ctl = _add(sched, trials)
    for t in (1, 2, 3):
        assert _res(sched, ctl, a, t, 10.0) == C
        assert _res(sched, ctl, b, t, 8.0) == C
    assert _res(sched, ctl, c, 1, 1.0) == C  # grace period
    assert _res(sched, ctl, c, 2, 2.0) == S  # best 2 < median(10, 8)
    soft = MedianStoppingRule(time_attr="training_iteration", metric="acc", mode="max", grace_period=0,
                              min_samples_required=1, hard_stop=False)
    x, y = two = _trials(2)
    ctl2 = _add(soft, two)
    assert _res(soft, ctl2, x, 1, 5.0) == C
    assert _res(soft, ctl2, y, 1, 1.0) == P


def _pbt(**kw):
    sched = PopulationBasedTraining(time_attr="training_iteration", metric="score", mode="max",
                                    perturbation_interval=2, **kw)
    sched._rng = random.Random(0)
    return sched


def test_pbt_bottom_trial_exploits_a_top_trial_checkpoint_and_explores_its_config():
    sched = _pbt(hyperparam_mutations={"lr": [0.001, 0.01, 0.1, 1.0]}, resample_probability=0.0)
    trials = [Trial(trial_id=f"t{i}", config={"lr": lr}, status=Trial.RUNNING)
              for i, lr in enumerate([0.001, 0.01, 0.1, 1.0])]
    for i, t in enumerate(trials):
        t.checkpoint = Checkpoint(f"/tmp/pbt-ckpt-{i}")
    ctl = _add(sched, trials)
    assert _res(sched, ctl, trials[0], 1, 0.0, metric="score") == C  # before the interval
    for t, score in zip(trials[1:], [5.0, 7.0, 9.0], strict=False):
        assert _res(sched, ctl, t, 2, score, metric="score") == C
    decision = _res(sched, ctl, trials[0], 2, 1.0, metric="score")
    assert decision == P
    worst = trials[0]
    assert worst.restore_checkpoint == trials[3].checkpoint  # the top quartile: the 1.0 trial
    assert worst.config["lr"] in (0.1, 1.0)  # the source's lr or a neighbour (clamped at the end)
    assert sched.exploits == [("t0", "t3")]
    # the best trial never exploits
    assert _res(sched, ctl, trials[3], 4, 10.0, metric="score") == C


def test_pbt_does_not_exploit_without_a_source_checkpoint():
    sched = _pbt(hyperparam_mutations={"lr": [0.1, 0.2]})
    trials = _trials(4, lr=0.1)
    ctl = _add(sched, trials)
    for t, score in zip(trials, [1.0, 2.0, 3.0, 4.0], strict=False):
        _res(sched, ctl, t, 2, score, metric="score")
    assert all(t.restore_checkpoint is None for t in trials)


def test_pbt_explore_perturbs_and_resamples():
    rng = random.Random(1)
    new = explore({"lr": 1.0, "bs": 32, "keep": "x"}, {"lr": lambda: 42.0, "bs": [16, 32, 64]}, 0.0, (1.2, 0.8), None, rng)
    assert new["lr"] in (1.2, 0.8) and new["bs"] in (16, 64) and new["keep"] == "x"
    always = explore({"lr": 1.0}, {"lr": lambda: 42.0}, 1.0, (1.2, 0.8), None, rng)
    assert always["lr"] == 42.0
    custom = explore({"lr": 1.0}, {}, 0.0, (2.0,), lambda c: {**c, "extra": 1}, rng)
    assert custom == {"lr": 1.0, "extra": 1}


def test_pbt_bad_arguments():
    with pytest.raises(ValueError, match="hyperparam_mutations"):
        PopulationBasedTraining()
    with pytest.raises(ValueError, match="must be a list"):
        PopulationBasedTraining(hyperparam_mutations={"lr": 3})
    with pytest.raises(ValueError, match="quantile_fraction"):
        PopulationBasedTraining(hyperparam_mutations={"lr": [1]}, quantile_fraction=0.9)
    sched = _pbt(hyperparam_mutations={"lr": [1]})
    t, = _trials(1)
    with pytest.raises(ValueError, match="needs"):
        sched.on_trial_result(TrialList([t]), t, {"training_iteration": 1})


def test_fifo_runs_pending_then_paused():
    a, b = _trials(2)
    a.status, b.status = Trial.PAUSED, Trial.PENDING
    assert FIFOScheduler().choose_trial_to_run(TrialList([a, b])) is b
    b.status = Trial.TERMINATED
    assert FIFOScheduler().choose_trial_to_run(TrialList([a, b])) is a
