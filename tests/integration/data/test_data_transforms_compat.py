"""Ray Data transforms on a real embedded cluster with real parquet/CSV files: aggregate and
groupby-aggregate with ember.data.aggregate, with_column / filter with expressions, and join —
each result compared with pandas/pyarrow computed directly on the same files."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ember
from ember.data.aggregate import (
    AbsMax,
    AggregateFnV2,
    AsList,
    Count,
    Max,
    Mean,
    Min,
    Quantile,
    Std,
    Sum,
    Unique,
    ValueCounter,
)
from ember.data.expressions import DataType, col, download, lit, udf, unnest

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(data_cluster):
    return data_cluster


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("compat")
    rng = np.random.default_rng(7)
    n = 3000
    df = pd.DataFrame({"id": np.arange(n), "k": rng.integers(0, 7, n),
                       "x": rng.normal(10, 3, n), "s": rng.choice(["a", "b", "c"], n)})
    df.loc[df.index % 11 == 0, "x"] = np.nan
    (d / "pq").mkdir()
    for i in range(4):
        part = df.iloc[i * n // 4:(i + 1) * n // 4]
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), d / "pq" / f"{i}.parquet")
    right = pd.DataFrame({"rid": np.arange(0, 2 * n, 2), "w": np.arange(0, 2 * n, 2) * 0.5})
    right.to_csv(d / "right.csv", index=False)
    return d, df, right


def test_aggregate_matches_pandas(cluster, files):
    d, df, _ = files
    ds = ember.data.read_parquet(str(d / "pq"))
    res = ds.aggregate(Count(), Sum("x"), Min("x"), Max("x"), Mean("x"), Std("x"),
                       AbsMax("k"), Quantile("k", q=0.9), Unique("s"), Sum("k", alias_name="ks"))
    x = df.x.dropna()
    assert res["count()"] == len(df)
    assert res["sum(x)"] == pytest.approx(x.sum())
    assert (res["min(x)"], res["max(x)"]) == (x.min(), x.max())
    assert res["mean(x)"] == pytest.approx(x.mean())
    assert res["std(x)"] == pytest.approx(x.std())
    assert res["abs_max(k)"] == df.k.abs().max()
    assert res["quantile(k)"] == pytest.approx(df.k.quantile(0.9))
    assert sorted(res["unique(s)"]) == ["a", "b", "c"] and res["ks"] == df.k.sum()
    assert ds.filter(expr="id < 0").aggregate(Count(), Sum("x")) == {"count()": 0, "sum(x)": None}
    with pytest.raises(TypeError, match="AggregateFnV2"):
        ds.aggregate("sum(x)")
    assert ds.count() == len(df)  # the cluster still works after bad input


class _Range(AggregateFnV2):
    """A user aggregation: max - min of a column, from (min, max) partials."""

    def __init__(self, on: str) -> None:
        super().__init__(f"range({on})", lambda: None, on=on, ignore_nulls=True)

    def aggregate_block(self, block):
        c = block.column(self.get_target_column()).drop_null()
        return [pa.compute.min(c).as_py(), pa.compute.max(c).as_py()] if len(c) else None

    def combine(self, current_accumulator, new):
        return [min(current_accumulator[0], new[0]), max(current_accumulator[1], new[1])]

    def finalize(self, accumulator):
        return accumulator[1] - accumulator[0]


def test_groupby_aggregate_matches_pandas(cluster, files):
    d, df, _ = files
    ds = ember.data.read_parquet(str(d / "pq"))
    out = ds.groupby("k").aggregate(Count(), Mean("x"), Std("x", ddof=0), Quantile("x"),
                                    ValueCounter("s"), _Range("x")).to_pandas()
    g = df.groupby("k")
    assert out["k"].tolist() == sorted(df.k.unique())
    assert out["count()"].tolist() == g.size().tolist()
    np.testing.assert_allclose(out["mean(x)"], g.x.mean())
    np.testing.assert_allclose(out["std(x)"], g.x.std(ddof=0))
    np.testing.assert_allclose(out["quantile(x)"], g.x.quantile(0.5))
    np.testing.assert_allclose(out["range(x)"], g.x.max() - g.x.min())
    vc = out["value_counter(s)"][0]
    assert dict(zip(vc["values"], vc["counts"], strict=True)) == \
        df[df.k == out["k"][0]].s.value_counts().to_dict()
    two = ds.groupby(["k", "s"]).aggregate(Sum("id"), AsList("id")).to_pandas()
    ref = df.groupby(["k", "s"]).id.sum().reset_index()
    assert two["sum(id)"].tolist() == ref["id"].tolist()
    assert all(sorted(lst) == sorted(df[(df.k == k) & (df.s == s)].id)
               for k, s, lst in zip(two.k, two.s, two["list(id)"], strict=True))
    assert ds.groupby("k").sum("x").to_pandas()["sum(x)"].tolist() == \
        pytest.approx(g.x.sum().tolist())


def test_with_column_and_expression_filter(cluster, files):
    d, df, _ = files
    ds = ember.data.read_parquet(str(d / "pq"))
    out = (ds.with_column("y", col("k") * 2 + lit(1))
             .with_columns({"z": col("x").cast(DataType.float32()),
                            "tag": col("s").str.upper() + "-" + col("k").cast(DataType.string())})
             .filter(expr=(col("y") > 5) & col("s").is_in(["a", "b"]))
             .filter(expr=col("tag").str.starts_with("A"))
             .to_pandas().sort_values("id"))
    ref = df.assign(y=df.k * 2 + 1, tag=df.s.str.upper() + "-" + df.k.astype(str))
    ref = ref[(ref.y > 5) & ref.s.isin(["a", "b"]) & ref.tag.str.startswith("A")]
    assert out["id"].tolist() == ref["id"].tolist()
    assert out["y"].tolist() == ref["y"].tolist() and out["tag"].tolist() == ref["tag"].tolist()
    assert str(out["z"].dtype) == "float32"
    @udf(return_dtype=DataType.int64())
    class Shift:
        def __init__(self, by):
            self.by = by

        def __call__(self, ids):
            return pa.compute.add(ids, self.by)

    shifted = ds.with_column("sid", Shift(1000)(col("id")) // 2).to_pandas().sort_values("id")
    assert shifted.sid.tolist() == ((df.id + 1000) // 2).tolist()
    files_ds = ember.data.from_items([{"path": str(p)} for p in sorted((d / "pq").iterdir())])
    sized = files_ds.with_columns({"bytes": download("path")}).to_pandas()
    assert {p: len(b) for p, b in zip(sized["path"], sized["bytes"], strict=True)} == \
        {str(p): p.stat().st_size for p in (d / "pq").iterdir()}
    pairs = ember.data.from_items([{"st": {"u": i, "v": -i}} for i in range(5)])
    assert sorted(pairs.with_columns(unnest(col("st"))).drop_columns(["st"]).take_all(),
                  key=lambda r: r["u"]) == [{"u": i, "v": -i} for i in range(5)]
    with pytest.raises(TypeError, match="expression"):
        ds.with_column("bad", 3)
    with pytest.raises(KeyError, match="no column 'nope'"):
        ds.with_column("bad", col("nope") + 1).take(1)


@pytest.mark.parametrize("join_type", ["inner", "left_outer", "right_outer", "full_outer"])
def test_join_matches_pandas_merge(cluster, files, join_type):
    d, df, right = files
    left = ember.data.read_parquet(str(d / "pq")).select_columns(["id", "k"])
    rds = ember.data.read_csv(str(d / "right.csv"))
    out = left.join(rds, join_type, 5, on=("id",), right_on=("rid",))
    assert out.num_blocks() == 5
    got = out.to_pandas()
    how = {"inner": "inner", "left_outer": "left", "right_outer": "right",
           "full_outer": "outer"}[join_type]
    ref = df[["id", "k"]].merge(right, how=how, left_on="id", right_on="rid")
    key = "rid" if join_type == "right_outer" else "id"
    assert len(got) == len(ref)
    assert sorted(got[key].tolist()) == sorted(ref[key].dropna().astype(int).tolist()) or \
        join_type == "full_outer"
    w = dict(zip(got[key], got["w"], strict=True))
    for i in ref[key].dropna().astype(int).tolist()[:200]:
        exp = ref.loc[ref[key] == i, "w"].iloc[0]
        assert (math.isnan(exp) and (w[i] is None or math.isnan(w[i]))) or w[i] == exp
    assert set(got.columns) == ({"id", "k", "w"} if join_type != "right_outer"
                                else {"k", "rid", "w"})


def test_join_errors_name_the_problem(cluster):
    a = ember.data.from_items([{"id": 1, "v": 1}])
    b = ember.data.from_items([{"id": 1, "v": 2}])
    with pytest.raises(ValueError, match="join_type"):
        a.join(b, "outer", 2)
    with pytest.raises(ValueError, match="left_suffix"):
        a.join(b, "inner", 2).take_all()
    rows = a.join(b, "inner", 2, left_suffix="_a", right_suffix="_b").take_all()
    assert rows == [{"id": 1, "v_a": 1, "v_b": 2}]


def test_split_proportionately_and_hash_repartition(cluster, files):
    d, df, _ = files
    ds = ember.data.read_parquet(str(d / "pq"))
    parts = ds.split_proportionately([0.2, 0.5])
    assert [p.count() for p in parts] == [600, 1500, 900]
    assert sorted(i for p in parts for i in p.to_pandas().id) == list(range(len(df)))
    # equal cuts are pulled apart so that no split is empty, as Ray does
    assert [p.count() for p in ember.data.range(10).split_proportionately([0.3, 0.05])] == \
        [2, 1, 7]
    with pytest.raises(ValueError, match="sum to less than 1"):
        ds.split_proportionately([0.5, 0.5])
    rp = ds.repartition(5, keys=["k"], sort=True).materialize()
    assert rp.num_blocks() == 5
    seen: dict[int, int] = {}
    for i, ref in enumerate(rp.to_arrow_refs()):
        blk = ember.get(ref)
        ks = blk.column("k").to_pylist()
        assert ks == sorted(ks)
        for k in set(ks):
            assert seen.setdefault(k, i) == i  # every key lives in one block
    assert rp.count() == len(df)
    strict = ember.data.range(10, override_num_blocks=3).repartition(
        target_num_rows_per_block=4, strict=True).materialize()
    assert [ember.get(r).num_rows for r in strict.to_arrow_refs()] == [4, 4, 2]
    with pytest.raises(ValueError, match="needs `keys`"):
        ds.repartition(2, sort=True)


def test_data_context_fields_honoured_or_refused(cluster):
    ctx = ember.data.DataContext.get_current()
    old = ctx.target_max_block_size

    def widen(b):
        return {"id": np.repeat(b["id"], 50)}

    try:
        ctx.target_max_block_size = 4096
        small = ember.data.range(2000, override_num_blocks=2).map_batches(widen).materialize()
        ctx.target_max_block_size = None
        whole = ember.data.range(2000, override_num_blocks=2).map_batches(widen).materialize()
    finally:
        ctx.target_max_block_size = old
    assert small.num_blocks() > 10 and whole.num_blocks() == 2
    assert small.count() == whole.count() == 100_000
    with pytest.raises(AttributeError, match="use_polars"):
        ctx.use_polars = True
    with pytest.raises(AttributeError, match="'cpus'"):
        ctx.execution_options.resource_limits.cpus = 1
    with pytest.raises(ValueError, match="target_min_block_size"):
        ctx.target_min_block_size = 0
    with pytest.raises(TypeError, match="enable_progress_bars"):
        ctx.enable_progress_bars = "no"


def test_dataset_repr_as_ray_prints_it(cluster, files):
    """Ray's Dataset.__repr__: operators newest first with `+- ` under each, the source's count
    and schema on the dataset line; materialized datasets print num_blocks; long lines wrap."""
    def f(r):
        return r

    def g(r):
        return True

    assert repr(ember.data.range(10)) == "Dataset(num_rows=10, schema={id: int64})"
    assert repr(ember.data.range(10).map(f).filter(g)) == (
        "Filter(g)\n"
        "+- Map(f)\n"
        "   +- Dataset(num_rows=10, schema={id: int64})")
    items = ember.data.from_items([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    assert repr(items) == "MaterializedDataset(num_blocks=2, num_rows=2, schema={a: int64, b: string})"
    assert repr(items.map_batches(f)) == (
        "MapBatches(f)\n+- Dataset(num_rows=2, schema={a: int64, b: string})")
    mat = ember.data.range(10, override_num_blocks=2).map(f).materialize()
    assert repr(mat) == "MaterializedDataset(num_blocks=2, num_rows=10, schema={id: int64})"
    d, df, _ = files
    pq_ds = ember.data.read_parquet(str(d / "pq"))
    s_type = pq.read_schema(d / "pq" / "0.parquet").field("s").type  # string or large_string
    assert repr(pq_ds) == ("Dataset(num_rows=3000, schema={id: int64, k: int64, x: double, "
                           f"s: {s_type}}})")
    assert repr(ember.data.read_parquet(str(d / "pq"), columns=["x"])) == (
        "Dataset(num_rows=3000, schema={x: double})")
    # a CSV read knows its schema (from the first block) but not its count
    assert repr(ember.data.read_csv(str(d / "right.csv"))) == (
        "Dataset(num_rows=?, schema={rid: int64, w: double})")
    wide = ember.data.from_items([{f"column_{i}": i for i in range(8)}])
    assert repr(wide.limit(1)) == (
        "limit=1\n"
        "+- Dataset(\n"
        "      num_rows=1,\n"
        "      schema={\n"
        + ",\n".join(f"         column_{i}: int64" for i in range(8)) + "\n"
        "      }\n"
        "   )")
    assert repr(ember.data.range(3).union(ember.data.range(4))) == (
        "Union\n+- Dataset(num_rows=?, schema=Unknown schema)")
