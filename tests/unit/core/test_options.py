"""Validation of @remote / .options(...) arguments and the resource request they produce."""
from __future__ import annotations

import math

import pytest

from ember._private.api.options import ACTOR_OPTIONS, TASK_OPTIONS, resource_request, validate


def test_valid_task_options_pass():
    validate({"num_cpus": 2, "num_gpus": 0.5, "memory": 1024, "resources": {"accel": 1},
              "max_retries": 3, "num_returns": 2, "name": "f", "retry_exceptions": True},
             TASK_OPTIONS, "task")
    validate({}, TASK_OPTIONS, "task")


def test_valid_actor_options_pass():
    validate({"num_cpus": 1, "max_restarts": -1, "max_concurrency": 4, "lifetime": "detached",
              "namespace": "ns", "get_if_exists": True}, ACTOR_OPTIONS, "actor")


def test_unknown_option_rejected_with_its_name():
    with pytest.raises(ValueError, match="'num_cpu'") as ei:
        validate({"num_cpu": 1}, TASK_OPTIONS, "task")
    assert "task" in str(ei.value)
    assert "num_cpus" in str(ei.value)  # the valid names are listed


def test_actor_only_option_rejected_for_tasks():
    with pytest.raises(ValueError, match="'max_restarts'"):
        validate({"max_restarts": 1}, TASK_OPTIONS, "remote function")
    with pytest.raises(ValueError, match="'max_retries'"):
        validate({"max_retries": 1}, ACTOR_OPTIONS, "actor")


@pytest.mark.parametrize("name", ["num_cpus", "num_gpus", "memory"])
def test_negative_amounts_rejected(name):
    with pytest.raises(ValueError, match=name):
        validate({name: -1}, TASK_OPTIONS, "task")
    with pytest.raises(ValueError, match=name):
        validate({name: -0.5}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("name", ["num_cpus", "num_gpus", "memory"])
@pytest.mark.parametrize("value", ["1", True, [1], object()])
def test_non_numeric_amounts_rejected(name, value):
    with pytest.raises(TypeError, match=name):
        validate({name: value}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("name", ["num_cpus", "num_gpus", "memory"])
def test_none_and_zero_amounts_allowed(name):
    validate({name: None}, TASK_OPTIONS, "task")
    validate({name: 0}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("name,value", [("num_cpus", math.nan), ("num_gpus", math.inf),
                                        ("memory", math.inf)])
def test_non_finite_amounts_rejected_naming_the_option(name, value):
    # NaN compares False with everything, so `v < 0` lets it through; inf num_gpus hits int(inf).
    with pytest.raises(ValueError, match=name):
        validate({name: value}, TASK_OPTIONS, "task")


def test_fractional_gpus_above_one_rejected():
    with pytest.raises(ValueError, match="num_gpus"):
        validate({"num_gpus": 1.5}, TASK_OPTIONS, "task")
    validate({"num_gpus": 0.25}, TASK_OPTIONS, "task")
    validate({"num_gpus": 2.0}, TASK_OPTIONS, "task")
    validate({"num_gpus": 3}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("bad", [["accel"], "accel", 1, ("accel", 1)])
def test_resources_must_be_a_dict(bad):
    with pytest.raises(TypeError, match="resources"):
        validate({"resources": bad}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("bad", [-1, "1", None, True])
def test_resource_values_must_be_numbers_at_least_zero(bad):
    with pytest.raises(ValueError, match="'accel'"):
        validate({"resources": {"accel": bad}}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("name,hint", [("CPU", "num_cpus"), ("GPU", "num_gpus")])
def test_cpu_and_gpu_in_resources_rejected(name, hint):
    with pytest.raises(ValueError, match=hint) as ei:
        validate({"resources": {name: 1}}, TASK_OPTIONS, "task")
    assert name in str(ei.value)


@pytest.mark.parametrize("ok", [-1, 0, 1, 10])
def test_max_retries_valid(ok):
    validate({"max_retries": ok}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("bad,error", [(-2, ValueError), (1.5, TypeError), ("3", TypeError)])
def test_max_retries_invalid(bad, error):
    # As Ray: a wrong type is a TypeError, a count below -1 a ValueError.
    with pytest.raises(error, match="max_retries"):
        validate({"max_retries": bad}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("ok", [0, 1, 5, "streaming", "dynamic"])
def test_num_returns_valid(ok):
    validate({"num_returns": ok}, TASK_OPTIONS, "task")


@pytest.mark.parametrize("bad", [-1, 1.0, "many"])
def test_num_returns_invalid(bad):
    with pytest.raises(ValueError, match="num_returns"):
        validate({"num_returns": bad}, TASK_OPTIONS, "task")


def test_resource_request_defaults_to_default_cpus():
    assert resource_request({}, 1) == {"CPU": 1.0}
    assert resource_request({"num_cpus": None}, 1) == {"CPU": 1.0}
    # Actors default to 0 CPUs: no CPU entry at all.
    assert resource_request({}, 0) == {}


def test_resource_request_explicit_values():
    req = resource_request({"num_cpus": 2, "num_gpus": 0.5, "memory": 1000,
                            "resources": {"accel": 2, "unused": 0}}, 1)
    assert req == {"CPU": 2.0, "GPU": 0.5, "memory": 1000.0, "accel": 2.0}
    assert all(isinstance(v, float) for v in req.values())


def test_resource_request_zero_cpus_overrides_default():
    assert resource_request({"num_cpus": 0}, 1) == {}
    assert resource_request({"num_cpus": 0, "num_gpus": 1}, 1) == {"GPU": 1.0}


def test_resource_request_ignores_zero_gpus_and_memory():
    assert resource_request({"num_gpus": 0, "memory": 0, "resources": {}}, 1) == {"CPU": 1.0}
    assert resource_request({"resources": None}, 1) == {"CPU": 1.0}


@pytest.mark.parametrize("opts", [{"runtime_env": {"conda": "env.yml"}}, {"runtime_env": {"uv": ["x"]}}])
def test_known_but_unsupported_options_fail_clearly(opts):
    with pytest.raises(ValueError, match="not supported"):
        validate(opts, TASK_OPTIONS, "remote function f")


@pytest.mark.parametrize("opts, error, match", [
    ({"scheduling_strategy": "NODE_AFFINITY"}, ValueError, "must be 'DEFAULT', 'SPREAD'"),
    ({"placement_group": object()}, TypeError, "must be a PlacementGroup"),
    ({"placement_group_bundle_index": 1}, ValueError, "without a placement group"),
    ({"placement_group_bundle_index": "0"}, TypeError, "must be an int"),
])
def test_bad_scheduling_options_fail_naming_the_problem(opts, error, match):
    with pytest.raises(error, match=match):
        validate(opts, TASK_OPTIONS, "remote function f")


def test_default_values_of_unsupported_options_pass():
    validate({"scheduling_strategy": "SPREAD", "placement_group": None, "runtime_env": {}},
             TASK_OPTIONS, "remote function f")
