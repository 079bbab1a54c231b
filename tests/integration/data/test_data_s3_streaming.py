"""Ember Data against a real local S3 server (moto on loopback), the 4x-the-store streaming
run on a 256 MiB store, operator spans and progress bars."""
from __future__ import annotations

import io
import json
import socket
import threading
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ember
from ember.data.testing import LocalS3Server

pytestmark = pytest.mark.timeout(600)


def _free_port_run(n: int) -> int:
    """A port p with p..p+n-1 free on loopback (raylet, object manager, GCS metrics)."""
    for _ in range(50):
        with socket.socket() as s0:
            s0.bind(("127.0.0.1", 0))
            base = s0.getsockname()[1]
        if base + n >= 65535:
            continue
        try:
            held = []
            for k in range(n):
                sk = socket.socket()
                held.append(sk)
                sk.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for sk in held:
                sk.close()
    raise RuntimeError("no run of free ports")


@pytest.fixture(scope="module")
def s3_cluster():
    port = _free_port_run(3)
    with LocalS3Server() as s3:
        s3.create_bucket("corpus")
        ember.init(num_cpus=4, num_gpus=1, object_store_memory=256 * 2**20,
                   _metrics_export_port=port)
        ember.data.DataContext.get_current().enable_progress_bars = False
        try:
            yield s3, port + 1  # the object manager's metrics endpoint
        finally:
            ember.shutdown()


def test_s3_read_json_write_parquet_roundtrip(s3_cluster):
    fs = s3_cluster[0].filesystem()
    for i in range(3):
        with fs.open_output_stream(f"corpus/raw/p{i}.jsonl") as f:
            f.write("\n".join(json.dumps({"id": i * 10 + j, "text": "文本" * j}) for j in range(10)).encode())
    ds = ember.data.read_json("s3://corpus/raw/")
    assert ds.count() == 30
    ds.map_batches(lambda b: {"id": b["id"], "n": np.array([len(t) for t in b["text"]])}) \
        .write_parquet("s3://corpus/processed/")
    back = ember.data.read_parquet("s3://corpus/processed/").take_all()
    assert sorted(r["id"] for r in back) == list(range(30))
    assert all(r["n"] == 2 * (r["id"] % 10) for r in back)
    with pytest.raises(FileNotFoundError, match="s3://corpus/nothing"):
        ember.data.read_parquet("s3://corpus/nothing/")


def _store_used(port: int) -> float:
    """The object manager's live arena use (its `ember_object_store_used_bytes` gauge)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
               if ln.startswith("ember_object_store_used_bytes"))


class _PeakSampler:
    """Samples the store's use every 10 ms in a thread; `.peak` is the largest value seen."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.peak = 0.0
        self.samples = 0
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _store_used(self.port))
            self.samples += 1
            self._stop.wait(0.01)

    def __enter__(self) -> _PeakSampler:
        self._th.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._th.join()


def _write_constant_parquet(d, files: int, rows: int, row_groups: int) -> None:
    """Files of 8 int64 columns of constant values: a few KiB on disk (dictionary/RLE pages),
    64 bytes a row in memory — the footer's sizes say nothing of the in-memory size."""
    d.mkdir()
    for i in range(files):
        cols = {f"c{k}": np.full(rows, i * 8 + k, dtype=np.int64) for k in range(8)}
        pq.write_table(pa.table(cols), d / f"p{i:02d}.parquet", row_group_size=rows // row_groups,
                       compression="none")


def test_four_times_the_store_streams_within_budget(s3_cluster, tmp_path):
    _s3, port = s3_cluster
    assert ember.cluster_resources()["object_store_memory"] == 256 * 2**20
    src = tmp_path / "big"
    rows = 2**20  # 8 columns x 8 bytes x 1 Mi rows = 64 MiB a file, 16 files = 1 GiB
    _write_constant_parquet(src, 16, rows, 8)
    budget = 128 * 2**20  # half the store, from cluster_resources(): nothing set by hand
    assert _store_used(port) < 8 * 2**20
    with _PeakSampler(port) as sampler:
        ds = ember.data.read_parquet(str(src)).map_batches(
            lambda b: {"s": b["c0"] + b["c7"]}, num_cpus=0.5)  # not fused: blocks cross the store
        ds.write_parquet(str(tmp_path / "out"))
    out = sorted((tmp_path / "out").iterdir())
    n = sum(pq.read_metadata(p).num_rows for p in out)
    assert n == 16 * rows
    st = ds._last_stats
    read = st.ops[0]
    print(f"peak object store use {sampler.peak / 2**20:.1f} MiB over {sampler.samples} samples "
          f"(budget {budget / 2**20:.0f} MiB, store 256 MiB); executor's own peak "
          f"{st.peak_budget_usage_bytes / 2**20:.1f} MiB; {read.blocks_out} read blocks of "
          f"{read.bytes_out / max(1, read.blocks_out) / 2**20:.1f} MiB on average")
    assert st.budget_bytes == budget
    assert read.bytes_out >= 16 * rows * 64  # the dataset really went through the store: 1 GiB
    assert read.blocks_out >= 128  # blocks of at most budget / 16 = 8 MiB
    assert sampler.samples > 20
    assert 0 < sampler.peak <= budget


def test_a_read_task_cuts_its_output_into_target_blocks(s3_cluster, tmp_path):
    """One read task over a 32 MiB row group yields blocks of at most budget / 16 as it goes."""
    _s3, port = s3_cluster
    src = tmp_path / "one"
    _write_constant_parquet(src, 1, 2**19, 1)
    ds = ember.data.read_parquet(str(src), override_num_blocks=1)
    refs = ds.to_arrow_refs()
    sizes = [ember.get(r).nbytes for r in refs]
    assert sum(sizes) == 2**19 * 64
    assert len(refs) >= 4 and max(sizes) <= 8 * 2**20
    assert ds._last_stats.ops[0].tasks_done == 1
    del refs


def test_operator_spans_and_progress_bars(s3_cluster, tmp_path):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exp = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    from ember.data._internal import executor as ex_mod
    from ember.data._internal.progress import ProgressBars

    real_get = trace.get_tracer
    ex_mod_trace = __import__("opentelemetry.trace", fromlist=["get_tracer"])
    ex_mod_trace.get_tracer = lambda name, *a, **k: provider.get_tracer(name)
    try:
        ember.data.range(100, override_num_blocks=4).map_batches(lambda b: b).random_shuffle().take_all()
    finally:
        ex_mod_trace.get_tracer = real_get
    names = [s.name for s in exp.get_finished_spans()]
    assert "ember.data operator ReadRange->MapBatches(<lambda>)" in names
    assert "ember.data operator RandomShuffle" in names
    root = [s for s in exp.get_finished_spans() if s.name.startswith("ember.data execute")][0]
    ops = [s for s in exp.get_finished_spans() if s.name.startswith("ember.data operator")]
    assert all(s.parent.span_id == root.context.span_id for s in ops)
    assert {s.attributes["ember.data.rows"] for s in ops} == {100}
    assert ex_mod is not None

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    bars = ProgressBars(["ReadRange", "Map(f)"], enabled=True, stream=out, interval_s=0)
    bars.update([10, 5], [100, None], [False, False])
    bars.close([100, 100], [100, 100])
    text = out.getvalue()
    assert "ReadRange:  10%" in text and "Map(f): 5/?" in text and "100%" in text
    quiet = io.StringIO()
    ProgressBars(["x"], enabled=True, stream=quiet).update([1], [2], [False], force=True)
    assert quiet.getvalue() == ""  # not a TTY: nothing
