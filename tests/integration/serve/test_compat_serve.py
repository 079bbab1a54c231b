"""Serve behaviours as Ray 2.60 has them, run on a real cluster with HTTP on loopback: one
deployment bound twice in an app, an HTTP callable that takes no request, an async constructor,
and handles cached per process."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from ember import serve


@pytest.fixture(scope="module")
def url(serve_url):
    return serve_url


@serve.deployment(ray_actor_options={"num_cpus": 0.5})  # three replicas on the 2-CPU cluster
class Adder:
    def __init__(self, n):
        self.n = n

    def __call__(self, x):
        return x + self.n


@serve.deployment
class Sum:
    def __init__(self, first, second):
        self.first, self.second = first, second

    async def __call__(self, request):
        return {"total": (await self.first.remote(1)) + (await self.second.remote(1))}


def test_one_deployment_bound_twice_gets_a_suffixed_name(url):
    serve.run(Sum.bind(Adder.bind(1), Adder.bind(10)), name="twice", route_prefix="/twice")
    assert httpx.get(url + "/twice", timeout=30).json() == {"total": 13}
    assert set(serve.status().applications["twice"].deployments) == {"Sum", "Adder", "Adder_1"}
    serve.delete("twice")


@serve.deployment
class NoRequest:
    def __call__(self):
        return "no request needed"


@serve.deployment
def no_request_fn():
    return "function without a request"


def test_an_http_callable_without_parameters_is_called_without_the_request(url):
    serve.run(NoRequest.bind(), name="noreq", route_prefix="/noreq")
    serve.run(no_request_fn.bind(), name="noreqfn", route_prefix="/noreqfn")
    r = httpx.get(url + "/noreq", timeout=30)
    assert (r.status_code, r.text) == (200, "no request needed")
    r = httpx.get(url + "/noreqfn", timeout=30)
    assert (r.status_code, r.text) == (200, "function without a request")
    serve.delete("noreq")
    serve.delete("noreqfn")


@serve.deployment
class AsyncInit:
    async def __init__(self, word):
        await asyncio.sleep(0.05)
        self.word = word

    def __call__(self, request):
        return self.word

    def word_upper(self):
        return self.word.upper()


def test_an_async_constructor_is_awaited_before_requests(url):
    handle = serve.run(AsyncInit.bind("ready"), name="asyncinit", route_prefix="/asyncinit")
    assert httpx.get(url + "/asyncinit", timeout=30).text == "ready"
    assert handle.word_upper.remote().result(timeout_s=30) == "READY"
    serve.delete("asyncinit")


def test_handles_are_cached_per_process(url):
    first = serve.run(NoRequest.bind(), name="cached", route_prefix="/cached")
    assert serve.get_app_handle("cached") is first
    assert serve.get_deployment_handle("NoRequest", "cached") is first
    assert first.remote().result(timeout_s=30) == "no request needed"
    serve.delete("cached")


@serve.deployment(max_ongoing_requests=16)
class ConcurrentBatches:
    def __init__(self):
        self.running = self.peak = 0

    @serve.batch(max_batch_size=2, batch_wait_timeout_s=0.05, max_concurrent_batches=2)
    async def __call__(self, xs):
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.5)
        self.running -= 1
        return [x + 1 for x in xs]

    def peak_batches(self):
        return self.peak


def test_run_takes_rays_positional_parameters_and_batches_run_concurrently(url):
    """serve.run(target, blocking, name, route_prefix) as Ray's signature allows, and
    max_concurrent_batches=2 lets a replica run two batches at once."""
    handle = serve.run(ConcurrentBatches.bind(), False, "batches", "/batches")
    assert serve.status().applications["batches"].route_prefix == "/batches"
    responses = [handle.remote(i) for i in range(4)]
    assert [r.result(timeout_s=30) for r in responses] == [1, 2, 3, 4]
    assert handle.peak_batches.remote().result(timeout_s=30) == 2
    serve.delete("batches")
