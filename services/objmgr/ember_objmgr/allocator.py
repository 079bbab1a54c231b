"""ArenaAllocator: first-fit allocation of aligned byte ranges in a fixed-size arena, with
coalescing of adjacent free ranges. Pure logic."""
from __future__ import annotations

import bisect

ALIGN = 64


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class ArenaAllocator:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity - capacity % ALIGN
        self._starts: list[int] = [0] if self.capacity else []  # free ranges, sorted by start
        self._sizes: dict[int, int] = {0: self.capacity} if self.capacity else {}
        self._allocated: dict[int, int] = {}
        self.used = 0

    def alloc(self, size: int) -> int | None:
        """Offset of a free range of at least size bytes, or None."""
        need = aligned(max(size, 1))
        for i, start in enumerate(self._starts):
            free = self._sizes[start]
            if free >= need:
                del self._starts[i]
                del self._sizes[start]
                if free > need:
                    rest = start + need
                    self._starts.insert(i, rest)
                    self._sizes[rest] = free - need
                self._allocated[start] = need
                self.used += need
                return start
        return None

    def free(self, offset: int) -> None:
        size = self._allocated.pop(offset)
        self.used -= size
        i = bisect.bisect_left(self._starts, offset)
        # Merge with the following free range.
        if i < len(self._starts) and self._starts[i] == offset + size:
            size += self._sizes.pop(self._starts[i])
            del self._starts[i]
        # Merge with the preceding free range.
        if i > 0 and self._starts[i - 1] + self._sizes[self._starts[i - 1]] == offset:
            self._sizes[self._starts[i - 1]] += size
            return
        self._starts.insert(i, offset)
        self._sizes[offset] = size

    def largest_free(self) -> int:
        return max(self._sizes.values(), default=0)

    def size_of(self, offset: int) -> int:
        return self._allocated[offset]
