"""Dataset.write_images, write_webdataset and write_tfrecords (a mixin of Dataset), on the
same write machinery as write_parquet: save `mode`, `min_rows_per_file`, `filename_provider`,
`concurrency`, `ray_remote_args`, atomic files."""
from __future__ import annotations

from typing import Any


class WriteMediaMixin:
    """The media writers of Dataset."""

    _plan: Any
    _last_stats: Any

    def _run_sink(self, sink: Any, ray_remote_args: dict[str, Any] | None, concurrency: int | None,
                  min_rows_per_file: int | None, num_rows_per_file: int | None) -> None:
        from ._internal.write import run_write

        if num_rows_per_file is not None:  # Ray's older name for min_rows_per_file
            if min_rows_per_file is not None:
                raise ValueError("give min_rows_per_file or num_rows_per_file (its older "
                                 "name), not both")
            min_rows_per_file = num_rows_per_file
        stats = run_write(self._plan, sink, f"Write{sink.get_name()}", ray_remote_args,
                          concurrency, min_rows_per_file)
        if stats is not None:
            self._last_stats = stats

    def write_images(self, path: str, column: str, file_format: str = "png", *,
                     filesystem: Any = None, try_create_dir: bool = True,
                     arrow_open_stream_args: dict[str, Any] | None = None, filename_provider: Any = None,
                     ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
                     mode: Any = "append") -> None:
        """Writes the image arrays of `column` as one `file_format` file per row (Pillow's
        formats: png, jpeg, bmp, tiff, ...); `filename_provider.get_filename_for_row` names
        them."""
        from ._internal.datasource.images import ImageDatasink

        sink = ImageDatasink(path, column, file_format, filesystem=filesystem,
                             try_create_dir=try_create_dir, mode=mode,
                             filename_provider=filename_provider,
                             open_stream_args=arrow_open_stream_args)
        self._run_sink(sink, ray_remote_args, concurrency, None, None)

    def write_webdataset(self, path: str, *, filesystem: Any = None, try_create_dir: bool = True,
                         arrow_open_stream_args: dict[str, Any] | None = None,
                         filename_provider: Any = None, min_rows_per_file: int | None = None,
                         ray_remote_args: dict[str, Any] | None = None, encoder: Any = True,
                         concurrency: int | None = None, num_rows_per_file: int | None = None,
                         mode: Any = "append") -> None:
        """Writes the rows as WebDataset tar shards (one per write task): a sample per row keyed
        by `__key__`, a member per column encoded by its suffix (`encoder`: True for the
        default, a callable on the row dict, or a list)."""
        from ._internal.datasource.webdataset import WebDatasetDatasink

        sink = WebDatasetDatasink(path, encoder, filesystem=filesystem,
                                  try_create_dir=try_create_dir, mode=mode,
                                  filename_provider=filename_provider,
                                  open_stream_args=arrow_open_stream_args)
        self._run_sink(sink, ray_remote_args, concurrency, min_rows_per_file, num_rows_per_file)

    def write_tfrecords(self, path: str, *, tf_schema: Any = None, filesystem: Any = None,
                        try_create_dir: bool = True, arrow_open_stream_args: dict[str, Any] | None = None,
                        filename_provider: Any = None, min_rows_per_file: int | None = None,
                        ray_remote_args: dict[str, Any] | None = None, concurrency: int | None = None,
                        num_rows_per_file: int | None = None, mode: Any = "append") -> None:
        """Writes the rows as tf.train.Example records in TFRecord files (one per write task);
        int, float and binary/string columns and lists of them."""
        from ._internal.datasource.tfrecords import TFRecordDatasink

        if tf_schema is not None:
            raise ValueError("write_tfrecords: ember.data does not support 'tf_schema'")
        sink = TFRecordDatasink(path, filesystem=filesystem, try_create_dir=try_create_dir,
                                mode=mode, filename_provider=filename_provider,
                                open_stream_args=arrow_open_stream_args)
        self._run_sink(sink, ray_remote_args, concurrency, min_rows_per_file, num_rows_per_file)
