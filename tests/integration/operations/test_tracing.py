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

from ember_common import tracing

DRIVER = textwrap.dedent("""
    import asyncio, functools, json, os, tempfile, numpy as np
    import ember
    from opentelemetry import trace

    ember.init(num_cpus=2)

    @ember.remote
    def leaf(x):
        trace.get_current_span().set_attribute("user.leaf", x)
        return x + 1

    @ember.remote
    def outer(x):
        with trace.get_tracer("user").start_as_current_span("user work"):
            pass
        return ember.get(leaf.remote(x)) * 2

    @ember.remote(max_retries=1, retry_exceptions=True)
    def flaky(path):
        import os
        if not os.path.exists(path):
            open(path, "w").close()
            raise RuntimeError("first attempt fails")
        return "ok"

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
        assert ember.get(flaky.remote(os.path.join(tempfile.mkdtemp(), "flag"))) == "ok"
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


def _traced_run(source, span_dir, delay_ms=None, timeout=180):
    """Runs a driver script exporting its spans to files under span_dir (the file exporter,
    OTEL_BSP_SCHEDULE_DELAY=delay_ms when given); returns the JSON of its last line."""
    env = dict(os.environ, OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(span_dir))
    if delay_ms is not None:
        env["OTEL_BSP_SCHEDULE_DELAY"] = str(delay_ms)
    r = subprocess.run([sys.executable, "-c", source], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    span_dir = tmp_path_factory.mktemp("spans")
    return str(span_dir), _traced_run(DRIVER, span_dir, delay_ms=100)


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
    # A span the user's code makes inside a task hangs off that task's execution span.
    user = by_name["user work"][0]
    assert ids[user["parent_id"]]["name"] == "execute outer" and user["service"] == "ember-worker"
    ex = by_name["execute outer"][0]
    assert ex["attributes"]["ember.worker_id"] and ex["attributes"]["ember.node_id"]
    assert ex["attributes"]["ember.attempt"] == 0 and ex["end_ns"] >= ex["start_ns"]
    # The user's code set an attribute on the current span: the worker recorded that execution
    # span (with Ember's attributes and the user's), once.
    leaves = by_name["execute leaf"]
    assert len(leaves) == 1 and leaves[0]["attributes"]["user.leaf"] == 1
    assert leaves[0]["attributes"]["ember.attempt"] == 0 and leaves[0]["service"] == "ember-worker"
    # A retried task: one execution span per attempt, each its own span, both under the submission.
    tries = sorted(by_name["execute flaky"], key=lambda s: s["attributes"]["ember.attempt"])
    assert [t["attributes"]["ember.attempt"] for t in tries] == [0, 1]
    assert len({t["span_id"] for t in tries}) == 2
    assert {ids[t["parent_id"]]["name"] for t in tries} == {"submit flaky"}
    assert [t["status"] for t in tries] == ["ERROR", "UNSET"] and "first attempt fails" in tries[0]["error"]
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


def test_object_and_actor_spans(traced):
    span_dir, out = traced
    spans = tracing.read_trace(span_dir, out["trace_id"])
    ids = {s["span_id"]: s for s in spans}
    put = [s for s in spans if s["name"] == "put" and s["service"] == "ember-driver"]
    assert put and put[0]["attributes"]["ember.object.size"] >= 10 * 2**20
    assert any(s["name"] == "get" for s in spans)
    # The actor's creation, in the GCS, within the trace that created it; __init__ below it.
    create = [s for s in spans if s["name"] == "actor create Counter"]
    assert create and create[0]["service"] == "ember-gcs"
    assert create[0]["attributes"]["ember.actor.state"] == "ALIVE"
    lease = [s for s in spans if s["parent_id"] == create[0]["span_id"]
             and s["name"].endswith("RequestWorkerLease")]
    assert lease and lease[0]["attributes"]["ember.lease.decision"] == "local"
    assert lease[0]["attributes"]["ember.lease.result"] == "granted"
    init = [s for s in spans if s["service"] == "ember-worker" and "__init__" in s["name"]
            and ids.get(s["parent_id"], {}).get("service") == "ember-gcs"]
    assert init, "the actor's __init__ runs under its creation span"


END_DRIVER = textwrap.dedent("""
    import json, os
    import ember
    from opentelemetry import trace

    ember.init(num_cpus=2)

    @ember.remote
    def task():
        return os.getpid()

    @ember.remote
    class Keeper:
        def call(self):
            return os.getpid()

    with trace.get_tracer("test").start_as_current_span("short job") as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        k = Keeper.remote()
        pids = {"actor": ember.get(k.call.remote()), "task": ember.get(task.remote())}
    print(json.dumps({"trace_id": trace_id, "pids": pids}))
    ember.shutdown()  # at once: the actor dies with its job, the task's worker with the cluster
""")


def test_spans_of_workers_stopped_at_the_jobs_end_are_exported(tmp_path):
    """A job ends before any worker's export timer (60 s) fires: the actor's worker (stopped
    because its job finished) and the task's worker (its lease returned, then stopped with
    the cluster) export what they hold as they are stopped, instead of being SIGKILLed."""
    out = _traced_run(END_DRIVER, tmp_path, delay_ms=60000)
    spans = tracing.read_trace(str(tmp_path), out["trace_id"])
    executed = {s["name"]: s for s in spans if s["service"] == "ember-worker"}
    assert {"execute Keeper.__init__", "execute Keeper.call", "execute task"} <= set(executed), sorted(executed)
    assert out["pids"]["actor"] != out["pids"]["task"]


SPILL_DRIVER = textwrap.dedent("""
    import json, os, time, numpy as np
    import ember
    import ember.exceptions
    from ember.testing import LocalCluster, wait_for
    from opentelemetry import trace

    with LocalCluster(object_store_memory=64 * 2**20) as c:
        c.add_node({"CPU": 1}, is_head=True)
        other = c.add_node({"CPU": 1, "other": 1})
        ember.init(address=c.gcs_address)

        @ember.remote(resources={"other": 1})
        def total(refs):
            return int(sum(int(ember.get(r)[0]) for r in refs))

        @ember.remote(max_restarts=1)
        class Phoenix:
            def pid(self):
                return os.getpid()

            def die(self):
                os._exit(1)

        tracer = trace.get_tracer("test")
        with tracer.start_as_current_span("job2") as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            refs = [ember.put(np.full(20 * 2**20, i, dtype=np.uint8)) for i in range(4)]
            assert ember.get(total.remote([refs[0]])) == 0   # pulled by the other node
            assert ember.get(refs[0])[0] == 0                 # restored if spilled
            p = Phoenix.remote()
            first = ember.get(p.pid.remote())
            p.die.remote()
            def restarted():
                try:
                    return ember.get(p.pid.remote()) != first
                except ember.exceptions.RayActorError:  # calls during the restart fail
                    return False

            wait_for(restarted, timeout_s=60, what="the actor's restart")
        print(json.dumps({"trace_id": trace_id, "other": other.node_id}))
        ember.shutdown()
""")


def test_spill_restore_pull_and_restart_spans(tmp_path):
    out = _traced_run(SPILL_DRIVER, tmp_path, delay_ms=100)
    spans = tracing.read_trace(str(tmp_path), out["trace_id"])
    spill = [s for s in spans if s["name"] == "objmgr spill"]
    assert spill and spill[0]["service"] == "ember-objmgr"
    assert spill[0]["attributes"]["ember.object.size"] >= 20 * 2**20
    assert spill[0]["attributes"]["ember.node_id"]
    # The lease for `total` (needs the other node) was spilled back by the head's raylet and
    # granted by the other one: one server span per hop, both under the task's submission.
    hops = sorted((s for s in spans if s["name"].endswith("RequestWorkerLease")
                   and s["attributes"].get("ember.lease.name") == "total"),
                  key=lambda s: s["attributes"]["ember.lease.spillback_count"])
    assert [h["attributes"]["ember.lease.decision"] for h in hops] == ["spill", "local"]
    assert hops[0]["attributes"]["ember.lease.spill_to"] == out["other"]
    assert hops[1]["attributes"]["ember.node_id"] == out["other"]
    assert hops[1]["attributes"]["ember.lease.result"] == "granted"
    submit = {s["span_id"]: s for s in spans if s["name"] == "submit total"}
    assert all(h["parent_id"] in submit for h in hops)
    restart = [s for s in spans if s["name"] == "actor restart Phoenix"]
    assert restart and restart[0]["attributes"]["ember.actor.restarts"] == 1
    assert restart[0]["attributes"]["ember.actor.state"] == "ALIVE"
    # Pulls and restores are made by the object managers for their callers: each is a span with
    # the object's size and the node, in the trace of the get that needed it.
    pulls = [s for s in spans if s["name"] == "objmgr pull"]
    assert pulls and pulls[0]["attributes"]["ember.node_id"] == out["other"]
    assert pulls[0]["attributes"]["ember.object.size"] >= 20 * 2**20
    restores = [s for s in spans if s["name"] == "objmgr restore"]
    assert restores and restores[0]["attributes"]["ember.object.size"] >= 20 * 2**20


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


# Prepended to the driver scripts below: the driver's GCS children (one that exits while we look
# is skipped).
GCS_PIDS = textwrap.dedent("""
    import psutil
    def gcs_pids():
        pids = []
        for p in psutil.Process().children(recursive=True):
            try:
                if "ember_gcs" in " ".join(p.cmdline()):
                    pids.append(p.pid)
            except psutil.Error:
                continue
        return pids
""")

LEFT_DRIVER = GCS_PIDS + textwrap.dedent("""
    import json, os, psutil
    import ember
    from ember_common import tracing
    from opentelemetry import trace

    ember.init(num_cpus=2)
    assert tracing.leaves_spans()  # asked at init
    gcs = gcs_pids()

    @ember.remote
    def leaf(x):
        return x + 1

    @ember.remote
    def outer(x):
        return ember.get(leaf.remote(x))

    @ember.remote
    def touched():
        trace.get_current_span().set_attribute("user.touched", 1)
        return os.getpid()

    @ember.remote(max_retries=0)
    def boom():
        raise ValueError("boom")

    @ember.remote
    class Counter:
        def incr(self):
            return 1

    with trace.get_tracer("test").start_as_current_span("left job") as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        assert ember.get([outer.remote(i) for i in range(4)]) == [1, 2, 3, 4]
        ember.get(touched.remote())
        try:
            ember.get(boom.remote())
        except ember.exceptions.RayTaskError:
            pass
        c = Counter.remote()
        assert ember.get([c.incr.remote() for _ in range(3)]) == [1, 1, 1]
    print(json.dumps({"trace_id": trace_id, "gcs": gcs}))
    ember.shutdown()
""")


def test_untouched_execute_spans_are_exported_by_the_gcs_from_task_events(tmp_path):
    """Tasks that end without error and whose span no code asked for leave their execute span
    to the owner's task events, and the GCS exports it (tracing.derived_spans): under the worker's
    service, the submission's child, the parent of nested submissions, once per task. A span
    user code touched, and a failed task's, the worker records itself."""
    out = _traced_run(LEFT_DRIVER, tmp_path, delay_ms=100)
    assert len(out["gcs"]) == 1
    by_file: dict = {}
    for name in os.listdir(tmp_path):
        with open(tmp_path / name) as f:
            for line in f:
                s = json.loads(line)
                if s["trace_id"] == out["trace_id"]:
                    by_file.setdefault(name, []).append(s)
    spans = [s for file_spans in by_file.values() for s in file_spans]
    ids = {s["span_id"]: s for s in spans}
    executes = [s for s in spans if s["name"].startswith("execute ")]
    per_task = [s["attributes"]["ember.task_id"] for s in executes]
    assert len(per_task) == len(set(per_task)) == 4 + 4 + 1 + 1 + 1 + 3, sorted(s["name"] for s in executes)
    from_gcs = {s["name"] for s in by_file.get(f"ember-worker-{out['gcs'][0]}.jsonl", [])}
    assert from_gcs == {"execute outer", "execute leaf", "execute Counter.incr"}, from_gcs
    for s in executes:
        assert s["service"] == "ember-worker"
        parent = "actor create Counter" if s["name"] == "execute Counter.__init__" else "submit " + s["name"][8:]
        assert ids[s["parent_id"]]["name"] == parent
        # every worker knew the GCS exports before its first task: the derived id, whoever
        # records the span (touched and failed tasks: the worker); the actor's creation comes
        # with a trace_context (the GCS's way), whose span the worker records as before
        assert s["attributes"]["ember.task_id"].endswith(s["span_id"]) == (s["name"] != "execute Counter.__init__")
    for s in (s for s in spans if s["name"] == "submit leaf"):
        assert ids[s["parent_id"]]["name"] == "execute outer"  # the derived id, named by the worker
    (touched,) = [s for s in executes if s["name"] == "execute touched"]
    assert touched["attributes"]["user.touched"] == 1 and touched["status"] == "UNSET"
    (boom,) = [s for s in executes if s["name"] == "execute boom"]
    assert boom["status"] == "ERROR" and "boom" in boom["error"]


ROOT_DRIVER = GCS_PIDS + textwrap.dedent("""
    import json, os, sys, time, psutil
    import ember
    from ember_common.tracing import _submit
    from opentelemetry import trace

    ember.init(num_cpus=2)
    assert _submit._left  # asked at init: the GCS exports root submit spans
    gcs = gcs_pids()

    @ember.remote
    def f(x):
        return x

    @ember.remote(max_retries=1)
    def dies_once(marker):
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the first attempt's worker dies: the task is retried
        return "ok"

    @ember.remote
    def slow():
        time.sleep(60)

    refs = [f.remote(i) for i in range(5)]
    assert ember.get(refs) == list(range(5))
    assert ember.get(dies_once.remote(sys.argv[1])) == "ok"
    with trace.get_tracer("test").start_as_current_span("user span"):
        assert ember.get(f.remote(9)) == 9  # not a root: the driver records its submit span
    slow.remote()  # still running when the driver exits
    time.sleep(0.2)
    print(json.dumps({"gcs": gcs, "driver": os.getpid(), "f": [r.task_id().hex() for r in refs]}))
    ember.shutdown()
""")


def test_root_submit_spans_are_exported_by_the_gcs_from_task_events_once(tmp_path):
    """A task submitted with no current span leaves its submit span to its task-event record
    (tracing.submit_left): the GCS exports it under the driver's resource, the parent of the
    task's execute spans, once per task, also for a task retried after its worker died and for
    one still running when the driver exits; a submission under a user's span is recorded by
    the driver as before."""
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    env = dict(os.environ, OTEL_TRACES_EXPORTER="ember_file", EMBER_TRACE_DIR=str(spans_dir),
               OTEL_BSP_SCHEDULE_DELAY="100")
    r = subprocess.run([sys.executable, "-c", ROOT_DRIVER, str(tmp_path / "marker")], env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    by_file: dict = {}
    for name in os.listdir(spans_dir):
        with open(spans_dir / name) as fh:
            by_file[name] = [json.loads(line) for line in fh]
    from_gcs = by_file[f"ember-worker-{out['gcs'][0]}.jsonl"]
    from_driver = by_file.get(f"ember-driver-{out['driver']}.jsonl", [])
    submits = [s for s in from_gcs if s["name"].startswith("submit ")]
    assert sorted(s["name"] for s in submits) == ["submit dies_once"] + ["submit f"] * 5 + ["submit slow"]
    for s in submits:  # roots, each its own trace, under the driver's resource, at one instant
        assert s["service"] == "ember-driver" and s["parent_id"] == "" and s["start_ns"] == s["end_ns"] > 0
        task_id = s["attributes"]["ember.task_id"]  # the trace's id and the span's: the task's own
        assert (s["trace_id"], s["span_id"]) == (task_id, task_id[:16])
    assert len({s["trace_id"] for s in submits}) == 7
    assert sorted(s["attributes"]["ember.task_id"] for s in submits if s["name"] == "submit f") == sorted(out["f"])
    spans = [s for file_spans in by_file.values() for s in file_spans]
    by_id = {s["span_id"]: s for s in spans}
    for name, n in (("f", 6), ("dies_once", 1)):
        executes = [s for s in spans if s["name"] == f"execute {name}"]
        assert len(executes) == n and all(by_id[s["parent_id"]]["name"] == f"submit {name}" for s in executes)
        assert all(s["trace_id"] == by_id[s["parent_id"]]["trace_id"] for s in executes)
    (user,) = [s for s in from_driver if s["name"] == "submit f"]  # the one under the user's span
    assert {s["span_id"]: s for s in from_driver}[user["parent_id"]]["name"] == "user span"
    assert [s["name"] for s in spans].count("submit f") == 6


NO_EVENTS_DRIVER = textwrap.dedent("""
    import json
    import ember
    from ember._private.telemetry import task_events
    from opentelemetry import trace

    # This driver reports no task events; its workers do, and so leave their spans.
    ember.init(num_cpus=1, runtime_env={"env_vars": {"EMBER_TASK_EVENTS_ENABLED": "1"}})
    assert not task_events.on

    @ember.remote
    def f():
        from ember_common import tracing
        return tracing.leaves_spans()

    with trace.get_tracer("test").start_as_current_span("no events") as root:
        trace_id = format(root.get_span_context().trace_id, "032x")
        left = ember.get([f.remote() for _ in range(3)])
    print(json.dumps({"trace_id": trace_id, "left": left}))
    ember.shutdown()
""")


def test_an_owner_without_task_events_records_the_spans_left_to_it(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_TASK_EVENTS_ENABLED", "0")
    out = _traced_run(NO_EVENTS_DRIVER, tmp_path, delay_ms=100)
    assert out["left"] == [True] * 3  # the workers left their spans
    spans = tracing.read_trace(str(tmp_path), out["trace_id"])
    ids = {s["span_id"]: s for s in spans}
    executes = [s for s in spans if s["name"] == "execute f"]
    assert len(executes) == 3 and len({s["attributes"]["ember.task_id"] for s in executes}) == 3
    for s in executes:  # recorded by the owner, from the reply
        assert s["service"] == "ember-driver" and ids[s["parent_id"]]["name"] == "submit f"
        assert s["attributes"]["ember.task_id"].endswith(s["span_id"]) and s["end_ns"] > s["start_ns"]


FAST_PATHS = textwrap.dedent("""
    import json
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from ember_common import tracing
    from ember_common.tracing import _otlp

    assert tracing.setup("ember-test", node_id="n1")
    got = []

    class Keep(SpanExporter):
        def export(self, spans):
            got.extend(spans)
            return SpanExportResult.SUCCESS

    tracing.add_span_processor(SimpleSpanProcessor(Keep()))
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("root", attributes={"b": True, "i": -5, "f": 1.5,
                                                          "s": "é", "l": [1, 2]}) as root:
        root.add_event("event", {"k": 1})
        carrier = {}
        tracing.submit_span("submit f", carrier, **{"ember.task_id": "t1"})
    carrier["tracestate"] = "vendor=x"
    with tracing.execute_span("execute f", carrier, **{"ember.attempt": 0, "none": None}) as sp:
        sp.set_attribute("user", "v")
        sp.add_event("hello")
        with tracer.start_as_current_span("user child"):
            pass
        nested = {}
        tracing.submit_span("submit g", nested)
    try:
        with tracing.execute_span("execute g", nested):
            raise KeyError("x")
    except KeyError:
        pass
    by = {s.name: s for s in got}
    print(json.dumps({
        "same_encoding": sdk_encode(got) == _otlp.encode_spans(got),
        "light": type(sp).__name__,
        "parents": {s.name: (by_id.name if (by_id := next((p for p in got if s.parent and p.context.span_id == s.parent.span_id), None)) else None) for s in got},
        "one_trace": len({s.context.trace_id for s in got}) == 1,
        "error": [by["execute g"].status.status_code.name, by["execute g"].status.description,
                  [e.name for e in by["execute g"].events]],
        "attrs": dict(by["execute f"].attributes),
        "tracestate": nested.get("tracestate"),
    }))
""")


def test_fast_paths_match_the_sdk(tmp_path):
    """The per-task fast paths (submit/execute spans, OTLP encoding) give what the SDK's generic
    path gives: the same parent links, statuses, events and the same OTLP request."""
    out = _traced_run(FAST_PATHS, tmp_path, timeout=60)
    assert out["same_encoding"] and out["one_trace"] and out["light"] == "LightSpan"
    assert out["parents"] == {"root": None, "submit f": "root", "execute f": "submit f",
                              "user child": "execute f", "submit g": "execute f",
                              "execute g": "submit g"}
    assert out["error"] == ["ERROR", "KeyError: 'x'", ["exception"]]
    assert out["attrs"] == {"ember.attempt": 0, "user": "v"}
    assert out["tracestate"] == "vendor=x"
