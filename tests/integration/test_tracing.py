"""Tracing end to end: a traced driver (a subprocess, so that the SDK is configured from its
environment) runs a task with a nested task, an actor call, an async actor call, a generator
task, a wraps-decorated task and a 10 MB put; every process writes spans with the ember_file
exporter, and one trace must hold spans from the driver, workers, raylet, object manager and
GCS, correctly parented."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ember._private import tracing

DRIVER = textwrap.dedent("""
    import asyncio, functools, json, numpy as np
    import ember
    from opentelemetry import trace

    ember.init(num_cpus=2)

    @ember.remote
    def leaf(x):
        return x + 1

    @ember.remote
    def outer(x):
        return ember.get(leaf.remote(x)) * 2

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            return fn(*a, **k)
        return wrapper

    @ember.remote
    @deco
    def wrapped(x):
        return x

    @ember.remote
    def gen(n):
        for i in range(n):
            yield i

    @ember.remote
    def fails():
        raise ValueError("traced failure")

    @ember.remote
    class Counter:
        def incr(self):
            return 1

    @ember.remote
    class Async:
        async def ping(self):
            await asyncio.sleep(0)
            return "pong"

    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("job") as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        assert ember.get(outer.remote(1)) == 4
        assert ember.get(wrapped.remote(7)) == 7
        assert [ember.get(r) for r in gen.remote(3)] == [0, 1, 2]
        c = Counter.remote()
        assert ember.get(c.incr.remote()) == 1
        a = Async.remote()
        assert ember.get(a.ping.remote()) == "pong"
        ref = ember.put(np.ones(10 * 2**20, dtype=np.uint8))
        assert ember.get(ref).sum() == 10 * 2**20
        try:
            ember.get(fails.remote())
            message = ""
        except ValueError as e:
            message = str(e)
    print(json.dumps({"trace_id": trace_id, "error": message}))
    ember.shutdown()
""")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    span_dir = tmp_path_factory.mktemp("spans")
    env = dict(os.environ, OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(span_dir),
               OTEL_BSP_SCHEDULE_DELAY="100")
    r = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True,
                       timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return str(span_dir), out


def test_one_trace_spans_every_service(traced):
    span_dir, out = traced
    spans = tracing.read_trace(span_dir, out["trace_id"])
    services = {s["service"] for s in spans}
    assert {"ember-driver", "ember-worker", "ember-raylet", "ember-objmgr", "ember-gcs"} <= services
    ids = {s["span_id"]: s for s in spans}
    roots = [s for s in spans if s["parent_id"] not in ids]
    assert [s["name"] for s in roots] == ["job"], "every span but the root has its parent in the trace"


def test_execution_spans_are_children_of_submissions(traced):
    span_dir, out = traced
    spans = tracing.read_trace(span_dir, out["trace_id"])
    ids = {s["span_id"]: s for s in spans}
    by_name = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    for name in ["outer", "leaf", "wrapped", "gen", "Counter.incr", "Async.ping"]:
        assert f"execute {name}" in by_name, f"no execution span for {name}"
        ex = by_name[f"execute {name}"][0]
        parent = ids[ex["parent_id"]]
        assert parent["name"] == f"submit {name}"
    # The nested task was submitted from inside the outer task's execution.
    leaf_submit = by_name["submit leaf"][0]
    assert ids[leaf_submit["parent_id"]]["name"] == "execute outer"
    assert ids[leaf_submit["parent_id"]]["service"] == "ember-worker"
    # The lease and the put reached the raylet and the object manager inside the trace.
    assert any(s["name"].endswith("RequestWorkerLease") for s in spans)
    assert any(s["name"].endswith("ObjectManager/Create") for s in spans)


def test_failed_task_names_its_trace_and_span_is_error(traced):
    span_dir, out = traced
    assert out["trace_id"] in out["error"]
    spans = tracing.read_trace(span_dir, out["trace_id"])
    failed = [s for s in spans if s["name"] == "execute fails"]
    assert failed and failed[0]["status"] == "ERROR" and "traced failure" in failed[0]["error"]


def test_trace_show_renders_the_tree(traced):
    span_dir, out = traced
    r = subprocess.run([sys.executable, "-m", "ember.scripts", "trace", "show", out["trace_id"],
                        "--dir", span_dir], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "ember-worker" in r.stdout and "ERROR" in r.stdout
    job = next(i for i, ln in enumerate(lines) if ln.strip().startswith("ember-driver") and " job " in ln + " ")
    nested = [ln for ln in lines if "execute leaf" in ln]
    assert nested and len(nested[0]) - len(nested[0].lstrip()) > len(lines[job]) - len(lines[job].lstrip())


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_export_to_a_real_receiver(tmp_path, protocol):
    """The same traced driver, exporting OTLP to a receiver process on loopback."""
    from ember.testing.otlp_receiver import OtlpReceiver

    with OtlpReceiver(str(tmp_path)) as rx:
        endpoint = rx.grpc_endpoint if protocol == "grpc" else rx.http_endpoint + "/v1/traces"
        env = dict(os.environ, OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
                   OTEL_BSP_SCHEDULE_DELAY="100")
        env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" if protocol != "grpc" else "OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        r = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True,
                           timeout=180)
        assert r.returncode == 0, r.stderr[-3000:]
        trace_id = json.loads(r.stdout.strip().splitlines()[-1])["trace_id"]
        from ember.testing import wait_for

        def services():
            got = {s["service"] for s in rx.spans() if s["trace_id"] == trace_id}
            want = {"ember-driver", "ember-worker", "ember-raylet", "ember-objmgr", "ember-gcs"}
            return want <= got

        wait_for(services, timeout_s=20, what="spans from every service at the OTLP receiver")
        spans = [s for s in rx.spans() if s["trace_id"] == trace_id]
        ids = {s["span_id"] for s in spans}
        assert [s["name"] for s in spans if s["parent_id"] not in ids] == ["job"]
