"""Image files (Ray's read_images / write_images), decoded and encoded with Pillow.

Reading: one row per file, `{"image": ndarray}` (H x W x C, or H x W for one-channel modes such
as "L"); `size=(height, width)` resizes (bilinear), `mode` converts ("RGB", "L", ...). A file
Pillow cannot identify raises naming its path. Images of different shapes make a
variable-shape tensor column.

Writing: one file per row, the ndarray of `column` encoded as `file_format`.
"""
from __future__ import annotations

import io
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from ember.data import block as B

from .sinks import FileDatasink

IMAGE_EXTENSIONS = ["png", "jpg", "jpeg", "tif", "tiff", "bmp", "gif"]


def check_size(size: Any) -> tuple[int, int] | None:
    """`size` as (height, width), or an error naming what is wrong."""
    if size is None:
        return None
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise ValueError(f"read_images: size must be (height, width), got {size!r}")
    if not all(isinstance(v, (int, np.integer)) and v > 0 for v in size):
        raise ValueError(f"read_images: size must hold two positive ints, got {size!r}")
    return int(size[0]), int(size[1])


def check_mode(mode: Any) -> str | None:
    if mode is None:
        return None
    from PIL import Image

    if not isinstance(mode, str) or mode not in Image.MODES:
        raise ValueError(f"read_images: mode must be one of Pillow's modes {sorted(Image.MODES)}, "
                         f"got {mode!r}")
    return mode


def decode_image(data: bytes, path: str, size: tuple[int, int] | None,
                 mode: str | None) -> np.ndarray:
    """The image in `data` as an ndarray (resized, then converted, as Ray does)."""
    from PIL import Image, UnidentifiedImageError

    image: Any
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (UnidentifiedImageError, OSError) as e:
        raise ValueError(f"{path} is not an image Pillow can read ({e})") from None
    if size is not None:
        image = image.resize((size[1], size[0]), resample=Image.Resampling.BILINEAR)
    if mode is not None:
        image = image.convert(mode)
    return np.asarray(image)


def read_image_file(fs: Any, path: str, opts: dict[str, Any]) -> pa.Table:
    """One file as a one-row table {"image": ndarray}."""
    kwargs = dict(opts.get("open_stream_args", {}))
    with fs.open_input_stream(path, **kwargs) as f:
        data = f.read()
    arr = decode_image(data, path, opts.get("size"), opts.get("mode"))
    return pa.table({"image": B.column_to_arrow(np.stack([arr]))})


class ImageDatasink(FileDatasink):
    """One image file per row; names `{write_uuid}_{task:06}_{block:06}_{row:06}.{ext}` or the
    filename_provider's get_filename_for_row."""

    def __init__(self, path: str, column: str, file_format: str, **kwargs: Any) -> None:
        from PIL import Image

        provider = kwargs.pop("filename_provider", None)
        super().__init__(path, "images", **kwargs)
        if provider is not None and not callable(getattr(provider, "get_filename_for_row", None)):
            raise TypeError("write_images: filename_provider must have a get_filename_for_row "
                            f"method (a FilenameProvider), got {type(provider).__name__}")
        self.filename_provider = provider
        if not isinstance(column, str):
            raise TypeError(f"write_images: column must be a str, got {type(column).__name__}")
        Image.init()
        fmt = str(file_format).lower()
        if fmt.upper() not in Image.SAVE and {"jpg": "JPEG", "tif": "TIFF"}.get(fmt) not in Image.SAVE:
            raise ValueError(f"write_images: Pillow cannot write file_format {file_format!r}")
        self.image_column = column
        self.file_format = fmt

    def get_name(self) -> str:
        return "Image"

    @property
    def ext(self) -> str:
        return self.file_format

    def write(self, blocks: Iterator[pa.Table], ctx: Any = None) -> str:
        self._ctx = ctx
        task_idx = ctx.task_idx if ctx is not None else 0
        last = ""
        for block_idx, block in enumerate(b for b in blocks if b.num_rows):
            if self.image_column not in block.column_names:
                raise KeyError(f"write_images: no column {self.image_column!r}; the dataset has "
                               f"{block.column_names}")
            for row_idx, row in enumerate(B.iter_rows(block)):
                name = self._row_name(row, task_idx, block_idx, row_idx)
                last = self._write_bytes(name, _encode(row[self.image_column], self.file_format))
        return last

    def _row_name(self, row: dict[str, Any], task_idx: int, block_idx: int, row_idx: int) -> str:
        if self.filename_provider is None:
            return (f"{self.write_uuid}_{task_idx:06}_{block_idx:06}_{row_idx:06}."
                    f"{self.file_format}")
        name = self.filename_provider.get_filename_for_row(row, self.write_uuid, task_idx,
                                                          block_idx, row_idx)
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"filename_provider returned {name!r}; it must return a file name "
                             "(a non-empty string without '/')")
        return name

    def _write_bytes(self, name: str, data: bytes) -> str:
        import pyarrow.fs as pafs

        final = f"{self.path.rstrip('/')}/{name}"
        local = isinstance(self.fs, pafs.LocalFileSystem)
        target = f"{self.path.rstrip('/')}/.{name}.tmp" if local else final
        with self.fs.open_output_stream(target, **self.open_stream_args) as out:
            out.write(data)
        if local:
            self.fs.move(target, final)
        return final


def _encode(value: Any, file_format: str) -> bytes:
    from PIL import Image

    arr = np.asarray(value)
    try:
        image = Image.fromarray(arr)
    except TypeError as e:
        raise ValueError(f"write_images: cannot make an image of an array of shape {arr.shape} "
                         f"and dtype {arr.dtype}: {e}") from None
    buf = io.BytesIO()
    image.save(buf, format={"jpg": "JPEG", "tif": "TIFF"}.get(file_format, file_format.upper()))
    return buf.getvalue()
