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
    assert M.ray_actor_options == {"num_gpus": 1, "num_cpus": 1}  # Ray's default: one CPU per replica
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


@pytest.mark.parametrize("opts,err", [
    ({"logging_config": {"log_level": "DEBUG"}}, "logging_config"),
])
def test_unimplemented_deployment_options_are_refused_not_dropped(opts, err):
    with pytest.raises(ValueError, match=err):
        serve.deployment(**opts)(type("X", (), {}))
    with pytest.raises(ValueError, match=err):
        serve.deployment(type("Y", (), {})).options(**opts)


def test_deployment_init_args_are_the_bound_arguments():
    @serve.deployment
    class M:
        def __init__(self, a, k=None):
            pass

    assert M.init_args == () and M.init_kwargs == {}
    app = M.bind(1, k=2)
    assert app.deployment.init_args == (1,) and app.deployment.init_kwargs == {"k": 2}
    assert app.deployment.options(num_replicas=2).init_args == (1,)
    assert M.init_args == ()  # binding does not change the unbound deployment


@pytest.mark.parametrize("call,word", [
    (lambda app: serve.run(app, logging_config={"log_level": "DEBUG"}), "logging_config"),
    (lambda app: serve.run(app, _local_testing_mode=True), "_local_testing_mode"),
    (lambda app: serve.run(app, external_scaler_enabled=True), "external_scaler_enabled"),
    (lambda app: serve.start(grpc_options={"port": 9000}), "grpc_options"),
    (lambda app: serve.start(logging_config={"log_level": "DEBUG"}), "logging_config"),
    (lambda app: serve.start(detached=False), "detached"),
    (lambda app: serve.run(app, controller_options={"x": 1}), "controller_options"),
    (lambda app: serve.start(tracing_config={"exporter_import_path": "m:f"}), "tracing_config"),
    (lambda app: serve.start(controller_options={"x": 1}), "controller_options"),
    (lambda app: serve.start(proxy_location="Somewhere"), "proxy_location"),
])
def test_run_and_start_refuse_rays_unimplemented_parameters(call, word):
    """Checked before anything starts: no cluster is needed (none is started)."""
    import ember

    @serve.deployment
    def f():
        return 1

    with pytest.raises(ValueError, match=word):
        call(f.bind())
    assert not ember.is_initialized()


def test_run_start_and_handle_options_reject_unknown_keywords():
    @serve.deployment
    def f():
        return 1

    with pytest.raises(TypeError, match="bogus"):
        serve.run(f.bind(), bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        serve.start(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        serve.DeploymentHandle("f").options(bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        serve.batch(bogus=1)  # type: ignore[call-arg]
    h = serve.DeploymentHandle("f", "app").options(method_name="g", stream=True, use_new_handle_api=True)
    assert (h.deployment_name, h.app_name, h._method, h._stream) == ("f", "app", "g", True)


def test_handle_options_keep_the_multiplexed_model_id():
    import pickle

    h = serve.DeploymentHandle("f", "app").options(multiplexed_model_id="m1")
    assert h._model_id == "m1"
    assert h.other._model_id == "m1"  # a method of the handle keeps it
    assert h.options(stream=True)._model_id == "m1"
    assert h.options(multiplexed_model_id="m2")._model_id == "m2"
    assert pickle.loads(pickle.dumps(h))._model_id == "m1"  # passed to a replica, it keeps it
    assert serve.DeploymentHandle("f")._model_id == ""
    with pytest.raises(TypeError, match="multiplexed_model_id must be a string"):
        serve.DeploymentHandle("f").options(multiplexed_model_id=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("opts,word", [
    ({"use_new_handle_api": False}, "use_new_handle_api"),
    ({"_prefer_local_routing": True}, "_prefer_local_routing"),
    ({"_by_reference": False}, "_by_reference"),
    ({"request_serialization": "pickle"}, "request_serialization"),
    ({"response_serialization": "pickle"}, "response_serialization"),
])
def test_handle_options_refuse_rays_unimplemented_parameters(opts, word):
    with pytest.raises(ValueError, match=word):
        serve.DeploymentHandle("f").options(**opts)


def test_batch_validates_its_new_parameters():
    with pytest.raises(ValueError, match="max_concurrent_batches"):
        serve.batch(max_concurrent_batches=0)
    with pytest.raises(TypeError, match="batch_size_fn"):
        serve.batch(batch_size_fn=3)  # type: ignore[arg-type]


def test_batch_runs_up_to_max_concurrent_batches_at_once():
    import asyncio

    def make(**opts):
        stats = {"running": 0, "peak": 0, "sizes": []}

        @serve.batch(max_batch_size=2, batch_wait_timeout_s=0.05, **opts)
        async def handle(xs):
            stats["running"] += 1
            stats["peak"] = max(stats["peak"], stats["running"])
            stats["sizes"].append(len(xs))
            await asyncio.sleep(0.3)
            stats["running"] -= 1
            return [x * 10 for x in xs]

        async def main():
            return await asyncio.gather(*(handle(i) for i in range(6)))

        assert asyncio.run(main()) == [0, 10, 20, 30, 40, 50]
        return stats

    assert make() == {"running": 0, "peak": 1, "sizes": [2, 2, 2]}  # one batch at a time by default
    assert make(max_concurrent_batches=3) == {"running": 0, "peak": 3, "sizes": [2, 2, 2]}


def test_batch_size_fn_measures_batches():
    import asyncio

    batches = []

    class M:
        @serve.batch(max_batch_size=5, batch_wait_timeout_s=0.2, batch_size_fn=lambda xs: sum(map(len, xs)))
        async def handle(self, xs):
            batches.append(list(xs))
            return [len(x) for x in xs]

    async def main():
        m = M()
        return await asyncio.gather(*(m.handle(s) for s in ["aa", "bbb", "c", "dddd", "eeeeee", "f"]))

    assert asyncio.run(main()) == [2, 3, 1, 4, 6, 1]
    # Filled to 5 "characters" at most; the 6-long one runs alone; order is kept.
    assert batches == [["aa", "bbb"], ["c", "dddd"], ["eeeeee"], ["f"]]


def test_placement_group_refuses_rays_topology_strategy():
    from ember.util import placement_group

    with pytest.raises(ValueError, match="topology_strategy"):
        placement_group([{"CPU": 1}], topology_strategy={"zone": "a"})
