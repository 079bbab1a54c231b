"""Ray Data's write and read options on a real embedded cluster with real files: save modes,
min_rows_per_file, filename providers, writer arguments, and parameters Ember does not
implement raising instead of being dropped."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import ember

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(data_cluster):
    return data_cluster


def _files(d):
    return sorted(f for f in os.listdir(d) if not f.startswith("."))


def test_save_modes_as_ray(cluster, tmp_path):
    out = str(tmp_path / "out")
    ember.data.range(10, override_num_blocks=2).write_parquet(out)
    first = _files(out)
    assert len(first) == 2
    ember.data.range(5, override_num_blocks=1).write_parquet(out, mode="append")
    assert len(_files(out)) == 3 and pq.read_table(out).num_rows == 15
    with pytest.raises(ValueError, match="already exists.*mode='ignore'"):
        ember.data.range(5).write_parquet(out, mode="error")
    ember.data.range(7).write_parquet(out, mode="ignore")
    assert pq.read_table(out).num_rows == 15
    ember.data.range(4, override_num_blocks=1).write_csv(out, mode="overwrite")
    assert len(_files(out)) == 1 and _files(out)[0].endswith(".csv")
    new = str(tmp_path / "fresh")
    ember.data.range(3).write_json(new, mode="error")  # a missing path is written
    assert sum(len((tmp_path / "fresh" / f).read_text().splitlines()) for f in _files(new)) == 3
    with pytest.raises(ValueError, match="mode must be one of"):
        ember.data.range(3).write_json(new, mode="replace")


def test_min_rows_per_file_and_filename_provider(cluster, tmp_path):
    out = tmp_path / "m"
    ember.data.range(1000, override_num_blocks=20).write_parquet(str(out), min_rows_per_file=300)
    sizes = sorted(pq.read_metadata(out / f).num_rows for f in _files(out))
    assert sum(sizes) == 1000 and len(sizes) == 3 and min(sizes) >= 300

    class Names:
        def get_filename_for_block(self, block, write_uuid, task_index, block_index):
            return f"part-{task_index:03}-{block.num_rows}.csv"

    ember.data.range(40, override_num_blocks=4).write_csv(str(tmp_path / "n"),
                                                          filename_provider=Names())
    assert _files(tmp_path / "n") == [f"part-{i:03}-10.csv" for i in range(4)]
    with pytest.raises(TypeError, match="get_filename_for_block"):
        ember.data.range(4).write_csv(str(tmp_path / "bad"), filename_provider=object())


def test_writer_arguments_are_passed_not_dropped(cluster, tmp_path):
    ds = ember.data.from_items([{"a": i, "b": f"s{i}"} for i in range(6)], override_num_blocks=1)
    ds.write_parquet(str(tmp_path / "p"), compression="gzip",
                     arrow_parquet_args_fn=lambda: {"use_dictionary": False})
    (f,) = _files(tmp_path / "p")
    assert pq.read_metadata(tmp_path / "p" / f).row_group(0).column(0).compression == "GZIP"
    ds.write_csv(str(tmp_path / "c"), write_options=pcsv.WriteOptions(delimiter="|"))
    (f,) = _files(tmp_path / "c")
    assert (tmp_path / "c" / f).read_text().splitlines()[0] == '"a"|"b"'
    ds.write_json(str(tmp_path / "j"), orient="records", lines=True, double_precision=3)
    (f,) = _files(tmp_path / "j")
    assert json.loads((tmp_path / "j" / f).read_text().splitlines()[0]) == {"a": 0, "b": "s0"}


def test_unknown_and_unimplemented_parameters_raise(cluster, tmp_path):
    ds = ember.data.range(3)
    with pytest.raises(TypeError, match="bogus"):
        ds.write_parquet(str(tmp_path / "a"), bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        ds.write_csv(str(tmp_path / "b"), bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        ds.write_json(str(tmp_path / "c"), bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        ds.write_numpy(str(tmp_path / "d"), column="id", bogus=1)
    with pytest.raises(ValueError, match="max_rows_per_file"):
        ds.write_parquet(str(tmp_path / "e"), max_rows_per_file=10)
    (tmp_path / "t.txt").write_text("x\n")
    np.save(tmp_path / "n.npy", np.arange(3))
    (tmp_path / "c.csv").write_text("a\n1\n")
    for call, name in [
        (lambda: ember.data.read_text(str(tmp_path / "t.txt"), bogus=1), "bogus"),
        (lambda: ember.data.read_binary_files(str(tmp_path / "t.txt"), bogus=1), "bogus"),
        (lambda: ember.data.read_numpy(str(tmp_path / "n.npy"), bogus=1), "bogus"),
        (lambda: ember.data.read_csv(str(tmp_path / "c.csv"), bogus=1), "bogus"),
        (lambda: ember.data.read_parquet(str(tmp_path / "a"), tensor_column_schema={}),
         "tensor_column_schema"),
        (lambda: ember.data.read_csv(str(tmp_path / "c.csv"), partition_filter=lambda p: True),
         "partition_filter"),
        (lambda: ember.data.read_text(str(tmp_path / "t.txt"), meta_provider=object()),
         "meta_provider"),
    ]:
        with pytest.raises((TypeError, ValueError), match=name):
            call()


def test_read_options_are_honoured(cluster, tmp_path):
    (tmp_path / "c.csv").write_text("a;b\n1;x\n2;y\n")
    ds = ember.data.read_csv(str(tmp_path / "c.csv"),
                             parse_options=pcsv.ParseOptions(delimiter=";"))
    assert ds.take_all() == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]
    np.save(tmp_path / "o.npy", np.array([{"k": 1}, {"k": 2}], dtype=object), allow_pickle=True)
    assert [r["data"] for r in ember.data.read_numpy(str(tmp_path / "o.npy"),
                                                     allow_pickle=True).take_all()] == \
        [{"k": 1}, {"k": 2}]
    (tmp_path / "t.txt.gz").write_bytes(__import__("gzip").compress(b"a\nb\n"))
    assert ember.data.read_text(str(tmp_path / "t.txt.gz"),
                                arrow_open_stream_args={"buffer_size": 4096}).take_all() == \
        [{"text": "a"}, {"text": "b"}]
    with pytest.raises(TypeError, match="buffer_sz"):
        ember.data.read_text(str(tmp_path / "t.txt.gz"),
                             arrow_open_stream_args={"buffer_sz": 1}).take_all()


class RangeSquaresDatasource(ember.data.Datasource):
    """A user-defined source: rows (i, i*i) for i < n, cut into `parallelism` read tasks."""

    def __init__(self, n):
        self.n = n

    def estimate_inmemory_data_size(self):
        return self.n * 16

    def get_read_tasks(self, parallelism):
        import pandas as pd

        from ember.data.block import BlockMetadata

        bounds = np.linspace(0, self.n, parallelism + 1).astype(int)
        tasks = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            def read(a=a, b=b):  # one Arrow block and one pandas block per task
                mid = (a + b) // 2
                ids = np.arange(a, mid)
                yield pa.table({"i": ids, "sq": ids * ids})
                rest = np.arange(mid, b)
                yield pd.DataFrame({"i": rest, "sq": rest * rest})
            tasks.append(ember.data.ReadTask(read, BlockMetadata(
                num_rows=int(b - a), size_bytes=int(b - a) * 16, input_files=None,
                exec_stats=None)))
        return tasks


class CollectingDatasink(ember.data.Datasink):
    """A user-defined sink: each task writes one JSON file of its rows and returns its row
    count and task index; the driver hooks record what they were given."""

    def __init__(self, directory, fail_on=None):
        self.dir = directory
        self.fail_on = fail_on
        self.events = []

    def on_write_start(self):
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "_started"), "w") as f:
            f.write("1")

    def write(self, blocks, ctx):
        rows = [r for b in blocks for r in b.to_pylist()]
        if self.fail_on is not None and any(r.get("id") == self.fail_on for r in rows):
            raise RuntimeError(f"row {self.fail_on} refused")
        with open(os.path.join(self.dir, f"task-{ctx.task_idx}.json"), "w") as f:
            json.dump(rows, f)
        return {"rows": len(rows), "task": ctx.task_idx}

    def on_write_complete(self, write_result):
        self.events.append(("complete", write_result.num_rows, write_result.size_bytes > 0,
                            sorted(r["task"] for r in write_result.write_returns),
                            sum(r["rows"] for r in write_result.write_returns)))

    def on_write_failed(self, error):
        self.events.append(("failed", isinstance(error, RuntimeError)))


def test_user_datasource_reads_through_the_executor(cluster):
    ds = ember.data.read_datasource(RangeSquaresDatasource(100), override_num_blocks=4)
    assert repr(ds) == "Dataset(num_rows=?, schema={i: int64, sq: int64})"
    assert ds.count() == 100
    rows = ds.map(lambda r: {"i": r["i"], "ok": r["sq"] == r["i"] ** 2}).take_all()
    assert sorted(r["i"] for r in rows) == list(range(100)) and all(r["ok"] for r in rows)
    assert repr(ds.map_batches(lambda b: b)) .startswith("MapBatches(<lambda>)\n+- Dataset(")
    with pytest.raises(TypeError, match="expects an ember.data.Datasource"):
        ember.data.read_datasource(object())
    with pytest.raises(TypeError, match="create_reader"):
        ember.data.read_datasource(RangeSquaresDatasource(3), path="x")

    class Bad(ember.data.Datasource):
        def estimate_inmemory_data_size(self):
            return None

        def get_read_tasks(self, parallelism):
            return [lambda: []]

    with pytest.raises(TypeError, match="must return ReadTasks"):
        ember.data.read_datasource(Bad()).take_all()


def test_user_datasink_hooks_and_task_context(cluster, tmp_path):
    sink = CollectingDatasink(str(tmp_path / "s"))
    ds = ember.data.read_datasource(RangeSquaresDatasource(60), override_num_blocks=3)
    ds.write_datasink(sink)
    # the sink was pickled to the tasks; the driver's copy got on_write_complete
    assert sink.events == [("complete", 60, True, [0, 1, 2], 60)]
    written = sorted(f for f in os.listdir(tmp_path / "s"))
    assert written == ["_started", "task-0.json", "task-1.json", "task-2.json"]
    got = sorted(r["i"] for f in written[1:]
                 for r in json.loads((tmp_path / "s" / f).read_text()))
    assert got == list(range(60))

    failing = CollectingDatasink(str(tmp_path / "f"), fail_on=7)
    with pytest.raises(RuntimeError, match="row 7 refused"):
        ember.data.range(20, override_num_blocks=2).write_datasink(failing)
    assert failing.events == [("failed", True)]  # the task's error, as raised after
    with pytest.raises(TypeError, match="expects an ember.data.Datasink"):
        ember.data.range(2).write_datasink(object())


def test_datasink_min_rows_per_write(cluster, tmp_path):
    class Batched(CollectingDatasink):
        @property
        def min_rows_per_write(self):
            return 25

    sink = Batched(str(tmp_path / "b"))
    ember.data.range(100, override_num_blocks=10).write_datasink(sink)
    (_, n, _, tasks, total) = sink.events[0]
    assert n == total == 100 and len(tasks) == 4


def _sqlite_db(path, n):
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE movies (id INTEGER, title TEXT, score REAL)")
    conn.executemany("INSERT INTO movies VALUES (?, ?, ?)",
                     [(i, f"m{i}", i / 10) for i in range(n)])
    conn.commit()
    conn.close()


def test_read_sql_sqlite(cluster, tmp_path):
    import functools
    import sqlite3

    db = str(tmp_path / "movies.db")
    _sqlite_db(db, 500)
    factory = functools.partial(sqlite3.connect, db)
    ds = ember.data.read_sql("SELECT * FROM movies WHERE score >= 10", factory,
                             override_num_blocks=4)
    assert ds.count() == 400
    rows = ds.take_all()
    assert sorted(r["id"] for r in rows) == list(range(100, 500))
    assert rows[0].keys() == {"id", "title", "score"}
    assert {r["title"] for r in rows} == {f"m{i}" for i in range(100, 500)}
    assert ds.num_blocks() == 4  # paged into 4 read tasks
    assert repr(ds) == "Dataset(num_rows=400, schema={id: int64, title: string, score: double})"
    agg = ember.data.read_sql("SELECT COUNT(*) AS n, SUM(id) AS s FROM movies", factory)
    assert agg.take_all() == [{"n": 500, "s": sum(range(500))}]
    with pytest.raises(ValueError, match="shard_keys"):
        ember.data.read_sql("SELECT * FROM movies", factory, shard_keys=["id"])
    with pytest.raises(TypeError, match="connection_factory"):
        ember.data.read_sql("SELECT 1", "sqlite:///x.db")
    with pytest.raises(Exception, match="no such table"):
        ember.data.read_sql("SELECT * FROM nope", factory).take_all()
