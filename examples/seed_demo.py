"""Runs the core code examples of the seed article (Ray: the distributed computing base of the
LLM era) on Ember: `import ember as ray` is the only change to the article's code,
plus one fix in section 3.3 (marked below) and small real stand-ins for its placeholder
functions (heavy_computation, split_data, inference, load_dataset, analyze, load_data, ...).

Sections: 2.3 GPU scheduling, 3.1 tasks (100 process_chunk tasks; gpu_task with
num_cpus=2, num_gpus=0.5, max_retries=3; two num_gpus=0.5 tasks sharing one GPU at once),
3.2 the ModelServer actor, 3.3 objects (one large array read by 10 tasks) and the round-robin
Worker actor pool, 6.2 pass by reference with ray.put and async actors awaiting each other,
6.4 the ray.wait loop; then the library sections, each a program of its own on a cluster of its
own, as a user would run them: 4.2 Ray Serve with a real causal LM (examples/serve_llm.py: two
replicas with one logical GPU each behind the HTTP proxy), 4.1 Train (examples/train_seed.py),
4.3 Data feeding Train (examples/data_pipeline.py), 4.4 Tune with 50 samples and ASHA
(examples/tune_seed.py) and 5.2 the LLM corpus pipeline (examples/data_llm_corpus.py). Every
section's result is checked; exit status 0 means all passed.

    .venv/bin/python examples/seed_demo.py
"""
from __future__ import annotations

import sys
import time

import numpy as np

import ember as ray


def check(cond: bool, what: str) -> None:
    """assert that also holds under `python -O`."""
    if not cond:
        raise AssertionError(what)


# --- stand-ins for the article's placeholder functions ------------------------------------

def heavy_computation(data_chunk):
    return sum(x * x for x in data_chunk)


def split_data(raw_data, num_chunks):
    size = -(-len(raw_data) // num_chunks)
    return [raw_data[i:i + size] for i in range(0, len(raw_data), size)]


def inference(batch):
    return [2 * x + 1 for x in batch]


class _Model:
    def train(self, data):
        return {"samples": len(data), "mean": float(np.mean(data))}


def load_model():
    return _Model()


def load_dataset():
    return np.arange(16 * 1024 * 1024, dtype=np.int64)  # 128 MiB (the article: "10GB")


def load_data():
    return np.ones(100 * 1024 * 1024 // 8, dtype=np.float64)  # 100 MiB, as in the article


def analyze(data, partition_id):
    return int(data[partition_id::100].sum())


# --- 2.3 scheduling: a whole-GPU task -------------------------------------------------------

@ray.remote(num_gpus=1)
def train_on_gpu(data):
    # 这个函数一定会被调度到有 GPU 的节点上
    model = load_model()
    return model.train(data)


def section_2_3():
    result = ray.get(train_on_gpu.remote([1, 2, 3, 4]))
    check(result == {"samples": 4, "mean": 2.5}, f"train_on_gpu returned {result}")
    print(f"2.3 scheduling: train_on_gpu(num_gpus=1) ran on the node with the GPU -> {result}")


# --- 3.1 Task ------------------------------------------------------------------------------

@ray.remote
def process_chunk(data_chunk):
    """处理一个数据分片——在集群中某个节点上运行"""
    result = heavy_computation(data_chunk)
    return result


@ray.remote(num_cpus=2, num_gpus=0.5, max_retries=3)
def gpu_task(batch):
    """使用 2 个 CPU 核心和半块 GPU，失败自动重试 3 次"""
    return inference(batch)


@ray.remote(num_gpus=0.5)
def half_gpu_task(seconds):
    """num_gpus=0.5: two of these share one GPU at the same time."""
    start = time.time()
    time.sleep(seconds)
    return ray.get_gpu_ids(), start, time.time()


def section_3_1():
    raw_data = list(range(100_000))
    # 提交 100 个并行任务
    chunks = split_data(raw_data, num_chunks=100)
    futures = [process_chunk.remote(chunk) for chunk in chunks]
    # 异步获取结果
    results = ray.get(futures)
    check(len(chunks) == 100 and len(results) == 100, "expected 100 tasks")
    check(sum(results) == heavy_computation(raw_data), "sum over chunks differs")
    print(f"3.1 tasks: 100 process_chunk tasks, sum of squares = {sum(results)}")

    out = ray.get(gpu_task.remote([1, 2, 3]))
    check(out == [3, 5, 7], f"gpu_task returned {out}")
    print(f"3.1 tasks: gpu_task(num_cpus=2, num_gpus=0.5, max_retries=3) -> {out}")

    (ids_a, start_a, end_a), (ids_b, start_b, end_b) = ray.get(
        [half_gpu_task.remote(2.0), half_gpu_task.remote(2.0)])
    check(ids_a == ids_b and len(ids_a) == 1, f"GPU ids {ids_a} and {ids_b}: not one shared GPU")
    overlap = min(end_a, end_b) - max(start_a, start_b)
    check(overlap > 0, f"the two num_gpus=0.5 tasks did not overlap ({overlap:.2f} s)")
    print(f"3.1 tasks: two num_gpus=0.5 tasks shared GPU {ids_a[0]} at the same time "
          f"(overlap {overlap:.2f} s)")


# --- 3.3 Object ----------------------------------------------------------------------------

# 多个 Task 共享同一份数据——零拷贝
@ray.remote
def process(data_ref, partition_id):
    # Fix: the article calls ray.get(data_ref) here, but a top-level ObjectRef argument is
    # already resolved to its value before the task runs (in Ray as in Ember), and ray.get()
    # of an ndarray raises. The value is read from the node's shared memory.
    data = data_ref  # 本地节点直接从共享内存读取
    return analyze(data, partition_id)


def section_3_3():
    # 显式放入 Object Store
    large_dataset = load_dataset()  # 假设 10GB
    dataset_ref = ray.put(large_dataset)
    # 10 个 Task 共享同一个 10GB 的数据对象
    futures = [process.remote(dataset_ref, i) for i in range(10)]
    results = ray.get(futures)
    check(results == [analyze(large_dataset, i) for i in range(10)], "analyze results differ")
    print(f"3.3 objects: one {large_dataset.nbytes >> 20} MiB array put once, read by 10 tasks")


# --- 6.2 pass large objects by reference ---------------------------------------------------

def section_6_2():
    large_data = load_data()  # 100MB
    t = time.perf_counter()
    # 正确：先 put 到 Object Store，传引用
    data_ref = ray.put(large_data)  # 只序列化 1 次
    futures = [process.remote(data_ref, i) for i in range(100)]
    # → 100 次传的只是 ObjectRef（几十字节）
    results = ray.get(futures)
    elapsed = time.perf_counter() - t
    check(results == [analyze(large_data, i) for i in range(100)], "analyze results differ")
    check(sum(results) == large_data.size, "partitions do not cover the data")
    print(f"6.2 pass by reference: {large_data.nbytes >> 20} MiB put once, 100 tasks got its "
          f"ObjectRef ({elapsed:.2f} s)")


# --- 6.4 ray.wait --------------------------------------------------------------------------

@ray.remote
def task(i):
    time.sleep(0.05 if i % 10 == 0 else 0.005)  # every 10th one is a straggler
    return i * i


def section_6_4():
    # ray.wait 渐进式处理——不必等最慢的任务
    remaining = [task.remote(i) for i in range(100)]
    results = []
    while remaining:
        done, remaining = ray.wait(remaining, num_returns=1)
        results.extend(ray.get(done))
    # 每完成一个就处理一个，不被 straggler 阻塞
    check(sorted(results) == [i * i for i in range(100)], "ray.wait loop lost results")
    print(f"6.4 ray.wait: processed 100 results one by one as they finished "
          f"(first ones: {results[:5]})")


# ---- 3.2 Actor: a stateful remote object (the article's ModelServer) -----------------------
@ray.remote(num_gpus=1)
class ModelServer:
    def __init__(self, model_path):
        self.model = lambda x: {"model": model_path, "echo": x}  # stand-in for load_model(path)
        self.request_count = 0

    def predict(self, input_data):
        self.request_count += 1
        return self.model(input_data)

    def get_stats(self):
        return {"total_requests": self.request_count}


def section_3_2():
    server = ModelServer.remote("/models/llama-7b")
    result = ray.get(server.predict.remote("hello"))
    stats = ray.get(server.get_stats.remote())
    check(result["echo"] == "hello" and stats == {"total_requests": 1}, "3.2 ModelServer state")
    print(f"3.2 actors: ModelServer(num_gpus=1) answered {result} and kept state {stats}")
    ray.kill(server)


# ---- 3.3 Three primitives together: a round-robin pool of Worker actors -------------------
def expensive_computation(item):
    return item * item


@ray.remote
class Worker:
    def __init__(self, worker_id):
        self.id = worker_id
        self.processed = 0

    def process(self, item):
        result = expensive_computation(item)
        self.processed += 1
        return result

    def count(self):
        return self.processed


def section_3_3_pool():
    work_items = list(range(40))
    workers = [Worker.remote(i) for i in range(4)]
    futures = []
    for i, item in enumerate(work_items):
        worker = workers[i % len(workers)]
        futures.append(worker.process.remote(item))
    results = ray.get(futures)
    counts = ray.get([w.count.remote() for w in workers])
    check(results == [x * x for x in work_items] and counts == [10] * 4, "3.3 worker pool")
    print(f"3.3 actors: 4 Worker actors, round-robin over 40 items, {counts} each")


# ---- 6.2 Actor deadlock pitfall: the safe async version --------------------------------------
@ray.remote
class B:
    async def method(self):
        return "from B"


@ray.remote
class A:
    def __init__(self, b):
        self.b = b

    async def method(self):
        return await self.b.method.remote()  # awaits without blocking the actor


def section_6_2_async():
    a = A.remote(B.remote())
    check(ray.get(a.method.remote(), timeout=30) == "from B", "6.2 async actors")
    print("6.2 actors: async actor A awaited actor B's call without deadlock")


def section_4_2_serve():
    import os
    import socket
    import subprocess

    with socket.socket() as s:  # a free port on loopback for the demo's HTTP proxy
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Run as a program of its own, as a user would (it starts its own cluster with 2 GPUs).
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_llm.py")
    subprocess.run([sys.executable, script, str(port)], check=True, timeout=300)
    print("4.2 serve: LLMService answered POST / through the proxy (2 replicas, 1 logical GPU each)")


LIBRARY_EXAMPLES = [  # (section, script, what its success means)
    ("4.1 train", "train_seed.py", "TorchTrainer: 2 DDP workers, loss fell, checkpoint restored"),
    ("4.3 data", "data_pipeline.py", "read_parquet(s3://) -> map -> filter -> shuffle -> TorchTrainer"),
    ("4.4 tune", "tune_seed.py", "Tuner: 50 samples, ASHA stopped the weak ones"),
    ("5.2 data", "data_llm_corpus.py", "corpus pipeline: language, MinHash dedup, quality, tokens"),
]


SECTIONS = [  # (what the section shows, its function), in the article's order of ideas
    ("2.3 scheduling: a task that asks for a whole GPU", section_2_3),
    ("3.1 tasks: 100 parallel tasks, fractional GPUs, retries", section_3_1),
    ("3.2 actors: a stateful ModelServer", section_3_2),
    ("3.3 objects: one large array in the object store, read by 10 tasks", section_3_3),
    ("3.3 actors: a round-robin pool of 4 Worker actors", section_3_3_pool),
    ("6.2 pass by reference: put once, 100 tasks read it", section_6_2),
    ("6.2 async actors awaiting each other", section_6_2_async),
    ("6.4 ray.wait: results one by one as they finish", section_6_4),
]


def announce(title: str) -> None:
    """The line that says what runs next (some sections take seconds)."""
    print(f"\n== {title}", flush=True)


def library_sections() -> None:
    import os
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    for name, script, what in LIBRARY_EXAMPLES:
        announce(f"{name}: examples/{script}, a program with a cluster of its own")
        t = time.perf_counter()
        subprocess.run([sys.executable, os.path.join(here, script)], check=True, timeout=600)
        print(f"{name}: {what} ({time.perf_counter() - t:.0f} s)")


def main() -> int:
    t0 = time.perf_counter()
    announce("starting an embedded cluster: 2 CPUs and 1 GPU. The GPUs in this demo are logical "
             "(declared with num_gpus=..., counted by the scheduler): no GPU is needed or used")
    ray.init(num_cpus=2, num_gpus=1)
    try:
        for title, section in SECTIONS:
            announce(title)
            section()
    finally:
        ray.shutdown()
    announce("4.2 serve: examples/serve_llm.py, a tiny causal LM behind the HTTP proxy")
    section_4_2_serve()
    library_sections()
    print(f"all {len(SECTIONS) + 1 + len(LIBRARY_EXAMPLES)} sections checked in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
