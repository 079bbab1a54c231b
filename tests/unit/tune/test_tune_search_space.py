"""Search spaces and the variant generator, pure: sampling bounds, quantization, sample_from,
nested dicts, grid x num_samples expansion, points_to_evaluate, and clear errors for bad spaces."""
from __future__ import annotations

import numpy as np
import pytest

from ember import tune
from ember.tune.search import BasicVariantGenerator, SearchGenerator
from ember.tune.search.searcher import Searcher
from ember.tune.search.variant_generator import flatten_dict, grid_variants, resolve, unflatten_dict


def _draw(domain, n=400, seed=0):
    return domain.sample(size=n, random_state=np.random.default_rng(seed))


def test_float_domains_stay_in_bounds_and_quantize():
    assert all(-2 <= v < 3 for v in _draw(tune.uniform(-2, 3)))
    lv = _draw(tune.loguniform(1e-5, 1e-3))
    assert all(1e-5 <= v <= 1e-3 for v in lv)
    # log-uniform: about half the draws below the geometric midpoint 1e-4
    assert 0.4 < np.mean(np.array(lv) < 1e-4) < 0.6
    q = _draw(tune.quniform(0, 1, 0.25))
    assert set(q) <= {0.0, 0.25, 0.5, 0.75, 1.0}
    assert all(abs(v / 0.01 - round(v / 0.01)) < 1e-6 for v in _draw(tune.qloguniform(0.01, 1, 0.01)))
    n = np.array(_draw(tune.randn(5, 0.1)))
    assert abs(n.mean() - 5) < 0.05
    assert all(abs(v * 2 - round(v * 2)) < 1e-9 for v in _draw(tune.qrandn(0, 1, 0.5)))


def test_integer_domains_exclude_upper_like_ray():
    assert set(_draw(tune.randint(2, 8))) == {2, 3, 4, 5, 6, 7}
    assert set(_draw(tune.qrandint(0, 10, 5))) <= {0, 5, 10}
    lg = _draw(tune.lograndint(1, 1000))
    assert all(1 <= v < 1000 and isinstance(v, int) for v in lg)
    assert np.mean(np.array(lg) < 32) > 0.4  # log scale: small values are common
    assert set(_draw(tune.choice(["a", "b"]))) == {"a", "b"}


@pytest.mark.parametrize("make, message", [
    (lambda: tune.uniform(1, 0), "less than"),
    (lambda: tune.loguniform(0, 1), "> 0"),
    (lambda: tune.randint(3, 3), "less than"),
    (lambda: tune.randint(1.5, 3), "int"),
    (lambda: tune.choice([]), "non-empty"),
    (lambda: tune.choice("abc"), "list"),
    (lambda: tune.grid_search("abc"), "list"),
    (lambda: tune.quniform(0, 1, 0), "q"),
    (lambda: tune.randn(0, -1), "sd"),
    (lambda: tune.sample_from(3), "callable"),
])
def test_bad_domains_fail_with_a_clear_message(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_sample_from_sees_the_resolved_config_and_nested_dicts_resolve():
    space = {"a": tune.randint(1, 5), "nested": {"b": tune.choice([10, 20]), "c": 7},
             "double": tune.sample_from(lambda spec: spec.config["a"] * 2), "const": [1, tune.uniform(0, 1)]}
    cfg = resolve(space, np.random.default_rng(0))
    assert cfg["double"] == 2 * cfg["a"]
    assert cfg["nested"]["b"] in (10, 20) and cfg["nested"]["c"] == 7
    assert 0 <= cfg["const"][1] < 1 and cfg["const"][0] == 1


def test_grid_expansion_crosses_every_grid_with_num_samples():
    space = {"a": tune.grid_search([1, 2, 3]), "n": {"b": tune.grid_search(["x", "y"])}, "r": tune.uniform(0, 1)}
    assert len(list(grid_variants(space))) == 6
    gen = BasicVariantGenerator(random_state=1)
    gen.set_search_properties(None, None, space, num_samples=4)
    assert gen.total_samples == 24
    configs = []
    while (c := gen.next_config(f"t{len(configs)}")) is not None:
        configs.append(c)
    assert len(configs) == 24 and gen.is_finished()
    combos = [(c["a"], c["n"]["b"]) for c in configs]
    assert all(combos.count(k) == 4 for k in set(combos)) and len(set(combos)) == 6
    # samples outer, grid inner (as Ray): the first 6 configs are one full grid
    assert len(set(combos[:6])) == 6
    assert len({c["r"] for c in configs}) == 24


def test_constant_grid_search_reuses_random_values_within_a_sample():
    gen = BasicVariantGenerator(constant_grid_search=True, random_state=0)
    gen.set_search_properties(None, None, {"g": tune.grid_search([1, 2, 3]), "r": tune.uniform(0, 1)}, num_samples=2)
    configs = [gen.next_config(str(i)) for i in range(6)]
    assert len({c["r"] for c in configs[:3]}) == 1 and len({c["r"] for c in configs}) == 2


def test_points_to_evaluate_come_first_and_partial_points_are_completed():
    gen = BasicVariantGenerator(points_to_evaluate=[{"a": 0.5}, {"a": 0.25, "b": 3}], random_state=0)
    gen.set_search_properties(None, None, {"a": tune.uniform(0, 1), "b": tune.randint(0, 10)}, num_samples=1)
    first, second = gen.next_config("0"), gen.next_config("1")
    assert first["a"] == 0.5 and 0 <= first["b"] < 10
    assert second == {"a": 0.25, "b": 3}
    assert gen.next_config("2") is None  # num_samples raised to the number of points, no further


def test_random_state_makes_sampling_reproducible():
    def run(seed):
        gen = BasicVariantGenerator(random_state=seed)
        gen.set_search_properties(None, None, {"x": tune.uniform(0, 1)}, num_samples=3)
        return [gen.next_config(str(i))["x"] for i in range(3)]
    assert run(7) == run(7) != run(8)


def test_max_concurrent_limits_live_trials():
    gen = BasicVariantGenerator(max_concurrent=2)
    gen.set_search_properties(None, None, {"x": tune.uniform(0, 1)}, num_samples=5)
    assert gen.next_config("a") and gen.next_config("b")
    assert gen.next_config("c") is None and not gen.is_finished()
    gen.on_trial_complete("a", {})
    assert gen.next_config("c") is not None


@pytest.mark.parametrize("space, message", [
    ({"a": {"grid_search": [1], "extra": 2}}, "exactly"),
    ({"a": {"grid_search": "abc"}}, "non-empty list"),
    ({"a": {"grid_search": []}}, "non-empty list"),
    ([1, 2], "must be a dict"),
    ({1: tune.uniform(0, 1)}, "keys must be strings"),
])
def test_bad_param_spaces_fail_at_tuner_construction(space, message):
    with pytest.raises(ValueError, match=message):
        tune.Tuner(lambda config: None, param_space=space)


def test_searchers_reject_grid_search():
    class Fixed(Searcher):
        def suggest(self, trial_id):
            return {"x": 1}
    gen = SearchGenerator(Fixed(metric="m", mode="max"))
    with pytest.raises(ValueError, match="grid_search is only supported"):
        gen.set_search_properties("m", "max", {"g": tune.grid_search([1, 2])}, num_samples=2)


def test_flatten_roundtrip():
    d = {"a": {"b": 1, "c": {"d": 2}}, "e": 3}
    assert flatten_dict(d) == {"a/b": 1, "a/c/d": 2, "e": 3}
    assert unflatten_dict(flatten_dict(d)) == d
