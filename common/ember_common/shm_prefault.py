"""Prefaulting a shared mapping: backing its pages (and this process's page-table entries for
them) before objects are written, so that a put pays a plain memory copy and no page fault.

`populate(mm, start, end)` asks the kernel to populate the range in one call
(madvise(MADV_POPULATE_WRITE), Linux 5.14+), made through ctypes so that the GIL is released
while the kernel works; it returns False where the kernel cannot. `Prefaulter` runs populate
over a prefix of the arena on a daemon thread, in chunks, so that start-up does not wait for
it; on older kernels it allocates the file's pages instead (posix_fallocate, which keeps the
contents), leaving only this process's page-table entries to be faulted in.
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
from typing import Any

log = logging.getLogger(__name__)

MADV_POPULATE_WRITE = 23  # linux/mman.h
CHUNK_BYTES = 64 * 1024 * 1024

_madvise: Any = None  # libc's madvise, where there is one
try:
    _madvise = ctypes.CDLL(None, use_errno=True).madvise
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int
except (OSError, AttributeError):  # no libc symbols here: populate reports it cannot
    _madvise = None


def _address(mm: mmap.mmap) -> int:
    c = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(c)
    finally:
        del c  # drop the buffer export, so the mapping can still be closed


def populate(mm: mmap.mmap, start: int, end: int) -> bool:
    """Backs and maps the pages of mm[start:end] for writing (page-aligned outwards); False if
    the kernel cannot (pages are then faulted in on first write)."""
    start -= start % mmap.PAGESIZE
    end = min(end, len(mm))
    if end <= start:
        return True
    return _madvise is not None and int(_madvise(_address(mm) + start, end - start, MADV_POPULATE_WRITE)) == 0


class Prefaulter:
    """Populates mm[0:limit] on a daemon thread, lowest offsets first (where first-fit
    allocation places objects). `done` is set when it has finished or stopped."""

    def __init__(self, mm: mmap.mmap, limit: int, path: str = "") -> None:
        self._mm = mm
        self._path = path
        self.limit = min(limit, len(mm))
        self.populated = 0
        self._stop = threading.Event()
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arena-prefault", daemon=True)

    def start(self) -> Prefaulter:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while self.populated < self.limit and not self._stop.is_set():
                end = min(self.populated + CHUNK_BYTES, self.limit)
                if not populate(self._mm, self.populated, end):
                    self._fallocate()
                    return
                self.populated = end
        except (ValueError, OSError) as e:  # the mapping was closed under us (shutdown)
            log.debug("arena prefault stopped: %s", e)
        finally:
            self.done.set()

    def _fallocate(self) -> None:
        if self._path:
            fd = os.open(self._path, os.O_RDWR)
            try:
                os.posix_fallocate(fd, 0, self.limit)
            finally:
                os.close(fd)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
