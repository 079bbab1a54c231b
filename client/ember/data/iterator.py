"""DataIterator: batches and rows out of a stream of blocks (prefetching, local shuffle, torch).

`Dataset.iter_batches` / `iter_rows` / `iter_torch_batches` and every split of
`streaming_split` go through here. Blocks are read zero-copy from the object store; batches
that cross block boundaries are concatenated; a background thread fetches the next blocks while
the consumer works on the current batch.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Generator, Iterator

import numpy as np
import pyarrow as pa

import ember

from . import block as B
from ._internal.transforms import rebatch

_END = object()


def _fetch(bundles: Iterator[Any], prefetch: int) -> Generator[pa.Table, None, None]:
    """Blocks of the bundles, fetched `prefetch` blocks ahead by a background thread."""
    if prefetch <= 0:
        for b in bundles:
            yield ember.get(b.ref)
        return
    q: queue.Queue[Any] = queue.Queue(maxsize=prefetch)  # blocks, then _END or the pump's error
    stop = threading.Event()

    def pump() -> None:
        try:
            for b in bundles:
                blk = ember.get(b.ref)
                while not stop.is_set():
                    try:
                        q.put(blk, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    break
            q.put(_END)
        except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
            q.put(e)
        finally:
            close = getattr(bundles, "close", None)
            if close is not None:
                close()

    t = threading.Thread(target=pump, name="ember-data-prefetch", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.05)


def _local_shuffle(batches: Iterator[pa.Table], batch_size: int, buffer_rows: int,
                   seed: int | None) -> Iterator[pa.Table]:
    rng = np.random.default_rng(seed)
    buf: pa.Table | None = None
    for blk in batches:
        buf = blk if buf is None else B.concat([buf, blk])
        while buf.num_rows >= buffer_rows + batch_size:
            perm = rng.permutation(buf.num_rows)
            yield buf.take(pa.array(perm[:batch_size]))
            buf = buf.take(pa.array(np.sort(perm[batch_size:])))
    if buf is not None and buf.num_rows:
        buf = buf.take(pa.array(rng.permutation(buf.num_rows)))
        for off in range(0, buf.num_rows, batch_size):
            yield buf.slice(off, batch_size)


class DataIterator:
    """Iterates a dataset (or one split of it) as batches or rows."""

    def __init__(self, source: Callable[[], Iterator[Any]], stats: Callable[[], str] | None = None,
                 name: str = "dataset") -> None:
        self._source = source
        self._stats = stats
        self._name = name

    def __repr__(self) -> str:
        return f"DataIterator({self._name})"

    def _blocks(self, prefetch: int) -> Generator[pa.Table, None, None]:
        return _fetch(self._source(), prefetch)

    def iter_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256,
                     batch_format: str | None = "default", drop_last: bool = False,
                     local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None,
                     _collate_fn: Callable[[Any], Any] | None = None) -> Iterator[Any]:
        """Batches of batch_size rows (None: one per block) in batch_format."""
        if batch_format not in B.VALID_BATCH_FORMATS:
            raise ValueError(f"batch_format must be one of 'default', 'numpy', 'pandas', 'pyarrow'; "
                             f"got {batch_format!r}")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 or None, got {batch_size}")
        blocks = self._blocks(max(0, prefetch_batches))
        try:
            if local_shuffle_buffer_size:
                batches = _local_shuffle(blocks, batch_size or 256, local_shuffle_buffer_size,
                                         local_shuffle_seed)
            else:
                batches = rebatch(blocks, batch_size)
            for tbl in batches:
                if drop_last and batch_size is not None and tbl.num_rows < batch_size:
                    continue
                batch = B.block_to_batch(tbl, batch_format)
                yield _collate_fn(batch) if _collate_fn is not None else batch
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                close()

    def iter_rows(self, *, prefetch_batches: int = 1) -> Iterator[dict[str, Any]]:
        """Rows as dicts."""
        blocks = self._blocks(max(0, prefetch_batches))
        try:
            for blk in blocks:
                yield from B.iter_rows(blk)
        finally:
            blocks.close()

    def iter_torch_batches(self, *, prefetch_batches: int = 1, batch_size: int | None = 256,
                           dtypes: Any = None, device: Any = "auto",
                           collate_fn: Callable[[dict[str, np.ndarray]], Any] | None = None,
                           drop_last: bool = False, local_shuffle_buffer_size: int | None = None,
                           local_shuffle_seed: int | None = None, pin_memory: bool = False) -> Iterator[Any]:
        """Batches as dicts of torch tensors (or what collate_fn makes of numpy batches)."""
        import torch

        if device == "auto":
            dev = torch.device("cuda") if torch.cuda.is_available() and ember.get_gpu_ids() \
                else torch.device("cpu")
        else:
            dev = torch.device(device) if not isinstance(device, torch.device) else device

        def convert(batch: dict[str, np.ndarray]) -> Any:
            if collate_fn is not None:
                return collate_fn(batch)
            out = {}
            for k, v in batch.items():
                dt = dtypes.get(k) if isinstance(dtypes, dict) else dtypes
                if v.dtype == object:
                    raise TypeError(f"column {k!r} holds Python objects ({type(v[0]).__name__}) "
                                    "and cannot become a tensor; pass a collate_fn")
                arr = v if v.flags.writeable else np.array(v)
                t = torch.as_tensor(arr, dtype=dt)
                if pin_memory and dev.type == "cpu" and torch.cuda.is_available():
                    t = t.pin_memory()
                out[k] = t.to(dev)
            return out

        yield from self.iter_batches(prefetch_batches=prefetch_batches, batch_size=batch_size,
                                     batch_format="numpy", drop_last=drop_last,
                                     local_shuffle_buffer_size=local_shuffle_buffer_size,
                                     local_shuffle_seed=local_shuffle_seed, _collate_fn=convert)

    def materialize(self) -> Any:
        """The rows of this iterator as a MaterializedDataset."""
        from ._internal.plan import InputData
        from .dataset import MaterializedDataset

        return MaterializedDataset(InputData(name="InputData", inputs=[], bundles=list(self._source())))

    def stats(self) -> str:
        return self._stats() if self._stats is not None else ""
