"""Ember Data: Ray Data's API on Ember — streaming datasets of Arrow blocks.

    import ember as ray
    ds = ray.data.read_parquet("s3://bucket/training_data/")
    ds = ds.map(tokenize).filter(lambda r: len(r["tokens"]) <= 4096).random_shuffle()
    for batch in ds.iter_batches(batch_size=256): ...

Datasets are lazy plans; consuming one runs a streaming executor in the driver that launches
tasks (or actor-pool calls) per block under a memory budget derived from the object store.
"""
from __future__ import annotations

from . import aggregate, block, datatype, expressions
from ._consume import Schema
from ._internal.compute import ActorPoolStrategy, TaskPoolStrategy
from .context import DataContext, ExecutionOptions, ExecutionResources
from .dataset import Dataset, MaterializedDataset
from .datasource import Datasink, Datasource, FilenameProvider, ReadTask, SaveMode
from .grouped import AggregateFn, Count, GroupedData, Max, Mean, Min, Std, Sum
from .iterator import DataIterator
from .read_api import (
    from_arrow,
    from_huggingface,
    from_items,
    from_numpy,
    from_pandas,
    from_torch,
    range,
    range_tensor,
    read_binary_files,
    read_csv,
    read_datasource,
    read_json,
    read_numpy,
    read_parquet,
    read_sql,
    read_text,
)
from .read_media import read_images, read_tfrecords, read_webdataset


def __getattr__(name: str) -> object:
    """`ember.data.preprocessors` imported on first use (it loads pandas-heavy modules)."""
    if name == "preprocessors":
        import importlib

        return importlib.import_module(".preprocessors", __name__)
    raise AttributeError(f"module 'ember.data' has no attribute {name!r}")


__all__ = [
    "ActorPoolStrategy", "AggregateFn", "Count", "DataContext", "DataIterator", "Dataset",
    "Datasink", "Datasource", "FilenameProvider", "ReadTask", "SaveMode", "read_datasource", "read_sql",
    "ExecutionOptions", "ExecutionResources", "GroupedData", "MaterializedDataset", "Max", "Mean",
    "Min", "Schema", "Std", "Sum", "TaskPoolStrategy", "block", "from_arrow", "from_huggingface", "from_items",
    "from_numpy", "from_pandas", "from_torch", "range", "range_tensor", "read_binary_files",
    "read_csv", "read_json", "read_numpy", "read_parquet", "read_text", "read_images",
    "read_tfrecords", "read_webdataset", "aggregate", "datatype",
    "expressions", "preprocessors",
]
