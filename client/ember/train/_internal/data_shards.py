"""`datasets=` → what each rank's `get_dataset_shard(name)` returns.

Written against Ray Data's public Dataset API, which `ember.data` follows: a dataset that the
DataConfig splits becomes `ds.streaming_split(world_size, equal=True)`, one iterator per rank
(disjoint; together every row once per epoch; each new pass over the iterators re-executes the
dataset); any other dataset goes whole to every rank as `ds.iterator()`. Ranks then call
`iter_torch_batches` / `iter_batches` on their iterator. Splits are made again for every start
of the worker group (a restart gets fresh iterators).
"""
from __future__ import annotations

from typing import Any

from ember.air.config import DataConfig


def validate(datasets: dict[str, Any] | None) -> dict[str, Any]:
    """The datasets dict, checked: names are strings, values look like Datasets."""
    if datasets is None:
        return {}
    if not isinstance(datasets, dict):
        raise TypeError(f"datasets must be a dict of name -> Dataset, got {type(datasets).__name__}")
    for name, ds in datasets.items():
        if not isinstance(name, str):
            raise TypeError(f"datasets keys must be strings, got {name!r}")
        if callable(ds) and not hasattr(ds, "streaming_split"):
            ds = ds()  # Ray accepts a function that returns the Dataset
            datasets = {**datasets, name: ds}
        if not hasattr(ds, "streaming_split"):
            raise TypeError(f"datasets[{name!r}] must be an ember.data Dataset (with streaming_split), "
                            f"got {type(ds).__name__}")
    return datasets


def make_shards(datasets: dict[str, Any], config: DataConfig | None, world_size: int) -> list[dict[str, Any]]:
    """One {name: iterator} per rank."""
    config = config or DataConfig()
    out: list[dict[str, Any]] = [{} for _ in range(world_size)]
    for name, ds in datasets.items():
        if config.splits(name):
            if config.execution_options is not None and hasattr(ds, "context"):
                ds.context.execution_options = config.execution_options
            its = ds.streaming_split(world_size, equal=True)
            for rank, it in enumerate(its):
                out[rank][name] = it
        else:
            for rank in range(world_size):
                out[rank][name] = ds.iterator()
    return out
