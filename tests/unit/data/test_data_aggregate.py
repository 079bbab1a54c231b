"""ember.data.aggregate without a cluster: accumulators, null rules, merging across blocks and the
grouped reduction, checked against pandas/pyarrow computed directly."""
from __future__ import annotations

import math
import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from ember.data._internal import aggregation as A
from ember.data.aggregate import (
    AbsMax,
    AggregateFn,
    AggregateFnV2,
    ApproximateQuantile,
    ApproximateTopK,
    AsList,
    Count,
    CountDistinct,
    Max,
    Mean,
    Min,
    MissingValuePercentage,
    Quantile,
    Std,
    Sum,
    Unique,
    ValueCounter,
    ZeroPercentage,
)


def _table(n: int = 40) -> pa.Table:
    return pa.table({
        "k": [i % 3 for i in range(n)],
        "x": [None if i % 7 == 0 else float(i) for i in range(n)],
        "s": [["a", "b", "a", "c"][i % 4] for i in range(n)],
        "z": [i % 5 - 2 for i in range(n)],
    })


def _global(aggs, tbl: pa.Table, nblocks: int = 4) -> dict:
    step = -(-tbl.num_rows // nblocks)
    parts = [A.block_partials(tbl.slice(i, step), aggs) for i in range(0, tbl.num_rows, step)]
    return A.merge_partials(aggs, parts)


def test_names_follow_ray():
    names = [a.name for a in (Count(), Count("x"), Sum("x"), Min("x"), Max("x"), Mean("x"),
                              Std("x"), AbsMax("x"), Quantile("x"), Unique("x"), AsList("x"),
                              ValueCounter("x"), CountDistinct("x"), MissingValuePercentage("x"),
                              ZeroPercentage("x"), Sum("x", alias_name="total"))]
    assert names == ["count()", "count(x)", "sum(x)", "min(x)", "max(x)", "mean(x)", "std(x)",
                     "abs_max(x)", "quantile(x)", "unique(x)", "list(x)", "value_counter(x)",
                     "count_distinct(x)", "missing_pct(x)", "zero_pct(x)", "total"]
    assert Sum("x").get_agg_name() == "sum" and Sum("x").get_target_column() == "x"


def test_global_results_match_pandas_across_blocks():
    tbl = _table()
    df = tbl.to_pandas()
    res = _global([Count(), Count("x"), Count("x", ignore_nulls=True, alias_name="cx"), Sum("x"), Min("x"),
                   Max("x"), Mean("x"), Std("x"), Std("x", ddof=0, alias_name="s0"),
                   AbsMax("z"), Quantile("z", q=0.3), CountDistinct("s"),
                   MissingValuePercentage("x"), ZeroPercentage("z")], tbl)
    assert res["count()"] == 40 and res["count(x)"] == len(df) and res["cx"] == df.x.count()
    assert res["sum(x)"] == df.x.sum()
    assert (res["min(x)"], res["max(x)"]) == (df.x.min(), df.x.max())
    assert res["mean(x)"] == pytest.approx(df.x.mean())
    assert res["std(x)"] == pytest.approx(df.x.std(ddof=1))
    assert res["s0"] == pytest.approx(df.x.std(ddof=0))
    assert res["abs_max(z)"] == df.z.abs().max()
    assert res["quantile(z)"] == pytest.approx(np.quantile(df.z, 0.3))
    assert res["count_distinct(s)"] == 3
    assert res["missing_pct(x)"] == pytest.approx(df.x.isna().mean() * 100)
    assert res["zero_pct(z)"] == pytest.approx((df.z == 0).mean() * 100)


def test_null_rules():
    tbl = pa.table({"x": pa.array([1.0, None, 3.0]), "n": pa.array([None, None, None], pa.int64())})
    res = _global([Sum("x", ignore_nulls=False), Mean("x", ignore_nulls=False), Sum("n"),
                   Mean("n"), Min("n"), Quantile("x", ignore_nulls=False, alias_name="q")], tbl, 3)
    assert res == {"sum(x)": None, "mean(x)": None, "sum(n)": None, "mean(n)": None,
                   "min(n)": None, "q": None}
    one = _global([Std("x")], pa.table({"x": [5.0]}), 1)
    assert math.isnan(one["std(x)"])


def test_collections_unique_list_value_counter():
    tbl = pa.table({"s": ["a", "b", None, "a", "c", "a"], "v": [1, 2, 3, 4, 5, 6]})
    res = _global([Unique("s"), Unique("s", ignore_nulls=True, alias_name="u"), AsList("v"),
                   ValueCounter("s")], tbl, 3)
    assert sorted(res["unique(s)"], key=str) == sorted(["a", "b", None, "c"], key=str)
    assert sorted(res["u"]) == ["a", "b", "c"]
    assert res["list(v)"] == [1, 2, 3, 4, 5, 6]
    counts = dict(zip(res["value_counter(s)"]["values"], res["value_counter(s)"]["counts"],
                      strict=True))
    assert counts == {"a": 3, "b": 1, None: 1, "c": 1}
    lists = pa.table({"l": [[1, 2], [2, 3], None]})
    assert sorted(_global([Unique("l", encode_lists=True, ignore_nulls=True)], lists, 2)[
        "unique(l)"]) == [1, 2, 3]
    with pytest.raises(ValueError, match="encode_lists"):
        Unique("l", encode_lists="HASH")


class _SumOfSquares(AggregateFnV2):
    def __init__(self, on: str) -> None:
        super().__init__(f"sum_sq({on})", lambda: 0, on=on, ignore_nulls=True)

    def aggregate_block(self, block):
        col = block.column(self.get_target_column()).drop_null().to_numpy()
        return float((col ** 2).sum())

    def combine(self, current_accumulator, new):
        return current_accumulator + new

    def finalize(self, accumulator):
        return round(accumulator, 3)


def test_user_aggregations_and_pickling():
    tbl = _table()
    df = tbl.to_pandas()
    legacy = AggregateFn(init=lambda k: 0, accumulate_row=lambda a, r: a + 1,
                         merge=lambda a, b: a + b, name="rows")
    res = _global([_SumOfSquares("x"), legacy], tbl)
    assert res == {"sum_sq(x)": round(float((df.x.dropna() ** 2).sum()), 3), "rows": 40}
    agg = pickle.loads(pickle.dumps(Std("x", ddof=0)))
    assert agg.finalize(agg.accumulate_block(agg.init(None), tbl)) == pytest.approx(df.x.std(ddof=0))
    with pytest.raises(ValueError, match="exactly one"):
        AggregateFn(init=lambda k: 0, merge=lambda a, b: a, name="bad")
    with pytest.raises(TypeError, match="AggregateFnV2"):
        A.validate(["sum(x)"], None)
    assert list(_global([Sum("x"), Sum("x", ignore_nulls=False)], tbl)) == ["sum(x)", "sum(x)_2"]
    with pytest.raises(ValueError, match="no column 'nope'"):
        A.validate([Sum("nope")], tbl.schema)


def test_grouped_matches_pandas_groupby():
    tbl = _table(60)
    df = tbl.to_pandas()
    aggs = [Count(), Sum("x"), Mean("x"), Std("x"), Min("z"), Max("z"), Quantile("z"),
            Unique("s"), AsList("z"), AbsMax("z"), _SumOfSquares("x")]
    out = A.aggregate_groups(tbl, ["k"], aggs).to_pandas()
    g = df.groupby("k")
    assert out["k"].tolist() == [0, 1, 2]
    assert out["count()"].tolist() == g.size().tolist()
    assert out["sum(x)"].tolist() == g.x.sum().tolist()
    np.testing.assert_allclose(out["mean(x)"], g.x.mean())
    np.testing.assert_allclose(out["std(x)"], g.x.std())
    assert out["min(z)"].tolist() == g.z.min().tolist()
    assert out["max(z)"].tolist() == g.z.max().tolist()
    np.testing.assert_allclose(out["quantile(z)"], g.z.quantile(0.5))
    assert [sorted(u) for u in out["unique(s)"]] == [sorted(set(v)) for _, v in g.s]
    assert [list(v) for v in out["list(z)"]] == [list(v) for _, v in g.z]
    assert out["abs_max(z)"].tolist() == g.z.apply(lambda v: v.abs().max()).tolist()
    np.testing.assert_allclose(out["sum_sq(x)"], g.x.apply(lambda v: (v.dropna() ** 2).sum()))


def test_grouped_multi_key_null_groups_and_std_nan():
    tbl = pa.table({"a": ["x", "x", "y", None], "b": [1, 1, 2, 3], "v": [1.0, 2.0, 4.0, None]})
    out = A.aggregate_groups(tbl, ["a", "b"], [Std("v"), Count("v", ignore_nulls=True)])
    rows = out.to_pylist()
    assert [(r["a"], r["b"]) for r in rows] == [("x", 1), ("y", 2), (None, 3)]
    assert rows[0]["std(v)"] == pytest.approx(pd.Series([1.0, 2.0]).std())
    assert math.isnan(rows[1]["std(v)"])  # one value: NaN (too few), as Ray
    assert rows[2]["std(v)"] is None  # no values: null
    assert [r["count(v)"] for r in rows] == [2, 1, 0]


def test_approximate_aggregations_are_exact_rank_answers():
    tbl = pa.table({"v": [20.0, 40.0, None, 60.0, 80.0, 100.0], "w": list("abacab")})
    res = _global([ApproximateQuantile("v", [0.1, 0.5, 0.9]), ApproximateTopK("w", k=2)], tbl)
    assert res["approx_quantile(v)"] == [20.0, 60.0, 100.0]
    assert res["approx_topk(w)"] == [{"w": "a", "count": 3}, {"w": "b", "count": 2}]
    with pytest.raises(ValueError, match="quantiles"):
        ApproximateQuantile("v", [1.5])


def test_legacy_aggregate_fn_per_group_gets_its_key():
    tbl = pa.table({"g": ["a", "b", "a"], "v": [1, 2, 3]})
    keyed = AggregateFn(init=lambda k: [k], accumulate_row=lambda acc, r: acc + [r["v"]],
                        merge=lambda a, b: a + b[1:], name="seen",
                        finalize=lambda acc: f"{acc[0]}:{sum(acc[1:])}")
    out = A.aggregate_groups(tbl, ["g"], [keyed, Count()])
    assert out.to_pylist() == [{"g": "a", "seen": "a:4", "count()": 2},
                               {"g": "b", "seen": "b:2", "count()": 1}]


def test_nan_keys_form_one_group_in_both_paths():
    tbl = pa.table({"k": [1.0, float("nan"), 2.0, float("nan")], "v": [1, 2, 3, 4]})
    out = A.aggregate_groups(tbl, ["k"], [Sum("v"), AsList("v")]).to_pylist()
    assert len(out) == 3
    nan_row = [r for r in out if r["k"] != r["k"]][0]
    assert nan_row["sum(v)"] == 6 and sorted(nan_row["list(v)"]) == [2, 4]
