"""The remote-driver workload (not a test module): a program given only the client proxy's
address (PROXY_ADDRESS, else EMBER_ADDRESS) that prints one `REPORT {json}` line, a part per
feature. Run by tests/integration/cluster/test_remote_driver.py on loopback and by
tests/e2e/test_remote_driver_compose.py in a container that can reach only the proxy."""
import json
import os
import time
import traceback

import numpy as np
import psutil

import ember
from ember import exceptions as ex

report = {}

def part(name):
    def wrap(fn):
        try:
            report[name] = fn()
        except BaseException as e:
            report[name] = {"failed": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()}
        return fn
    return wrap

info = ember.init(os.environ.get("PROXY_ADDRESS"), namespace="remote-ns")
report["init"] = {"initialized": ember.is_initialized(), "namespace": info["namespace"]}

@ember.remote
def add(a, b):
    return a + b

@ember.remote(num_returns=2)
def pair(x):
    return x, x * 2

@ember.remote
def total(values):
    return sum(ember.get(values))

@ember.remote
def fail(msg):
    raise ValueError(msg)

@ember.remote
def sleepy(s):
    end = time.time() + s
    while time.time() < end:  # short sleeps: cancel interrupts between them
        time.sleep(0.05)
    return s

@ember.remote
class Counter:
    def __init__(self, start=0):
        self.n = start
    def incr(self, by=1):
        self.n += by
        return self.n
    def pid(self):
        return os.getpid()

@ember.remote
def bump(counter):
    return ember.get(counter.incr.remote(10))

@part("tasks")
def _():
    one = ember.get(add.remote(1, 2))
    many = ember.get([add.remote(i, i) for i in range(20)])
    a, b = pair.remote(21)
    x = ember.put(5)
    by_ref = ember.get(add.remote(x, 1))  # a top-level ref argument is resolved
    nested = ember.get(total.remote([ember.put(i) for i in range(4)]))  # refs inside a value
    opts = ember.get(add.options(num_cpus=0.5, name="named-add").remote(2, 2))
    return {"one": one, "many": many, "pair": ember.get([a, b]), "by_ref": by_ref,
            "nested": nested, "options": opts, "is_ref": isinstance(x, ember.ObjectRef)}

@part("actors")
def _():
    c = Counter.remote(5)
    first = ember.get(c.incr.remote())
    ember.get([c.incr.remote() for _ in range(9)])
    from_task = ember.get(bump.remote(c))  # a handle passed to a task
    after = ember.get(c.incr.options(name="incr-call").remote(0))
    try:
        missing = repr(c.nope)  # raises
    except AttributeError as e:
        missing = str(e)
    return {"first": first, "from_task": from_task, "after": after, "missing": missing}

@part("named")
def _():
    Counter.options(name="shared", lifetime="detached").remote(100)
    h = ember.get_actor("shared")
    value = ember.get(h.incr.remote())
    try:
        ember.get_actor("no-such-actor")
        unknown = None
    except ValueError as e:
        unknown = str(e)
    names = ember.util.list_named_actors()
    ember.kill(h)
    return {"value": value, "unknown": unknown, "names": names}

@part("big")
def _():
    arr = np.arange(100 * 1024 * 1024 // 8, dtype=np.int64)
    t0 = time.perf_counter()
    ref = ember.put(arr)
    put_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    back = ember.get(ref)
    get_s = time.perf_counter() - t0
    return {"equal": bool(np.array_equal(arr, back)), "nbytes": int(back.nbytes),
            "put_s": put_s, "get_s": get_s}

@part("wait")
def _():
    slow, fast = sleepy.remote(30), sleepy.remote(0)
    ready, rest = ember.wait([slow, fast], num_returns=1, timeout=20)
    try:
        ember.get(slow, timeout=0.2)
        timed_out = False
    except ex.GetTimeoutError:
        timed_out = True
    ember.cancel(slow)
    try:
        ember.get(slow, timeout=20)
        cancelled = None
    except ex.TaskCancelledError as e:
        cancelled = type(e).__name__
    return {"ready_is_fast": ready == [fast] and ready[0] is fast, "rest_is_slow": rest == [slow],
            "timed_out": timed_out, "cancelled": cancelled}

@part("error")
def _():
    try:
        ember.get(fail.remote("boom"))
    except ValueError as e:
        return {"is_task_error": isinstance(e, ex.RayTaskError), "text": str(e)}
    return {"raised": False}

@part("kill")
def _():
    c = Counter.remote()
    ember.get(c.incr.remote())
    ember.kill(c)
    try:
        ember.get(c.incr.remote(), timeout=20)
        return {"died": None}
    except ex.RayActorError as e:
        return {"died": type(e).__name__}

@part("release")
def _():
    conn = ember.util.client.client.active()
    before = conn.call("held")["refs"]
    refs = [ember.put(i) for i in range(5)]
    copy = refs[0]
    held = conn.call("held")["refs"]
    del refs
    time.sleep(1.5)  # releases go out within a second
    one_left = conn.call("held")["refs"]
    del copy
    time.sleep(1.5)
    return {"added": held - before, "one_left": one_left - before,
            "none_left": conn.call("held")["refs"] - before}

@part("serve")
def _():
    import urllib.request

    from ember import serve

    @serve.deployment
    class Hello:
        def __call__(self, request):
            return "hello from a remote driver"

    port = os.environ.get("SERVE_PORT")  # unset: the cluster's own Serve proxy, out of reach here
    handle = serve.run(Hello.bind(), port=int(port) if port else None, route_prefix="/remote")
    body = None
    if port:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/remote", timeout=30).read().decode()
    try:
        handle.remote()
        relayed = True
    except NotImplementedError:
        relayed = False
    return {"body": body, "handle_relayed": relayed}

@part("cluster")
def _():
    ctx = ember.get_runtime_context()
    return {"cpus": ember.cluster_resources().get("CPU"), "nodes": len(ember.nodes()),
            "available_cpu": "CPU" in ember.available_resources(),
            "namespace": ctx.get_namespace(), "job_id": ctx.get_job_id()}

@part("unsupported")
def _():
    try:
        ember.get_gpu_ids()
    except NotImplementedError as e:
        return str(e)
    return None

@part("connections")
def _():
    me = psutil.Process()
    ports = {c.raddr.port for c in me.net_connections(kind="inet") if c.raddr}
    return sorted(ports)

ember.shutdown()
report["after_shutdown"] = ember.is_initialized()
print("REPORT " + json.dumps(report))
