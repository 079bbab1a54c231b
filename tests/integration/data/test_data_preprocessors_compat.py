"""ember.data.preprocessors on a real embedded cluster over parquet files in a tmp dir: fitted
stats and transformed columns compared with numpy/pandas on the same data, and a fitted
preprocessor shipped to tasks (pickled) and round-tripped through serialize()."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ember
from ember.data.preprocessors import (
    Chain,
    Concatenator,
    CountVectorizer,
    LabelEncoder,
    MinMaxScaler,
    OneHotEncoder,
    Preprocessor,
    PreprocessorNotFittedException,
    SimpleImputer,
    StandardScaler,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(data_cluster):
    return data_cluster


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("pp")
    rng = np.random.default_rng(3)
    n = 2000
    df = pd.DataFrame({"a": rng.normal(5, 2, n), "b": rng.integers(-10, 10, n).astype(float),
                       "color": rng.choice(["red", "green", "blue", "cyan"], n, p=[.4, .3, .2, .1]),
                       "label": rng.choice(["cat", "dog"], n),
                       "doc": rng.choice(["x y", "y z z", "x"], n)})
    df.loc[df.index % 13 == 0, "b"] = np.nan
    for i in range(4):
        pq.write_table(pa.Table.from_pandas(df.iloc[i * n // 4:(i + 1) * n // 4],
                                            preserve_index=False), d / f"{i}.parquet")
    return str(d), df


def test_scaler_and_one_hot_fit_transform(cluster, data):
    path, df = data
    ds = ember.data.read_parquet(path)
    pp = Chain(StandardScaler(["a"]), OneHotEncoder(["color"], output_columns=["color_1h"]),
               MinMaxScaler(["b"]))
    with pytest.raises(PreprocessorNotFittedException):
        pp.transform(ds)
    out = pp.fit_transform(ds).to_pandas()
    scaler = pp.preprocessors[0]
    assert scaler.stats_["mean(a)"] == pytest.approx(df.a.mean())
    assert scaler.stats_["std(a)"] == pytest.approx(df.a.std(ddof=0))
    np.testing.assert_allclose(np.sort(out.a), np.sort((df.a - df.a.mean()) / df.a.std(ddof=0)))
    cats = sorted(df.color.unique())
    assert pp.preprocessors[1].stats_["unique_values(color)"] == {c: i for i, c in enumerate(cats)}
    got = sorted((c, tuple(v)) for c, v in zip(out.color, out.color_1h, strict=True))
    assert got == sorted((c, tuple(int(c == k) for k in cats)) for c in df.color)
    b = df.b.dropna()
    np.testing.assert_allclose(np.sort(out.b.dropna()), np.sort((b - b.min()) / (b.max() - b.min())))


def test_imputer_label_encoder_concatenator(cluster, data):
    path, df = data
    ds = ember.data.read_parquet(path)
    imp = SimpleImputer(["b"], strategy="mean").fit(ds)
    assert imp.stats_["mean(b)"] == pytest.approx(df.b.mean())
    le = LabelEncoder("label", output_column="y").fit(ds)
    out = Concatenator(["a", "b"], output_column_name="features", dtype=np.float32).transform(
        le.transform(imp.transform(ds))).to_pandas()
    assert "a" not in out.columns and out.features.iloc[0].dtype == np.float32
    assert not np.isnan(np.stack(out.features)).any()
    assert sorted(out.y.unique()) == [0, 1]
    assert (out.label == "dog").sum() == (out.y == 1).sum() == (df.label == "dog").sum()


def test_count_vectorizer_and_serialized_preprocessor(cluster, data):
    path, df = data
    ds = ember.data.read_parquet(path)
    cv = CountVectorizer(["doc"], output_columns=["counts"]).fit(ds)
    tokens = pd.Series([t for d in df.doc for t in d.split(" ")]).value_counts()
    assert dict(cv.stats_["token_counts(doc)"]) == tokens.to_dict()
    back = Preprocessor.deserialize(cv.serialize())
    out = back.transform(ds).to_pandas()
    vocab = sorted(tokens.index, key=lambda t: (-tokens[t], t))
    for doc, vec in zip(out.doc, out.counts, strict=True):
        assert list(vec) == [doc.split(" ").count(t) for t in vocab]
    assert len(out) == len(df)
