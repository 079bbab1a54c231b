"""Remote tasks on the embedded cluster: results, arguments, errors, retries, cancel, GPUs."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

import ember
from ember import exceptions as ex


def test_seed_section_3_1_hundred_tasks(ray_start):
    @ember.remote
    def process_chunk(chunk):
        return sum(chunk)

    chunks = [list(range(i, i + 10)) for i in range(100)]
    futures = [process_chunk.remote(c) for c in chunks]
    assert all(isinstance(f, ember.ObjectRef) for f in futures)
    assert ember.get(futures) == [sum(c) for c in chunks]


def test_args_kwargs_and_multiple_returns(ray_start):
    @ember.remote(num_returns=3)
    def three(a, b=2, *, c):
        return a, b, c

    r1, r2, r3 = three.remote(1, c=3)
    assert ember.get([r1, r2, r3]) == [1, 2, 3]
    with pytest.raises(ex.RayTaskError, match="num_returns=2"):
        ember.get(three.options(num_returns=2).remote(1, c=3)[0])


def test_top_level_refs_resolved_nested_refs_stay_refs(ray_start):
    @ember.remote
    def inspect(top, nested):
        return type(top).__name__, type(nested[0]).__name__, ember.get(nested[0])

    a = ember.put(41)
    b = ember.put("x")
    assert ember.get(inspect.remote(a, [b])) == ("int", "ObjectRef", "x")


def test_nested_tasks_do_not_deadlock(ray_start):
    @ember.remote
    def leaf(i):
        return i * i

    @ember.remote
    def parent(n):
        return sum(ember.get([leaf.remote(i) for i in range(n)]))

    # Four parents on two CPUs, each blocking on children: blocked workers lend their CPU.
    assert ember.get([parent.remote(5) for _ in range(4)], timeout=60) == [30] * 4


def test_user_exception_type_and_traceback(ray_start):
    class MyError(Exception):
        def __init__(self, code, msg):
            super().__init__(msg)
            self.code = code

    @ember.remote
    def fails():
        raise MyError(7, "boom")

    with pytest.raises(MyError) as info:
        ember.get(fails.remote())
    assert isinstance(info.value, ex.RayTaskError)
    assert info.value.code == 7
    assert "boom" in str(info.value) and "fails" in str(info.value)
    assert "raise MyError(7" in str(info.value)


def test_failed_dependency_propagates(ray_start):
    @ember.remote
    def bad():
        raise ValueError("first")

    @ember.remote
    def use(x):
        return x

    with pytest.raises(ValueError, match="first"):
        ember.get(use.remote(bad.remote()))


def test_get_timeout_and_wait(ray_start):
    @ember.remote
    def sleepy(t):
        time.sleep(t)
        return t

    slow = sleepy.remote(3)
    with pytest.raises(ex.GetTimeoutError):
        ember.get(slow, timeout=0.2)
    fast = sleepy.remote(0)
    ready, rest = ember.wait([slow, fast], num_returns=1, timeout=2)
    assert ready == [fast] and rest == [slow]
    ready, rest = ember.wait([slow], timeout=0)
    assert ready == [] and rest == [slow]
    ember.cancel(slow, force=True)


def test_seed_section_6_4_wait_loop(ray_start):
    @ember.remote
    def task(i):
        time.sleep(0.01 * (i % 5))
        return i

    remaining = [task.remote(i) for i in range(100)]
    results = []
    while remaining:
        done, remaining = ember.wait(remaining, num_returns=1)
        results.extend(ember.get(done))
    assert sorted(results) == list(range(100))


def test_worker_crash_is_retried(ray_start, tmp_path):
    marker = tmp_path / "attempts"

    @ember.remote(max_retries=3)
    def crash_twice(path):
        n = int(open(path).read()) if os.path.exists(path) else 0
        with open(path, "w") as f:
            f.write(str(n + 1))
        if n < 2:
            os._exit(1)
        return n

    assert ember.get(crash_twice.remote(str(marker)), timeout=60) == 2

    @ember.remote(max_retries=0)
    def crash():
        os._exit(1)

    with pytest.raises(ex.WorkerCrashedError):
        ember.get(crash.remote(), timeout=60)


def test_retry_exceptions(ray_start, tmp_path):
    marker = tmp_path / "n"

    @ember.remote(max_retries=2, retry_exceptions=True)
    def flaky(path):
        n = int(open(path).read()) if os.path.exists(path) else 0
        open(path, "w").write(str(n + 1))
        if n == 0:
            raise RuntimeError("transient")
        return "ok"

    assert ember.get(flaky.remote(str(marker))) == "ok"


def test_cancel_running_task(ray_start):
    @ember.remote
    def forever():
        while True:
            time.sleep(0.05)

    ref = forever.remote()
    time.sleep(1.0)
    ember.cancel(ref)
    with pytest.raises(ex.TaskCancelledError):
        ember.get(ref, timeout=30)
    ref2 = forever.remote()
    time.sleep(0.5)
    ember.cancel(ref2, force=True)
    with pytest.raises(ex.TaskCancelledError):
        ember.get(ref2, timeout=30)


def test_fractional_gpus_share_one_gpu(ray_start):
    @ember.remote(num_gpus=0.5)
    def on_gpu(t):
        start = time.time()
        time.sleep(t)
        return ember.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES"), start, time.time()

    a, b = ember.get([on_gpu.remote(1.0), on_gpu.remote(1.0)])
    assert a[0] == b[0] == [0] and a[1] == b[1] == "0"
    assert a[2] < b[3] and b[2] < a[3], "the two half-GPU tasks did not overlap"

    @ember.remote(num_cpus=2, num_gpus=0.5, max_retries=3)
    def gpu_task(batch):
        return [x * 2 for x in batch], ember.get_gpu_ids()

    assert ember.get(gpu_task.remote([1, 2])) == ([2, 4], [0])

    @ember.remote
    def no_gpu():
        return ember.get_gpu_ids(), os.environ.get("CUDA_VISIBLE_DEVICES")

    assert ember.get(no_gpu.remote()) == ([], "")


def test_custom_resources_and_cluster_queries(ray_start):
    @ember.remote(resources={"custom": 1})
    def uses_custom():
        return ember.get_runtime_context().get_assigned_resources()

    assert ember.get(uses_custom.remote()) == {"CPU": 1.0, "custom": 1.0}
    total = ember.cluster_resources()
    assert total["CPU"] == 2 and total["GPU"] == 1 and total["custom"] == 2
    assert total["object_store_memory"] == 256 * 2**20  # the store's capacity, as Ray reports it
    assert ember.available_resources()["object_store_memory"] == 256 * 2**20
    nodes = ember.nodes()
    assert nodes[0]["Resources"]["object_store_memory"] == 256 * 2**20
    assert len(nodes) == 1 and nodes[0]["Alive"] and nodes[0]["Resources"]["CPU"] == 2
    ctx = ember.get_runtime_context()
    assert ctx.get_job_id() and ctx.get_node_id() == nodes[0]["NodeID"] and ctx.get_task_id() is None


def test_large_values_go_through_shared_memory(ray_start):
    @ember.remote
    def make(n):
        return np.arange(n, dtype=np.int64)

    @ember.remote
    def total(a):
        return int(a.sum()), a.flags.writeable

    big = make.remote(2_000_000)  # 16 MB: returned through the object store
    arr = ember.get(big)
    assert arr.shape == (2_000_000,) and not arr.flags.writeable
    assert ember.get(total.remote(big)) == (int(np.arange(2_000_000).sum()), False)
    ref = ember.put(np.ones((1000, 1000)))
    assert ember.get(total.remote(ref))[0] == 1_000_000


def test_worker_output_reaches_driver(ray_start, capfd):
    @ember.remote
    def speak(token):
        print("token", token)
        return os.getpid()

    pid = ember.get(speak.remote("zebra-42"))
    deadline = time.time() + 10
    out = ""
    while time.time() < deadline:
        out += capfd.readouterr().out
        if "zebra-42" in out:
            break
        time.sleep(0.1)
    assert f"(speak pid={pid}" in out and "token zebra-42" in out


def test_bad_input_gives_clear_errors_and_cluster_keeps_working(ray_start):
    import threading

    @ember.remote
    def echo(x):
        return x

    with pytest.raises(TypeError, match="argument 0 of echo.*lock"):
        echo.remote(threading.Lock())
    with pytest.raises(ValueError, match="'num_cpu'"):
        echo.options(num_cpu=1)
    with pytest.raises(ValueError, match="num_gpus must be >= 0"):
        ember.remote(num_gpus=-1)(lambda: 1)
    with pytest.raises(ValueError, match="resource 'custom' must be >= 0"):
        echo.options(resources={"custom": -2})
    with pytest.raises(TypeError, match="cannot be called directly"):
        echo(1)
    with pytest.raises(ValueError, match="must either be an ObjectRef"):
        ember.get(1)
    assert ember.get(echo.remote(5)) == 5


def test_function_not_importable_on_worker(ray_start, tmp_path, monkeypatch):
    import importlib
    import sys

    mod_dir = tmp_path / "drv_only"
    mod_dir.mkdir()
    (mod_dir / "driver_only_mod.py").write_text("def f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(mod_dir))
    mod = importlib.import_module("driver_only_mod")
    rf = ember.remote(mod.f)
    # The module is importable here, but its file is gone before any worker looks for it.
    (mod_dir / "driver_only_mod.py").unlink()
    ref = rf.remote()
    with pytest.raises(ex.RayTaskError, match="driver_only_mod") as info:
        ember.get(ref, timeout=30)
    assert "importable" in str(info.value)
    sys.modules.pop("driver_only_mod", None)

    @ember.remote
    def still_fine():
        return "ok"

    assert ember.get(still_fine.remote()) == "ok"
