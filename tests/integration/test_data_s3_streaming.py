"""Ember Data against a real local S3 server (moto on loopback), the 4x-the-store streaming
run on a 256 MiB store, operator spans and progress bars."""
from __future__ import annotations

import io
import json
import threading
import time
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ember
from ember.data.testing import LocalS3Server

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def s3_cluster():
    with LocalS3Server() as s3:
        s3.create_bucket("corpus")
        ember.init(num_cpus=4, num_gpus=1, object_store_memory=256 * 2**20,
                   _metrics_export_port=19410)
        ember.data.DataContext.get_current().enable_progress_bars = False
        try:
            yield s3
        finally:
            ember.shutdown()


def test_s3_read_json_write_parquet_roundtrip(s3_cluster):
    fs = s3_cluster.filesystem()
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


def _store_used() -> float:
    try:
        text = urllib.request.urlopen("http://127.0.0.1:19411/metrics", timeout=5).read().decode()
    except OSError:
        return 0.0
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
               if ln.startswith("ember_object_store_used_bytes"))


def test_four_times_the_store_streams_within_budget(s3_cluster, tmp_path):
    src = tmp_path / "big"
    src.mkdir()
    rows = 2**20  # 8 columns x 8 bytes x 1 Mi rows = 64 MiB a file, 16 files = 1 GiB
    for i in range(16):
        cols = {f"c{k}": np.full(rows, i * 8 + k, dtype=np.int64) for k in range(8)}
        pq.write_table(pa.table(cols), src / f"p{i:02d}.parquet", row_group_size=rows // 8,
                       compression="none")
    budget = 128 * 2**20
    ctx = ember.data.DataContext.get_current()
    old = ctx.execution_options.resource_limits
    # the core does not report the store's capacity (cluster_resources has no
    # "object_store_memory"): give the budget, half of the 256 MiB store, as Ray's default
    ctx.execution_options.resource_limits = ember.data.ExecutionResources(object_store_memory=budget)
    peak, stop = [0.0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _store_used())
            stop.wait(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        ds = ember.data.read_parquet(str(src)).map_batches(
            lambda b: {"s": b["c0"] + b["c7"]}, num_cpus=0.5)  # not fused: blocks cross the store
        ds.write_parquet(str(tmp_path / "out"))
    finally:
        stop.set()
        th.join()
        ctx.execution_options.resource_limits = old
    n = sum(pq.read_metadata(p).num_rows for p in (tmp_path / "out").iterdir())
    assert n == 16 * rows
    print(f"peak object store use {peak[0] / 2**20:.1f} MiB (budget {budget / 2**20:.0f} MiB); "
          f"executor's own peak estimate {ds._last_stats.peak_budget_usage_bytes / 2**20:.1f} MiB")
    # the executor's accounting stays within the budget; the store itself is measured a little
    # above it (objects are freed asynchronously after the executor drops their refs), and far
    # below its capacity: no spilling, no ObjectStoreFullError
    assert ds._last_stats.peak_budget_usage_bytes <= budget * 1.25
    assert 0 < peak[0] <= 1.5 * budget < 256 * 2**20


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
