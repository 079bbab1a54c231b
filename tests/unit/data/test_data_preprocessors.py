"""ember.data.preprocessors without a cluster: fitted stats and transforms checked against
numpy/pandas/sklearn-style formulas, on an in-process dataset double that runs the real
aggregations (ember.data._internal.aggregation) over a few Arrow blocks."""
from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import ember.data.preprocessors as P
from ember.data import block as B
from ember.data._internal import aggregation as A


class _LocalDataset:
    """The few Dataset methods preprocessors call, over in-memory Arrow blocks."""

    def __init__(self, blocks: list[pa.Table]) -> None:
        self.blocks = blocks

    @classmethod
    def of(cls, df: pd.DataFrame, n: int = 3) -> _LocalDataset:
        step = -(-len(df) // n)
        return cls([B.pandas_to_block(df.iloc[i:i + step]) for i in range(0, len(df), step)])

    def aggregate(self, *aggs):
        return A.merge_partials(aggs, [A.block_partials(b, aggs) for b in self.blocks])

    def schema(self):
        return self.blocks[0].schema

    def map_batches(self, fn, batch_format="pyarrow", **_):
        assert batch_format == "pyarrow"
        return _LocalDataset([fn(b) for b in self.blocks])

    def iter_batches(self, batch_size=None, batch_format="pyarrow"):
        yield from self.blocks

    def to_pandas(self):
        return B.block_to_pandas(B.concat(self.blocks))


@pytest.fixture()
def df() -> pd.DataFrame:
    return pd.DataFrame({"x": [-2.0, 0.0, 2.0, 5.0, None, 1.0], "y": [1, 1, 1, 3, 4, 0],
                         "color": ["red", "green", "red", "red", "blue", "green"],
                         "txt": ["a b a", "b c", "c", "a a a", "d", "b"]})


def test_scalers_match_formulas(df):
    ds = _LocalDataset.of(df)
    x = df.x.dropna()
    out = P.StandardScaler(["x", "y"]).fit_transform(ds).to_pandas()
    np.testing.assert_allclose(out.x.dropna(), (x - x.mean()) / x.std(ddof=0))
    np.testing.assert_allclose(out.y, (df.y - df.y.mean()) / df.y.std(ddof=0))
    mm = P.MinMaxScaler(["x"], output_columns=["x2"]).fit_transform(ds).to_pandas()
    np.testing.assert_allclose(mm.x2.dropna(), (x - x.min()) / (x.max() - x.min()))
    assert mm.x.tolist()[:4] == [-2.0, 0.0, 2.0, 5.0]  # the input stays in append mode
    ma = P.MaxAbsScaler(["x"]).fit_transform(ds).to_pandas()
    np.testing.assert_allclose(ma.x.dropna(), x / x.abs().max())
    rb = P.RobustScaler(["y"]).fit(ds)
    ys = sorted(df.y)  # the rank rule: the smallest value with at least that share below it
    q1, q2, q3 = (ys[int(np.ceil(q * len(ys))) - 1] for q in (0.25, 0.5, 0.75))
    assert (rb.stats_["low_quantile(y)"], rb.stats_["median(y)"], rb.stats_["high_quantile(y)"]) \
        == (q1, q2, q3)
    np.testing.assert_allclose(rb.transform(ds).to_pandas().y, (df.y - q2) / (q3 - q1))
    const = P.StandardScaler(["c"]).fit_transform(_LocalDataset.of(pd.DataFrame({"c": [3.0] * 4})))
    assert const.to_pandas().c.tolist() == [0.0] * 4


def test_encoders_sorted_categories(df):
    ds = _LocalDataset.of(df)
    oh = P.OneHotEncoder(["color"]).fit(ds)
    assert oh.stats_["unique_values(color)"] == {"blue": 0, "green": 1, "red": 2}
    out = oh.transform(ds).to_pandas()
    assert [list(v) for v in out.color] == [[0, 0, 1], [0, 1, 0], [0, 0, 1], [0, 0, 1],
                                            [1, 0, 0], [0, 1, 0]]
    top = P.OneHotEncoder(["color"], max_categories={"color": 2}).fit(ds)
    assert top.stats_["unique_values(color)"] == {"green": 0, "red": 1}
    unseen = top.transform_batch(pd.DataFrame({"color": ["blue", "red"]}))
    assert [list(v) for v in unseen.color] == [[0, 0], [0, 1]]
    od = P.OrdinalEncoder(["color"], output_columns=["c2"]).fit_transform(ds).to_pandas()
    assert od.c2.tolist() == [2, 1, 2, 2, 0, 1]
    lst = _LocalDataset.of(pd.DataFrame({"g": [["b", "a"], ["c"], ["a"]]}))
    assert [list(v) for v in P.OrdinalEncoder(["g"]).fit_transform(lst).to_pandas().g] == \
        [[1, 0], [2], [0]]
    le = P.LabelEncoder("color").fit(ds)
    enc = le.transform_batch(df.copy())
    assert enc.color.tolist() == [2, 1, 2, 2, 0, 1]
    assert le.inverse_transform_batch(enc).color.tolist() == df.color.tolist()
    cat = P.Categorizer(["color"]).fit_transform(ds).to_pandas()
    assert list(cat.color.dtype.categories) == ["blue", "green", "red"]
    with pytest.raises(ValueError, match="null values"):
        oh.transform_batch(pd.DataFrame({"color": ["red", None]}))
    with pytest.raises(ValueError, match="max_categories"):
        P.OneHotEncoder(["color"], max_categories={"other": 1})


def test_imputer_normalizer_power_concat(df):
    ds = _LocalDataset.of(df)
    im = P.SimpleImputer(["x"]).fit_transform(ds).to_pandas()
    assert im.x.tolist()[4] == pytest.approx(df.x.mean())
    freq = P.SimpleImputer(["color"], strategy="most_frequent").fit(ds)
    assert freq.stats_ == {"most_frequent(color)": "red"}
    const = P.SimpleImputer(["x"], strategy="constant", fill_value=9.5)
    assert const.fit_status() is P.Preprocessor.FitStatus.NOT_FITTABLE
    assert const.transform(ds).to_pandas().x.tolist()[4] == 9.5
    with pytest.raises(ValueError, match="fill_value"):
        P.SimpleImputer(["x"], strategy="constant")
    nm = P.Normalizer(["y", "x"], norm="l1").transform_batch(df.copy())
    assert nm.x.tolist()[0] == pytest.approx(-2 / 3) and nm.y.tolist()[0] == pytest.approx(1 / 3)
    assert nm.y.tolist()[4] == 1.0 and np.isnan(nm.x.tolist()[4])  # a missing x is skipped
    pw = P.PowerTransformer(["y"], power=0.5).transform_batch(df.copy())
    np.testing.assert_allclose(pw.y, (np.sqrt(df.y + 1) - 1) / 0.5)
    bc = P.PowerTransformer(["y"], power=0, method="box-cox").transform_batch(
        pd.DataFrame({"y": [1.0, np.e]}))
    np.testing.assert_allclose(bc.y, [0.0, 1.0])
    cc = P.Concatenator(["y", "x"], output_column_name="v", dtype=np.float32).transform_batch(
        {"y": np.array([1, 2]), "x": np.array([0.5, 1.5])})
    assert list(cc) == ["v"] and cc["v"].dtype == np.float32
    assert cc["v"].tolist() == [[1.0, 0.5], [2.0, 1.5]]


def test_text_vectorizers(df):
    ds = _LocalDataset.of(df)
    tok = P.Tokenizer(["txt"]).transform(ds).to_pandas()
    assert [list(t) for t in tok.txt][:2] == [["a", "b", "a"], ["b", "c"]]
    cv = P.CountVectorizer(["txt"], max_features=3).fit(ds)
    assert dict(cv.stats_["token_counts(txt)"]) == {"a": 5, "b": 3, "c": 2}
    assert [list(v) for v in cv.transform(ds).to_pandas().txt] == \
        [[2, 1, 0], [0, 1, 1], [0, 0, 1], [3, 0, 0], [0, 0, 0], [0, 1, 0]]
    hv = P.HashingVectorizer(["txt"], num_features=4).transform(ds).to_pandas()
    assert [sum(v) for v in hv.txt] == [len(t.split(" ")) for t in df.txt]
    assert list(hv.txt[0]) == list(hv.txt[0])  # deterministic buckets
    assert P.text.simple_hash("a", 4) == P.text.simple_hash("a", 4)


def test_chain_fit_status_and_serialization(df):
    ds = _LocalDataset.of(df)
    chain = P.Chain(P.SimpleImputer(["x"]), P.StandardScaler(["x"]))
    assert chain.fit_status() is P.Preprocessor.FitStatus.NOT_FITTED
    with pytest.raises(P.PreprocessorNotFittedException):
        chain.transform(ds)
    out = chain.fit_transform(ds).to_pandas()
    filled = df.x.fillna(df.x.mean())
    np.testing.assert_allclose(out.x, (filled - filled.mean()) / filled.std(ddof=0))
    assert chain.fit_status() is P.Preprocessor.FitStatus.FITTED
    back = P.Preprocessor.deserialize(chain.serialize())
    assert isinstance(P.Preprocessor.deserialize(pickle.dumps(chain)), P.Chain)
    with pytest.raises(ValueError, match="serialized preprocessor"):
        P.Preprocessor.deserialize("not base64 !")
    np.testing.assert_allclose(back.transform_batch(df.copy()).x, out.x)
    clone = pickle.loads(pickle.dumps(P.OneHotEncoder(["color"]).fit(ds)))
    assert clone.stats_["unique_values(color)"]["red"] == 2
    arrow = clone.transform_batch(pa.table({"color": ["red"]}))
    assert isinstance(arrow, pa.Table) and arrow.column("color").to_pylist() == [[0, 0, 1]]
    with pytest.raises(TypeError, match="transform_batch"):
        clone.transform_batch([1, 2])
    with pytest.raises(ValueError, match="one name per column"):
        P.StandardScaler(["a", "b"], output_columns=["c"])


def test_multi_hot_and_feature_hasher():
    ds = _LocalDataset.of(pd.DataFrame({"g": [["comedy", "action", "sports"],
                                              ["action", "comedy", "drama"], ["doc"]]}), 2)
    mh = P.MultiHotEncoder(["g"]).fit(ds)
    assert mh.stats_["unique_values(g)"] == {"action": 0, "comedy": 1, "doc": 2, "drama": 3,
                                             "sports": 4}
    assert [list(v) for v in mh.transform(ds).to_pandas().g] == \
        [[1, 1, 0, 0, 1], [1, 1, 0, 1, 0], [0, 0, 1, 0, 0]]
    top = P.MultiHotEncoder(["g"], max_categories={"g": 2}).fit(ds)
    assert top.stats_["unique_values(g)"] == {"action": 0, "comedy": 1}
    counts = pd.DataFrame({"I": [1, 1], "like": [1, 0], "dislike": [0, 1], "Python": [1, 1]})
    fh = P.FeatureHasher(["I", "like", "dislike", "Python"], num_features=8,
                         output_column="hashed").transform_batch(counts)
    expect = np.zeros((2, 8), dtype=int)
    for c in counts.columns:
        expect[:, P.text.simple_hash(c, 8)] += counts[c].to_numpy()
    assert [list(v) for v in fh.hashed] == expect.tolist()
    # the buckets Ray 2.60's simple_hash gives these names (its docstring's example is stale)
    assert [P.text.simple_hash(c, 8) for c in counts.columns] == [4, 7, 7, 3]


def test_discretizers_match_rays_documented_bins():
    df = pd.DataFrame({"value_1": [0.2, 1.4, 2.5, 6.2, 9.7, 2.1],
                       "value_2": [10, 15, 13, 12, 23, 25]})
    ds = _LocalDataset.of(df)
    out = P.UniformKBinsDiscretizer(["value_1", "value_2"], bins=4).fit_transform(ds).to_pandas()
    assert out.value_1.tolist() == [0, 0, 0, 2, 3, 0]  # Ray's docstring output
    assert out.value_2.tolist() == [0, 1, 0, 0, 3, 3]
    custom = P.CustomKBinsDiscretizer(["value_1"], bins=[0, 1, 4, 10]).transform_batch(df.copy())
    assert custom.value_1.tolist() == [0, 1, 1, 2, 2, 1]
    with pytest.raises(TypeError, match="integer"):
        P.UniformKBinsDiscretizer(["value_1"], bins=[1, 2]).fit(ds)
