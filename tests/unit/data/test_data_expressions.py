"""ember.data.expressions and the join's pure parts, without a cluster: every operator and
namespace method checked against pyarrow.compute / pandas on the same table."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ember.data._internal import join as J
from ember.data._internal.transforms import WithColumns
from ember.data.expressions import (
    DataType,
    Expr,
    col,
    download,
    lit,
    to_arrow_expression,
    udf,
    unnest,
    uuid,
)


@pytest.fixture()
def tbl() -> pa.Table:
    return pa.table({"a": [1, 2, 3, None], "b": [2.0, 0.5, -4.0, 1.0],
                     "s": ["ab", " Cd ", None, "x"], "l": [[3, 1], [2], None, [5, None, 4]]})


def _ev(e: Expr, t: pa.Table) -> list:
    return e.eval(t).to_pylist()


def test_arithmetic_follows_rays_arrow_mapping(tbl):
    assert _ev(col("a") + col("b"), tbl) == [3.0, 2.5, -1.0, None]
    assert _ev(col("a") - 1, tbl) == [0, 1, 2, None] == _ev(col("a") + lit(-1), tbl)
    assert _ev(2 * col("a"), tbl) == [2, 4, 6, None]
    assert _ev(col("a") / 2, tbl) == [0, 1, 1, None]  # Arrow's divide: integer for ints
    assert _ev(col("b") / 2, tbl) == [1.0, 0.25, -2.0, 0.5]
    assert _ev(col("b") // 1, tbl) == [2.0, 0.0, -4.0, 1.0]
    assert _ev(col("b") % 3, tbl) == list(pd.Series([2.0, 0.5, -4.0, 1.0]) % 3)
    assert _ev(col("s") + "!", tbl) == ["ab!", " Cd !", None, "x!"]
    assert _ev(col("b").abs().power(2), tbl) == [4.0, 0.25, 16.0, 1.0]
    np.testing.assert_allclose(_ev(col("b").abs().ln(), tbl), np.log(np.abs([2.0, 0.5, -4, 1])))
    assert _ev(col("b").round(), tbl) == [2.0, 0.0, -4.0, 1.0]


def test_comparison_boolean_null_and_membership(tbl):
    assert _ev(col("a") > 1, tbl) == [False, True, True, None]
    assert _ev((col("a") >= 2) & (col("b") < 1), tbl) == [False, True, True, False]
    assert _ev((col("a") == 1) | (col("b") > 0), tbl) == [True, True, False, True]
    assert _ev(~(col("a") != 2), tbl) == [False, True, False, None]
    assert _ev(col("a").is_null(), tbl) == [False, False, False, True]
    assert _ev(col("s").is_not_null(), tbl) == [True, True, False, True]
    assert _ev(col("a").is_in([1, 3]), tbl) == [True, False, True, False]
    assert _ev(col("a").not_in([1, 3]), tbl) == [False, True, False, True]
    with pytest.raises(TypeError, match="truth value"):
        bool(col("a") > 1)


def test_cast_and_alias(tbl):
    e = col("a").cast(DataType.float64())
    assert e.eval(tbl).type == pa.float64()
    assert col("b").cast(DataType.int64(), safe=False).eval(tbl).to_pylist() == [2, 0, -4, 1]
    with pytest.raises(pa.ArrowInvalid):
        col("b").cast(DataType.int64()).eval(tbl)  # 0.5 does not fit: safe cast refuses
    with pytest.raises(TypeError, match="DataType"):
        col("a").cast("int64")
    with pytest.raises(TypeError, match="Arrow-backed"):
        col("a").cast(DataType(int))
    assert (col("a") + 1).alias("z").name == "z" and col("a").name == "a"


def test_udf_functions_and_callable_classes(tbl):
    @udf(return_dtype=DataType.float64())
    def add(a, b):
        return pc.add(a, b)

    @udf(return_dtype=DataType.int64())
    class Offset:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            return [None if v is None else v + self.k for v in x.to_pylist()]

    e = add(col("a"), col("b")) * 2
    assert _ev(e, tbl) == [6.0, 5.0, -2.0, None]
    off = Offset(10)(col("a"))
    assert off.eval(tbl).type == pa.int64() and _ev(off, tbl) == [11, 12, 13, None]
    import cloudpickle  # how task arguments travel

    shipped = cloudpickle.loads(cloudpickle.dumps(Offset(1)(col("a"))))
    assert _ev(shipped, tbl) == [2, 3, 4, None]
    with pytest.raises(TypeError, match="DataType"):
        udf(int)


def test_string_namespace(tbl):
    s = tbl.column("s")
    assert _ev(col("s").str.upper(), tbl) == pc.utf8_upper(s).to_pylist()
    assert _ev(col("s").str.len(), tbl) == [2, 4, None, 1]
    assert _ev(col("s").str.strip(), tbl) == ["ab", "Cd", None, "x"]
    assert _ev(col("s").str.contains("b"), tbl) == [True, False, None, False]
    assert _ev(col("s").str.starts_with("a"), tbl) == [True, False, None, False]
    assert _ev(col("s").str.replace("b", "B"), tbl) == ["aB", " Cd ", None, "x"]
    assert _ev(col("s").str.pad(3, "*", "left"), tbl) == ["*ab", " Cd ", None, "**x"]
    with pytest.raises(AttributeError, match="no .str.nope"):
        col("s").str.nope()


def test_list_namespace(tbl):
    assert _ev(col("l").list.len(), tbl) == [2, 1, None, 3]
    assert _ev(col("l").list[0], tbl) == [3, 2, None, 5]
    assert _ev(col("l").list[0:1], tbl) == [[3], [2], None, [5]]
    assert _ev(col("l").list.sort(), tbl) == [[1, 3], [2], None, [4, 5, None]]
    assert _ev(col("l").list.sort("descending", "at_start"), tbl) == [[3, 1], [2], None,
                                                                      [None, 5, 4]]
    nested = pa.table({"n": [[[1], [2, 3]], None]})
    assert _ev(col("n").list.flatten(), nested) == [[1, 2, 3], None]


def test_datetime_and_struct_namespaces():
    import datetime as dt

    t = pa.table({"t": [dt.datetime(2024, 3, 5, 14, 30), dt.datetime(1999, 12, 31, 23, 59)],
                  "s": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]})
    assert _ev(col("t").dt.year(), t) == [2024, 1999]
    assert _ev(col("t").dt.hour(), t) == [14, 23]
    assert _ev(col("t").dt.strftime("%Y-%m"), t) == ["2024-03", "1999-12"]
    assert _ev(col("t").dt.floor("day"), t) == [dt.datetime(2024, 3, 5), dt.datetime(1999, 12, 31)]
    assert _ev(col("s").struct["a"], t) == [1, 2]
    assert _ev(col("s").struct.field_by_index(1), t) == ["x", "y"]


def test_pyarrow_conversion_for_pushdown(tbl):
    e = to_arrow_expression((col("a") > 1) & col("s").is_in(["x", "ab"]))
    assert isinstance(e, pc.Expression)
    assert tbl.filter(e).column("a").to_pylist() == []
    e2 = to_arrow_expression(col("a") >= 2)
    assert tbl.filter(e2).column("a").to_pylist() == [2, 3]
    kept = to_arrow_expression(col("s").str.len() > 1)  # no pyarrow form: evaluated per block
    assert isinstance(kept, Expr)
    assert isinstance(to_arrow_expression("a > 1 and b < 1"), pc.Expression)
    with pytest.raises(TypeError, match="expr must be"):
        to_arrow_expression(3)


def test_hash_partition_is_width_independent_and_complete():
    n = 4
    left = pa.table({"k": pa.array([1, 2, 3, 4, 5, None], pa.int32()), "v": list("abcdef")})
    right = pa.table({"k": pa.array([5, 4, 3, 2, 1], pa.int64())})
    lp = J.partition_ids(left, ["k"], n)[:5]
    rp = J.partition_ids(right, ["k"], n)[::-1]
    assert lp.tolist() == rp.tolist()
    pieces = J.hash_partition(left, ["k"], n)
    assert len(pieces) == n + 1 and sum(p.num_rows for p in pieces[:n]) == 6
    assert sorted(v for p in pieces[:n] for v in p.column("v").to_pylist()) == list("abcdef")
    strs = pa.table({"a": ["x", "y", "x"], "b": [1.0, 2.0, 1.0]})
    ids = J.partition_ids(strs, ["a", "b"], 8)
    assert ids[0] == ids[2]


def test_join_partition_types_and_suffixes():
    left = pa.table({"id": [1, 2, 3], "c": ["l1", "l2", "l3"]})
    right = pa.table({"key": [2, 3, 4], "c": ["r2", "r3", "r4"]})
    out, meta = J.join_partition("full_outer", ["id"], ["key"], "_l", "_r", 1, left, right)
    df = out.to_pandas().sort_values("id")
    assert df["id"].tolist() == [1, 2, 3, 4] and meta.num_rows == 4
    assert df["c_l"].tolist()[:3] == ["l1", "l2", "l3"] and df["c_r"].tolist()[1:] == ["r2", "r3",
                                                                                     "r4"]
    anti, _ = J.join_partition("left_anti", ["id"], ["key"], None, None, 1, left, right)
    assert anti.to_pylist() == [{"id": 1, "c": "l1"}]
    with pytest.raises(ValueError, match="left_suffix"):
        J.check_columns(["id", "c"], ["key", "c"], "inner", ["id"], ["key"], None, None)
    with pytest.raises(ValueError, match="not in the right"):
        J.check_columns(["id"], ["x"], "inner", ["id"], ["key"], None, None)


def test_uuid_download_and_unnest(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"alpha")
    (tmp_path / "b.bin").write_bytes(b"\x00\x01")
    t = pa.table({"p": [str(tmp_path / "a.bin"), None, "file://" + str(tmp_path / "b.bin")],
                  "s": [{"x": 1, "y": "u"}, {"x": 2, "y": "v"}, {"x": 3, "y": "w"}]})
    step = WithColumns([{"id": uuid(), "data": download("p")}, unnest(col("s"))], "w")
    out = next(step.apply(iter([t])))
    ids = out.column("id").to_pylist()
    assert len(set(ids)) == 3 and all(len(i) == 36 for i in ids)
    assert out.column("data").to_pylist() == [b"alpha", None, b"\x00\x01"]
    assert out.column("x").to_pylist() == [1, 2, 3] and out.column("y").to_pylist() == list("uvw")
    with pytest.raises(OSError, match="cannot read"):
        download("p").eval(pa.table({"p": [str(tmp_path / "missing")]}))
    with pytest.raises(TypeError, match="struct"):
        next(WithColumns([unnest(col("x"))], "w").apply(iter([out])))
    with pytest.raises(TypeError, match="nested"):
        unnest(unnest(col("s")))
