"""Pure tests of how Ember Data sizes blocks: compaction before the store, cutting a task's
output into target-size blocks, the in-memory size estimate of parquet files, ordered emission
of several blocks per task, and the heap estimate the budget uses."""
from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ember.data import block as B
from ember.data._internal.datasource.file_based import ParquetDatasource
from ember.data._internal.executor import target_block_bytes
from ember.data._internal.operators import RefBundle, RuntimeOp
from ember.data._internal.output_buffer import BlockOutputBuffer, split_rows
from ember.data._internal.stats import OpStats
from ember.data.block import BlockExecStats, BlockMetadata

MiB = 2**20


def _pickled_bytes(x: object) -> int:
    bufs: list = []
    data = pickle.dumps(x, protocol=5, buffer_callback=bufs.append)
    return len(data) + sum(b.raw().nbytes for b in bufs)


def _table(rows: int) -> pa.Table:
    return pa.table({"a": np.arange(rows, dtype=np.int64),
                     "s": pa.array([str(i) for i in range(rows)])})


def test_compact_copies_slices_so_the_store_holds_only_their_rows():
    t = _table(200_000)
    s = t.slice(1000, 100)
    assert _pickled_bytes(s) > 1 * MiB  # a slice pickles its parent's whole buffers
    c = B.compact(s)
    assert c.equals(s) and _pickled_bytes(c) < 4096
    two = pa.concat_tables([t.slice(0, 10), t.slice(50, 10)])
    c2 = B.compact(two)
    assert c2.equals(two) and c2.column(0).num_chunks == 1 and _pickled_bytes(c2) < 4096
    assert B.compact(t) is t  # nothing to do: no copy
    empty = B.compact(t.slice(5, 0))
    assert empty.num_rows == 0 and empty.schema == t.schema and _pickled_bytes(empty) < 4096


def test_compact_keeps_tensor_columns():
    t = pa.table({"x": B.column_to_arrow(np.arange(40.0).reshape(10, 4))})
    c = B.compact(t.slice(2, 3))
    assert np.array_equal(B.column_to_numpy(c.column("x")), np.arange(40.0).reshape(10, 4)[2:5])


def test_output_buffer_cuts_big_outputs_into_target_blocks():
    t = pa.table({"a": np.arange(1000, dtype=np.int64)})  # 8000 bytes
    buf = BlockOutputBuffer(target_max_bytes=1000)
    out = list(buf.add(t)) + list(buf.finish())
    assert [b.num_rows for b in out] == [125] * 8
    assert all(b.nbytes <= 1000 for b in out)
    assert pa.concat_tables(out).equals(t)


def test_output_buffer_coalesces_small_outputs_and_streams_full_blocks():
    buf = BlockOutputBuffer(target_max_bytes=800)  # 100 int64 rows
    got = []
    for i in range(7):
        got += [b.num_rows for b in buf.add(pa.table({"a": np.arange(i * 30, i * 30 + 30)}))]
        if i == 3:  # 120 rows seen: one block went out already, the rest waits
            assert sum(got) and sum(got) < 120
    got += [b.num_rows for b in buf.finish()]
    assert sum(got) == 210 and all(n <= 100 for n in got)
    assert len(got) <= 4


def test_output_buffer_keeps_the_schema_of_an_empty_output():
    buf = BlockOutputBuffer(10)
    assert list(buf.add(pa.table({"a": pa.array([], pa.int64())}))) == []
    out = list(buf.finish())
    assert len(out) == 1 and out[0].num_rows == 0 and out[0].column_names == ["a"]
    with pytest.raises(ValueError):
        BlockOutputBuffer(0)


def test_split_rows_and_target_block_bytes():
    assert split_rows(10, 100, 100) == [10]
    assert split_rows(10, 101, 100) == [5, 5]
    assert split_rows(3, 10_000, 1) == [1, 1, 1]
    assert split_rows(0, 0, 5) == []
    assert target_block_bytes(128 * MiB, 128 * MiB, 1 * MiB) == 8 * MiB  # budget / 16
    assert target_block_bytes(64 * 2**30, 128 * MiB, 1 * MiB) == 128 * MiB  # the context's max
    assert target_block_bytes(4 * MiB, 128 * MiB, 1 * MiB) == 1 * MiB  # not below the min


def test_parquet_estimate_counts_memory_not_encoded_pages(tmp_path):
    rows = 2**16
    cols = {f"c{k}": np.full(rows, k, dtype=np.int64) for k in range(4)}
    cols["s"] = pa.array([f"row-{i % 7}" for i in range(rows)])
    t = pa.table(cols)
    for i in range(3):
        pq.write_table(t, tmp_path / f"p{i}.parquet", row_group_size=rows // 4, compression="none")
    md = pq.read_metadata(tmp_path / "p0.parquet")
    on_disk = sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    assert on_disk * 50 < t.nbytes  # dictionary/RLE pages: the footer says almost nothing
    ds = ParquetDatasource(str(tmp_path))
    est = ds.estimate_inmemory_data_size()
    assert 0.9 * 3 * t.nbytes <= est <= 1.2 * 3 * t.nbytes
    tasks = ds.get_read_tasks(12, columns=["c0"])
    assert len(tasks) == 12
    assert all(0.9 * rows // 4 * 8 <= rt.est_size_bytes <= 1.2 * rows // 4 * 8 for rt in tasks)


def _bundle(name: str) -> RefBundle:
    return RefBundle(name, BlockMetadata(1, 1))


def test_ordered_emission_of_several_blocks_per_task():
    op = RuntimeOp("Map", 1)
    op.emit_block(1, _bundle("b1-0"), ordered=True)
    op.emit_block(0, _bundle("b0-0"), ordered=True)  # task 0's blocks go out as they come
    op.emit_block(2, _bundle("b2-0"), ordered=True)
    op.emit_block(0, _bundle("b0-1"), ordered=True)
    assert [b.ref for b in op.outqueue] == ["b0-0", "b0-1"]
    op.finish_index(2, ordered=True)
    op.emit_block(1, _bundle("b1-1"), ordered=True)
    op.finish_index(0, ordered=True)  # task 1's waiting blocks follow
    assert [b.ref for b in op.outqueue] == ["b0-0", "b0-1", "b1-0", "b1-1"]
    op.finish_index(1, ordered=True)  # then task 2's, which was done already
    assert [b.ref for b in op.outqueue][-1] == "b2-0" and not op._reorder
    unordered = RuntimeOp("Map", 1)
    unordered.emit_block(3, _bundle("x"), ordered=False)
    assert [b.ref for b in unordered.outqueue] == ["x"]


def test_heap_estimate_is_the_median_of_recent_tasks():
    s = OpStats("Map")
    assert s.est_heap_bytes(5) == 5  # before any task: the input size
    # the first task of a fresh worker pays for imports and allocator pages
    for heap in [40 * MiB, 0, 1 * MiB, 0, 2 * MiB]:
        s.on_task_done(10, BlockMetadata(1, 10, exec_stats=BlockExecStats(0, 0, heap)))
    assert s.est_heap_bytes(5) == 1 * MiB
    assert s.max_heap_bytes == 40 * MiB  # stats() still shows the largest


def test_an_operator_counts_its_tasks_by_output_not_produced_yet():
    from ember.data._internal.operators import Call

    op = RuntimeOp("Map", 1)
    c = Call(fn=None, args=(), on_done=lambda refs, meta: None, input_bytes=100)
    op.stats.on_task_done(100, BlockMetadata(1, 50, exec_stats=BlockExecStats(0, 0, 7)))
    c.expected_bytes = op.expected_output(c)
    assert c.expected_bytes == 50  # half its input, as the tasks before it
    c.produced_bytes = 20  # two fifths of it streamed out already
    op.running[1] = c
    op.in_flight = 1
    assert op.view().pending_bytes == 30 + 7
    c.produced_bytes = 80  # more than expected: nothing more is counted in advance
    assert op.view().pending_bytes == 7
