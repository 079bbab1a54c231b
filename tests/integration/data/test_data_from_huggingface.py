"""`ember.data.from_huggingface` on Hugging Face datasets built in the test (no hub): a map-style
Dataset (including a shuffled/selected view) and an IterableDataset become Ember datasets with
the same rows; a DatasetDict is refused naming its splits. `override_num_blocks` of from_arrow
and from_pandas cuts the blocks as asked."""
from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

import ember

datasets = pytest.importorskip("datasets", reason="the dev extra pins datasets; it is not installed")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(data_cluster):
    return data_cluster


def _rows(n):
    return {"id": list(range(n)), "text": [f"row {i}" for i in range(n)], "score": [i * 0.5 for i in range(n)]}


def test_a_map_style_dataset_and_its_views(cluster):
    hf = datasets.Dataset.from_dict(_rows(1000))
    ds = ember.data.from_huggingface(hf, override_num_blocks=4)
    assert ds.count() == 1000 and ds.num_blocks() == 4
    assert ds.schema().names == ["id", "text", "score"]
    assert sorted(r["id"] for r in ds.take_all()) == list(range(1000))
    view = hf.shuffle(seed=0).select(range(10))  # an indices mapping over the same table
    got = ember.data.from_huggingface(view).take_all()
    assert [r["id"] for r in got] == view["id"] and [r["text"] for r in got] == view["text"]
    assert ember.data.from_huggingface(hf).map_batches(lambda b: {"twice": b["score"] * 2}).sum("twice") == \
        pytest.approx(sum(i * 1.0 for i in range(1000)))


def test_an_iterable_dataset_is_read_lazily_in_batches(cluster):
    def gen():
        for i in range(5000):
            yield {"id": i, "text": f"row {i}"}

    hf = datasets.IterableDataset.from_generator(gen)
    ds = ember.data.from_huggingface(hf)
    assert sorted(r["id"] for r in ds.take_all()) == list(range(5000))
    assert ds.filter(lambda r: r["id"] % 1000 == 0).count() == 5


def test_what_it_refuses_names_the_problem(cluster):
    d = datasets.DatasetDict({"train": datasets.Dataset.from_dict(_rows(3)),
                              "test": datasets.Dataset.from_dict(_rows(2))})
    with pytest.raises(TypeError, match=r"DatasetDict with splits \['test', 'train'\].*dataset\['train'\]"):
        ember.data.from_huggingface(d)
    with pytest.raises(TypeError, match="expects a datasets.Dataset"):
        ember.data.from_huggingface([1, 2])
    with pytest.raises(ValueError, match="parallelism and concurrency apply to an IterableDataset"):
        ember.data.from_huggingface(d["train"], concurrency=2)


def test_override_num_blocks_of_arrow_and_pandas(cluster):
    t = pa.table({"x": list(range(10))})
    assert ember.data.from_arrow(t, override_num_blocks=3).num_blocks() == 3
    assert ember.data.from_arrow([t, t], override_num_blocks=4).count() == 20
    df = pd.DataFrame({"x": range(7)})
    ds = ember.data.from_pandas(df, override_num_blocks=7)
    assert ds.num_blocks() == 7 and sorted(r["x"] for r in ds.take_all()) == list(range(7))
    with pytest.raises(ValueError, match="override_num_blocks must be a positive int"):
        ember.data.from_arrow(t, override_num_blocks=0)
