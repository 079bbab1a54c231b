"""read_images, read_webdataset and read_tfrecords: file readers on the machinery of read_api
(path listing, grouping files into read tasks, override_num_blocks, filesystems)."""
from __future__ import annotations

from typing import Any

from ._internal.datasource import images as I
from ._internal.datasource import webdataset as W
from ._internal.datasource.file_based import FileDatasource
from .dataset import Dataset
from .read_api import _partitioning, _read, _refuse


def _source(fmt: str, paths: Any, filesystem: Any, options: dict[str, Any], include_paths: bool,
            file_extensions: Any, ignore_missing_paths: bool, partitioning: Any, shuffle: Any,
            open_args: dict[str, Any] | None, what: str) -> FileDatasource:
    if shuffle not in (None, "files"):
        raise ValueError(f"{what}: shuffle must be None or 'files', got {shuffle!r}")
    if open_args is not None:
        if not isinstance(open_args, dict):
            raise TypeError(f"{what}: the open-stream arguments must be a dict, got "
                            f"{type(open_args).__name__}")
        options = {**options, "open_stream_args": dict(open_args)}
    return FileDatasource(paths, fmt, filesystem, options, include_paths, file_extensions,
                          ignore_missing_paths, _partitioning(partitioning), shuffle)


def read_images(paths: str | list[str], *, filesystem: Any = None, parallelism: int = -1,
                meta_provider: Any = None, ray_remote_args: dict[str, Any] | None = None,
                arrow_open_file_args: dict[str, Any] | None = None, partition_filter: Any = None,
                partitioning: Any = None, size: tuple[int, int] | None = None,
                mode: str | None = None, include_paths: bool = False,
                ignore_missing_paths: bool = False, shuffle: Any = None,
                file_extensions: list[str] | None = I.IMAGE_EXTENSIONS,
                concurrency: int | None = None, override_num_blocks: int | None = None,
                num_cpus: float | None = None, num_gpus: float | None = None,
                memory: float | None = None) -> Dataset:
    """One row per image file: {"image": ndarray H x W x C (H x W for one-channel modes)}, and
    "path" with include_paths. `size=(height, width)` resizes, `mode` ("RGB", "L", ...)
    converts; files are picked by `file_extensions` (png, jpg, jpeg, tif, tiff, bmp, gif)."""
    _refuse("read_images", meta_provider=meta_provider, partition_filter=partition_filter)
    opts = {"size": I.check_size(size), "mode": I.check_mode(mode)}
    ds = _source("images", paths, filesystem, opts, include_paths, file_extensions,
                 ignore_missing_paths, partitioning, shuffle, arrow_open_file_args, "read_images")
    return _read(ds, "ReadImage", parallelism, override_num_blocks, concurrency, num_cpus,
                 num_gpus, memory, ray_remote_args)


def read_webdataset(paths: str | list[str], *, filesystem: Any = None, parallelism: int = -1,
                    arrow_open_stream_args: dict[str, Any] | None = None, meta_provider: Any = None,
                    partition_filter: Any = None, decoder: Any = True, fileselect: Any = None,
                    filerename: Any = None, suffixes: Any = None, verbose_open: bool = False,
                    shuffle: Any = None, include_paths: bool = False,
                    file_extensions: list[str] | None = None, concurrency: int | None = None,
                    override_num_blocks: int | None = None, expand_json: bool = False) -> Dataset:
    """One row per sample of WebDataset tar shards: `__key__`, `__url__` and a column per member
    suffix, decoded by `decoder` (default: txt, cls, json, npy, images, pickle, ...).
    `fileselect` picks members by name, `filerename` renames them, `suffixes` picks suffixes."""
    _refuse("read_webdataset", meta_provider=meta_provider, partition_filter=partition_filter)
    if expand_json:
        raise ValueError("read_webdataset: ember.data does not support 'expand_json'")
    W.check_decoder(decoder)
    W.check_selector("fileselect", fileselect)
    W.check_selector("suffixes", suffixes)
    for r in filerename if isinstance(filerename, list) else [filerename]:
        if r is not None and not callable(r):
            raise TypeError("read_webdataset: filerename must be a callable or a list of "
                            f"callables, got {type(r).__name__}")
    opts = {"decoder": decoder, "fileselect": fileselect, "filerename": filerename,
            "suffixes": suffixes, "verbose_open": bool(verbose_open)}
    ds = _source("webdataset", paths, filesystem, opts, include_paths, file_extensions, False,
                 None, shuffle, arrow_open_stream_args, "read_webdataset")
    return _read(ds, "ReadWebDataset", parallelism, override_num_blocks, concurrency, None, None,
                 None, None)


def read_tfrecords(paths: str | list[str], *, filesystem: Any = None, parallelism: int = -1,
                   num_cpus: float | None = None, num_gpus: float | None = None,
                   memory: float | None = None, ray_remote_args: dict[str, Any] | None = None,
                   arrow_open_stream_args: dict[str, Any] | None = None, meta_provider: Any = None,
                   partition_filter: Any = None, include_paths: bool = False,
                   ignore_missing_paths: bool = False, tf_schema: Any = None, shuffle: Any = None,
                   file_extensions: list[str] | None = None, concurrency: int | None = None,
                   override_num_blocks: int | None = None,
                   tfx_read_options: Any = None) -> Dataset:
    """One row per tf.train.Example of TFRecord files (checksums verified; no TensorFlow
    needed). As in Ray, this runs a first pass over the data: features that never hold more
    than one value become plain columns, the others stay lists."""
    from ._internal.datasource import tfrecords as T

    _refuse("read_tfrecords", meta_provider=meta_provider, partition_filter=partition_filter,
            tf_schema=tf_schema, tfx_read_options=tfx_read_options)
    ds = _source("tfrecords", paths, filesystem, {}, include_paths, file_extensions,
                 ignore_missing_paths, None, shuffle, arrow_open_stream_args, "read_tfrecords")
    lists = _read(ds, "ReadTFRecord", parallelism, override_num_blocks, concurrency, num_cpus,
                  num_gpus, memory, ray_remote_args)
    sizes: dict[str, int] = {}
    for row in lists.map_batches(T.max_list_sizes, batch_format="pyarrow",
                                 batch_size=None).iter_rows():
        for k, v in row.items():
            if v is not None and k != "path":
                sizes[k] = max(sizes.get(k, 0), v)
    single = sorted(k for k, n in sizes.items() if n == 1)
    if not single:
        return lists
    return lists.map_batches(T.unwrap_single, batch_format="pyarrow", batch_size=None,
                             fn_kwargs={"single": single})
