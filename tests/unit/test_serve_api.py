"""Declaring deployments: options are validated at the call site; no cluster needed."""
from __future__ import annotations

import pytest

from ember import serve
from ember.serve.config import build_config


def test_deployment_options_and_bind():
    @serve.deployment(num_replicas=2, ray_actor_options={"num_gpus": 1}, max_ongoing_requests=32)
    class M:
        pass

    assert M.name == "M" and M.num_replicas == 2 and M.max_ongoing_requests == 32
    assert M.ray_actor_options == {"num_gpus": 1}
    m2 = M.options(name="M2", num_replicas=3)
    assert (m2.name, m2.num_replicas, m2.max_ongoing_requests) == ("M2", 3, 32)
    app = M.bind(1, k=2)
    assert isinstance(app, serve.Application) and app.args == (1,) and app.kwargs == {"k": 2}
    with pytest.raises(RuntimeError, match="bind"):
        M()


def test_plain_decorator_and_functions():
    @serve.deployment
    def f(request):
        return "x"

    assert f.name == "f" and f.num_replicas == 1


@pytest.mark.parametrize("opts,err", [
    ({"num_replicas": -1}, "num_replicas"),
    ({"max_ongoing_requests": 0}, "max_ongoing_requests"),
    ({"max_queued_requests": -2}, "max_queued_requests"),
    ({"ray_actor_options": {"num_gpu": 1}}, "num_gpu"),
    ({"num_replica": 1}, "num_replica"),
    ({"num_replicas": 2, "autoscaling_config": {"max_replicas": 2}}, "cannot both"),
    ({"health_check_period_s": -1}, "health_check_period_s"),
])
def test_bad_options_name_the_problem(opts, err):
    with pytest.raises((ValueError, TypeError), match=err):
        serve.deployment(**opts)(type("X", (), {}))


def test_autoscaling_replaces_num_replicas():
    c = build_config({"autoscaling_config": {"min_replicas": 0, "max_replicas": 4, "initial_replicas": 2}})
    assert c.num_replicas is None and c.initial_target() == 2
    c2 = build_config({"num_replicas": 3}, c)
    assert c2.autoscaling_config is None and c2.initial_target() == 3


def test_batch_validates():
    with pytest.raises(TypeError, match="async"):
        serve.batch(lambda xs: xs)
    with pytest.raises(ValueError, match="max_batch_size"):
        serve.batch(max_batch_size=0)


def test_run_rejects_non_applications():
    with pytest.raises(TypeError, match="bind"):
        serve.run(42)  # type: ignore[arg-type]
