"""The one parse/validate of resources (ember_common.resources) and the entry points that use it:
a negative, NaN, infinite, non-numeric or wrongly shaped value is refused with a message naming
the resource and where it came from."""
from __future__ import annotations

import argparse
import math

import pytest

from ember_common import resources
from ember_common.resources import InvalidResourceError, ResourceTypeError


@pytest.mark.parametrize("value", [-1, -0.5, math.nan, math.inf, -math.inf])
def test_bad_amounts_are_refused_naming_the_resource(value):
    with pytest.raises(InvalidResourceError, match="'accel'"):
        resources.validate({"accel": value})


@pytest.mark.parametrize("value", ["1", None, True, [1], {"x": 1}])
def test_non_numbers_are_type_errors_and_value_errors(value):
    with pytest.raises(ResourceTypeError, match="'accel'") as ei:
        resources.validate({"accel": value})
    assert isinstance(ei.value, TypeError) and isinstance(ei.value, ValueError)


@pytest.mark.parametrize("bad", [["CPU"], "CPU", 1, None])
def test_a_resource_dict_must_be_a_dict(bad):
    with pytest.raises(ResourceTypeError, match="--resources"):
        resources.validate(bad, source="--resources")


@pytest.mark.parametrize("name", ["", 3, None])
def test_resource_names_must_be_non_empty_strings(name):
    with pytest.raises(InvalidResourceError, match="names"):
        resources.validate({name: 1})


def test_gpus_above_one_must_be_whole():
    assert resources.validate({"GPU": 0.5}) == {"GPU": 0.5}
    assert resources.validate({"GPU": 4}) == {"GPU": 4.0}
    with pytest.raises(InvalidResourceError, match="whole number"):
        resources.validate({"GPU": 1.5})


def test_reserved_names_point_to_the_right_option():
    with pytest.raises(InvalidResourceError, match="use num_cpus/num_gpus instead") as ei:
        resources.validate({"CPU": 1}, reserved=("CPU", "GPU"), reserved_hint="num_cpus/num_gpus")
    assert "CPU" in str(ei.value)


def test_valid_dicts_come_back_as_floats():
    assert resources.validate({"CPU": 2, "memory": 1e9, "accel": 0}) == {
        "CPU": 2.0, "memory": 1e9, "accel": 0.0}


@pytest.mark.parametrize("raw,match", [('{"CPU": 2,', "--resources is not valid JSON"),
                                       ('["CPU"]', "JSON object of numbers"),
                                       ('{"x": "2"}', "'x'"), ('{"x": -2}', "'x'"),
                                       ('{"x": NaN}', "'x'")])
def test_parse_json_refuses_bad_text(raw, match):
    with pytest.raises(InvalidResourceError, match=match):
        resources.parse_json(raw, source="--resources")


def test_every_entry_point_uses_the_one_check():
    """ember start's flags, init()'s arguments, task options, the raylet's flag and requests."""
    from ember._private import worker
    from ember._private.api.options import TASK_OPTIONS, validate
    from ember._tools.cli import start_stop
    from ember_raylet.resources import NodeResources, validate_request
    from ember_raylet.server import parse_resources

    ns = argparse.Namespace(num_cpus=1, num_gpus=None, memory=1, resources='{"accel": NaN}')
    with pytest.raises(start_stop.UsageError, match="'accel'.*finite"):
        start_stop._resources(ns)
    with pytest.raises(ValueError, match="'accel'.*finite"):
        worker._default_resources(1, 0, {"accel": math.nan}, 1)
    with pytest.raises(ValueError, match="use num_cpus/num_gpus"):
        worker._default_resources(1, 0, {"GPU": 1}, 1)
    with pytest.raises(ValueError, match="'accel'.*finite"):
        validate({"resources": {"accel": math.nan}}, TASK_OPTIONS, "task")
    with pytest.raises(ValueError, match="'accel'.*finite"):
        parse_resources('{"accel": NaN}')
    with pytest.raises(ValueError, match="'accel'.*finite"):
        validate_request({"accel": math.nan})
    with pytest.raises(ValueError, match="'CPU'.*>= 0"):
        NodeResources({"CPU": -1})
