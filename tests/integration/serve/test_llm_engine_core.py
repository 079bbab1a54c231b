"""The torch engine with its step loop in an engine-core child process (core_client.py,
engine_core.py), on the tiny model, without a cluster: the same tokens as the in-thread engine,
16 concurrent streams, a consumer leaving frees its slot, a core crash fails the requests in
flight with a clear error (no hang) and makes the engine unhealthy, a load error is named, and
neither shutdown nor a SIGKILLed parent leaves a core process behind.

In the integration tier for its weight (torch, a model, a child process), like
test_llm_engine.py."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch", reason="the llm extra (torch, transformers) is not installed")
psutil = pytest.importorskip("psutil")

from llm_streams import stream_request  # noqa: E402

from ember.serve.llm._internal.core_client import EngineCoreClient  # noqa: E402
from ember.serve.llm._internal.engine import GenerationRequest  # noqa: E402
from ember.serve.llm._internal.engine_core import MARKER  # noqa: E402
from ember.serve.llm._internal.params import SamplingParams  # noqa: E402
from ember.serve.llm._internal.torch_engine import TorchEngine  # noqa: E402
from ember.serve.llm.testing import build_tiny_model  # noqa: E402
from ember.testing import process_gone, wait_for  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny") / "llama"))


@pytest.fixture(scope="module")
def core(model_dir):
    e = EngineCoreClient("tiny", model_dir, {"max_num_seqs": 16})
    e.start()
    yield e
    e.shutdown()


async def _collect(engine, rid, ids, started: asyncio.Event | None = None, **params):
    """(text, output tokens, finish reason) of one request (llm_streams.stream_request)."""
    r = await stream_request(engine, rid, ids, started, **params)
    return r["text"], r["tokens"], r["reason"]


def test_core_streams_the_in_thread_engines_tokens(core, model_dir):
    proc = psutil.Process(core.core_pid)
    assert MARKER in proc.cmdline() and proc.ppid() == os.getpid()
    ids = core.encode("Hello world")
    assert core.max_model_len == 1024
    local = TorchEngine("tiny", model_dir, {"engine_process": False})
    local.start()
    try:
        want = asyncio.run(_collect(local, "w", ids, max_tokens=20, temperature=0))
        seeded = asyncio.run(_collect(local, "s", ids, max_tokens=20, temperature=1.0, seed=4))
    finally:
        local.shutdown()
    assert asyncio.run(_collect(core, "a", ids, max_tokens=20, temperature=0)) == want
    assert asyncio.run(_collect(core, "b", ids, max_tokens=20, temperature=1.0, seed=4)) == seeded
    before = core.stats().generated_tokens

    async def many():
        return await asyncio.gather(*[_collect(core, f"m{i}", ids, max_tokens=48, temperature=0.8, seed=i,
                                               ignore_eos=True) for i in range(16)])

    outs = asyncio.run(many())  # (a new event loop: the reader moves to it)
    assert all(n == 48 and r == "length" for _, n, r in outs)
    assert core.stats().generated_tokens - before == 16 * 48

    async def pushed():
        got, done = [], asyncio.Event()

        def cb(item):
            got.append(item)
            if isinstance(item, BaseException) or item.finish_reason:
                done.set()

        core.submit(GenerationRequest("p", ids, SamplingParams(max_tokens=20, temperature=0)), cb)
        await asyncio.wait_for(done.wait(), 30)
        return "".join(d.text for d in got), got[-1].finish_reason

    assert asyncio.run(pushed()) == (want[0], "length")


def test_core_mixed_steps_keep_greedy_outputs_and_report_counters(core, model_dir):
    """Greedy requests of different prompt lengths joining the core's running batch one after
    another (mixed steps) give the texts they give alone; the step counters cross the wire."""
    texts = ("Tell me a story about a small robot", "Hello", "One two three four five six seven eight nine",
             "The quick brown fox")
    prompts = [core.encode(t) for t in texts]
    local = TorchEngine("tiny", model_dir, {"engine_process": False})
    local.start()
    try:
        want = [asyncio.run(_collect(local, f"w{i}", ids, max_tokens=24, temperature=0, ignore_eos=True))
                for i, ids in enumerate(prompts)]
    finally:
        local.shutdown()
    before = core.stats()

    async def staggered():
        # Each request joins once the one before it is running (two tokens out, 22 to go), so
        # every newcomer meets a running batch however fast or slow the steps are (a fixed
        # 30 ms stagger let each request finish before the next came when steps took ~1 ms).
        started = [asyncio.Event() for _ in range(2 * len(prompts))]

        async def one(i, ids):
            if i:
                await started[i - 1].wait()
            return await _collect(core, f"j{i}", ids, started[i], max_tokens=24, temperature=0, ignore_eos=True)
        return await asyncio.gather(*[one(i, ids) for i, ids in enumerate(prompts * 2)])

    assert asyncio.run(staggered()) == want * 2
    st = core.stats()
    assert st.num_mixed > before.num_mixed and st.mixed_s > before.mixed_s
    assert st.prefill_rows - before.prefill_rows == 8 and st.decode_rows - before.decode_rows == 8 * 23
    assert st.step_s > before.step_s and st.idle_s >= before.idle_s


def test_refusals_are_checked_before_the_core(core):
    async def go():
        with pytest.raises(ValueError, match="context is 1024 tokens"):
            async for _ in core.generate(GenerationRequest("long", [5] * 1024, SamplingParams())):
                pass
        gen = core.generate(GenerationRequest("dup", [5, 6], SamplingParams(max_tokens=500, ignore_eos=True)))
        await gen.__anext__()
        with pytest.raises(ValueError, match="already running"):
            async for _ in core.generate(GenerationRequest("dup", [5, 6], SamplingParams())):
                pass
        await gen.aclose()

    asyncio.run(go())


def test_consumer_leaving_frees_the_slot(core):
    ids = core.encode("Hello world")

    async def go():
        gen = core.generate(GenerationRequest("leave", ids, SamplingParams(max_tokens=900, ignore_eos=True)))
        await gen.__anext__()
        for _ in range(200):
            if core.stats().running == 1:
                break
            await asyncio.sleep(0.01)
        assert core.stats().running == 1
        await gen.aclose()  # what a client disconnect does through LLMServer
        core.submit(GenerationRequest("gone", ids, SamplingParams(max_tokens=900, ignore_eos=True)), lambda _: None)
        await asyncio.sleep(0.05)
        core.cancel("gone")
        for _ in range(300):
            if core.stats().running == 0 and core.stats().kv_cache_usage == 0.0:
                return True
            await asyncio.sleep(0.01)
        return False

    assert asyncio.run(go())


def test_load_error_is_named(model_dir):
    e = EngineCoreClient("tiny", model_dir, {"max_model_len": 99999})
    with pytest.raises(RuntimeError, match="could not load.*max_model_len=99999 exceeds"):
        e.start()
    assert e.core_pid is not None and process_gone(e.core_pid)
    with pytest.raises(ValueError, match="unknown engine_kwargs.*max_batch"):
        EngineCoreClient("tiny", model_dir, {"max_batch": 3})


def test_core_crash_fails_requests_and_the_health_check(model_dir):
    e = EngineCoreClient("tiny", model_dir, {"max_num_seqs": 4})
    e.start()
    ids = e.encode("Hello world")

    async def go():
        gen = e.generate(GenerationRequest("long", ids, SamplingParams(max_tokens=1000, ignore_eos=True)))
        await gen.__anext__()
        os.kill(e.core_pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"engine core process \(pid \d+\) exited with code -9"):
            async for _ in gen:
                pass
        assert time.monotonic() - t0 < 10
        with pytest.raises(RuntimeError, match="engine failed"):
            await e.check_health()
        with pytest.raises(RuntimeError, match="engine failed"):  # refused at once, no hang
            await asyncio.wait_for(_collect(e, "after", ids, max_tokens=2), 5)

    try:
        asyncio.run(go())
    finally:
        e.shutdown()


def test_shutdown_leaves_no_core(model_dir):
    e = EngineCoreClient("tiny", model_dir, {})
    e.start()
    pid = e.core_pid
    assert asyncio.run(_collect(e, "x", e.encode("hi"), max_tokens=3))[1] == 3
    e.shutdown()
    assert e._proc is not None and e._proc.returncode == 0 and process_gone(pid)


_PARENT = r"""
import sys, time
from ember.serve.llm._internal.core_client import EngineCoreClient
e = EngineCoreClient("tiny", sys.argv[1], {})
e.start()
print(e.core_pid, flush=True)
time.sleep(120)
"""


def test_a_killed_parent_leaves_no_orphan(model_dir):
    """The replica SIGKILLed (no shutdown, no atexit): the core sees EOF on its socket and exits."""
    p = subprocess.Popen([sys.executable, "-c", _PARENT, model_dir], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        pid = int(p.stdout.readline())
        assert not process_gone(pid)
        p.kill()
        p.wait(10)
        wait_for(lambda: process_gone(pid), timeout_s=15, what="the engine core to exit after its parent was killed")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        assert p.stdout is not None
        p.stdout.close()


_HIGH_FD = r"""
import asyncio, os, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # a busy replica's fds
from ember.serve.llm._internal.core_client import EngineCoreClient
from ember.serve.llm._internal.engine import GenerationRequest
from ember.serve.llm._internal.params import SamplingParams
e = EngineCoreClient("tiny", sys.argv[1], {})
e.start()
assert e._sock.fileno() > 1024, e._sock.fileno()

async def go():
    n = 0
    async for ds in e.generate(GenerationRequest("x", e.encode("hi"), SamplingParams(max_tokens=3))):
        n = ds[-1].num_output_tokens
    return n

print("TOKENS", asyncio.run(go()), flush=True)
e.shutdown()
"""


def test_core_serves_on_a_descriptor_above_fd_setsize(model_dir):
    """The replica's end and the core's inherited end are numbered above 1024 (select() would fail)."""
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1300:
        pytest.skip("the hard limit on open files is below 1300 here")
    p = subprocess.run([sys.executable, "-c", _HIGH_FD, model_dir], capture_output=True, text=True, timeout=120)
    assert "TOKENS 3" in p.stdout, p.stderr[-2000:]


def test_stats_frame_holds_the_fields_in_order():
    """The core's stats tuple (each frame's second half) is EngineStats's fields in order, so the
    replica's EngineStats(*tuple) rebuilds them."""
    import dataclasses

    from ember.serve.llm._internal.engine import EngineStats
    from ember.serve.llm._internal.engine_core import EngineCore

    core = EngineCore.__new__(EngineCore)
    core._stats = EngineStats(running=3, waiting=1, kv_cache_usage=0.5, generated_tokens=70, decode_s=1.25,
                              slot_refills=4, slot_wait_s=0.01)
    assert core._stats_tuple() == dataclasses.astuple(core._stats)
    assert EngineStats(*core._stats_tuple()) == core._stats
