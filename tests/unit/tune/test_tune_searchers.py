"""Searchers as pure policies (no cluster): ConcurrencyLimiter, Repeater, and OptunaSearch over
the real optuna package (space conversion, ask/tell, failures, points_to_evaluate)."""
from __future__ import annotations

import optuna
import pytest

from ember import tune
from ember.tune.search import ConcurrencyLimiter, Repeater, Searcher, SearchGenerator
from ember.tune.search.optuna import OptunaSearch, convert_search_space


class Counting(Searcher):
    """A searcher that hands out {"n": 0}, {"n": 1}, ... and records what it was told."""

    def __init__(self, limit=100):
        super().__init__(metric="m", mode="max")
        self.n, self.limit, self.completed = 0, limit, []

    def suggest(self, trial_id):
        if self.n >= self.limit:
            return Searcher.FINISHED
        self.n += 1
        return {"n": self.n - 1}

    def on_trial_complete(self, trial_id, result=None, error=False):
        self.completed.append((trial_id, result, error))


def test_concurrency_limiter_caps_live_suggestions():
    inner = Counting()
    lim = ConcurrencyLimiter(inner, max_concurrent=2)
    assert lim.suggest("a") == {"n": 0} and lim.suggest("b") == {"n": 1}
    assert lim.suggest("c") is None
    lim.on_trial_complete("a", {"m": 1})
    assert lim.suggest("c") == {"n": 2}
    assert inner.completed == [("a", {"m": 1}, False)]
    with pytest.raises(ValueError, match="max_concurrent"):
        ConcurrencyLimiter(inner, max_concurrent=0)


def test_concurrency_limiter_batch_waits_for_the_whole_batch():
    inner = Counting()
    lim = ConcurrencyLimiter(inner, max_concurrent=2, batch=True)
    lim.suggest("a"), lim.suggest("b")
    lim.on_trial_complete("a", {"m": 1})
    assert lim.suggest("c") is None and inner.completed == []
    lim.on_trial_complete("b", {"m": 2})
    assert [c[0] for c in inner.completed] == ["a", "b"]
    assert lim.suggest("c") == {"n": 2}


def test_repeater_repeats_and_reports_the_mean():
    inner = Counting()
    rep = Repeater(inner, repeat=3)
    configs = [rep.suggest(t) for t in ("a", "b", "c", "d")]
    assert [c["n"] for c in configs] == [0, 0, 0, 1]
    assert [c["__trial_index__"] for c in configs] == [0, 1, 2, 0]
    for tid, m in (("a", 1.0), ("b", 2.0)):
        rep.on_trial_complete(tid, {"m": m})
    assert inner.completed == []
    rep.on_trial_complete("c", {"m": 6.0})
    assert inner.completed == [("a", {"m": 3.0}, False)]


def test_search_generator_stops_at_num_samples_or_finished():
    gen = SearchGenerator(Counting(limit=2))
    gen.set_search_properties("m", "max", {"const": 5}, num_samples=10)
    assert gen.next_config("a") == {"const": 5, "n": 0}
    gen.next_config("b")
    assert gen.next_config("c") is None and gen.is_finished()


def test_optuna_space_conversion():
    space = convert_search_space({"lr": tune.loguniform(1e-4, 1e-1), "n": tune.randint(2, 8),
                                  "q": tune.quniform(0, 1, 0.1), "act": tune.choice(["relu", "tanh"]),
                                  "nested": {"w": tune.uniform(0, 2)}, "const": 3})
    d = optuna.distributions
    assert space["lr"] == d.FloatDistribution(1e-4, 1e-1, log=True)
    assert space["n"] == d.IntDistribution(2, 7)  # Tune's upper bound is exclusive
    assert space["q"] == d.FloatDistribution(0, 1, step=0.1)
    assert space["act"] == d.CategoricalDistribution(["relu", "tanh"])
    assert space["nested/w"] == d.FloatDistribution(0, 2)
    assert "const" not in space
    with pytest.raises(ValueError, match="normal"):
        convert_search_space({"x": tune.randn()})
    with pytest.raises(ValueError, match="grid_search"):
        convert_search_space({"x": tune.grid_search([1, 2])})


def test_optuna_search_asks_and_tells_the_study():
    search = OptunaSearch(seed=3)
    search.set_search_properties("loss", "min", {"x": tune.uniform(-1, 1), "nested": {"k": tune.choice([1, 2])}})
    for i in range(6):
        cfg = search.suggest(str(i))
        assert -1 <= cfg["x"] <= 1 and cfg["nested"]["k"] in (1, 2)
        search.on_trial_result(str(i), {"loss": 1.0, "training_iteration": 1})
        search.on_trial_complete(str(i), None if i == 5 else {"loss": cfg["x"] ** 2}, error=i == 5)
    states = [t.state for t in search.study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 5
    assert states.count(optuna.trial.TrialState.FAIL) == 1
    assert search.study.direction == optuna.study.StudyDirection.MINIMIZE


def test_optuna_points_to_evaluate_come_first():
    search = OptunaSearch(space={"x": tune.uniform(0, 1)}, metric="m", mode="max",
                          points_to_evaluate=[{"x": 0.123}])
    assert search.suggest("a") == {"x": 0.123}


def test_optuna_define_by_run():
    def space(trial):
        trial.suggest_float("x", 0, 1)
        return {"fixed": 7}
    search = OptunaSearch(space=space, metric="m", mode="max")
    cfg = search.suggest("a")
    assert 0 <= cfg["x"] <= 1 and cfg["fixed"] == 7


def test_optuna_needs_a_metric_and_mode():
    search = OptunaSearch()
    with pytest.raises(RuntimeError, match="metric/mode"):
        search.suggest("a")
    with pytest.raises(ValueError, match="mode"):
        OptunaSearch(mode="best")


def test_bayesopt_search_climbs_toward_the_optimum_and_refuses_what_it_cannot_search():
    from ember.tune.search.bayesopt import BayesOptSearch

    s = BayesOptSearch(metric="y", mode="min", random_search_steps=3, random_state=0,
                       points_to_evaluate=[{"x": -2.0, "n": {"z": 0.0}}])
    s.set_search_properties(None, None, {"x": tune.uniform(-2, 2), "n": {"z": tune.uniform(0, 1)}})
    seen = []
    for i in range(12):
        c = s.suggest(f"t{i}")
        assert -2 <= c["x"] <= 2 and 0 <= c["n"]["z"] <= 1
        seen.append((c["x"] - 1) ** 2 + (c["n"]["z"] - 0.5) ** 2)
        s.on_trial_complete(f"t{i}", {"y": seen[-1]})
    assert seen[0] == 9.25  # the point to evaluate comes first
    assert min(seen[4:]) < min(seen[:4])  # the GP's suggestions beat the random start
    assert s.optimizer.max["target"] == -min(seen)  # mode "min": registered negated
    with pytest.raises(ValueError, match="only search uniform floats"):
        BayesOptSearch(metric="y", mode="max").set_search_properties(None, None, {"x": tune.choice([1, 2])})
    with pytest.raises(NotImplementedError, match="utility_kwargs"):
        BayesOptSearch(utility_kwargs={"kind": "ucb"})


def test_hyperopt_search_converts_the_space_and_learns_from_results():
    from ember.tune.search.hyperopt import HyperOptSearch

    s = HyperOptSearch(metric="y", mode="max", n_initial_points=4, random_state_seed=0)
    s.set_search_properties(None, None, {"x": tune.uniform(-2, 2), "c": tune.choice(["a", "b"]),
                                         "n": {"k": tune.randint(1, 4), "lr": tune.loguniform(1e-3, 1)}})
    seen = []
    for i in range(20):
        c = s.suggest(f"t{i}")
        assert -2 <= c["x"] <= 2 and c["c"] in ("a", "b") and c["n"]["k"] in (1, 2, 3)
        assert 1e-3 <= c["n"]["lr"] <= 1
        seen.append(-(c["x"] - 1) ** 2)
        s.on_trial_complete(f"t{i}", {"y": seen[-1]}, error=i == 5)
    assert max(seen[10:]) > max(seen[:4])  # TPE beats its random start
    with pytest.raises(ValueError, match="grid_search"):
        HyperOptSearch(metric="y", mode="max").set_search_properties(None, None, {"x": tune.grid_search([1, 2])})
    with pytest.raises(NotImplementedError, match="points_to_evaluate"):
        HyperOptSearch(points_to_evaluate=[{"x": 1}])
