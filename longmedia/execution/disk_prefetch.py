"""Reading the next blocks' weights from disk while the current block computes.

Where host RAM cannot hold every weight that travels to the card, ComfyUI reads the rest from the checkpoint on
every model call (comfy-aimdo reads the file through the page cache, one weight at a time, when the weight is cast).
Those reads wait on the disk. `DiskPrefetch` asks the kernel to read the byte ranges of the next `ahead` blocks
into the page cache (`posix_fadvise(..., POSIX_FADV_WILLNEED)`) from one background thread, as each block starts,
so that the cast finds them there. It moves no tensor and changes no value: the math is untouched.

The window is small on purpose: RAM that pins do not hold is a few GiB, and a page cache under a cyclic scan of
the whole model evicts what it read too early. `ahead` blocks of weights are what the plan keeps free for it
(`planning/host_ram.py`, `prefetch_window_bytes`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", 3)


@dataclass(frozen=True)
class FileSlice:
    """A weight's bytes in its checkpoint: the open file's descriptor, the offset and the length."""

    fd: int
    offset: int
    size: int


Advise = Callable[[int, int, int, int], None]  # os.posix_fadvise's signature


def _fadvise() -> Advise | None:
    return getattr(os, "posix_fadvise", None)  # absent on Windows and macOS: no prefetch there


class DiskPrefetch:
    """Per run: `on_block(i)` queues the file ranges of blocks i+1 .. i+ahead (block 0 .. ahead-1 on the first
    block of a model call) for one background thread; `close()` waits for it and ends it. `slices(i)` gives block
    i's ranges that will be read from the file this call (pinned weights excluded by the caller)."""

    def __init__(self, slices: Callable[[int], Sequence[FileSlice]], blocks: int, ahead: int,
                 advise: Advise | None = None) -> None:
        self._slices, self._blocks, self._ahead = slices, int(blocks), max(0, int(ahead))
        self._advise = advise if advise is not None else _fadvise()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self._queued: set[int] = set()   # blocks queued in this model call
        self._lock = threading.Lock()
        self.advised_bytes = 0
        self.advised_blocks = 0
        self.failures: list[str] = []

    @property
    def active(self) -> bool:
        return self._advise is not None and self._ahead > 0 and self._blocks > 0

    def on_block(self, index: int) -> None:
        if not self.active:
            return
        if index == 0:
            self._queued.clear()
            wanted = range(0, min(self._blocks, self._ahead + 1))
        else:
            wanted = range(index + 1, min(self._blocks, index + 1 + self._ahead))
        for block in wanted:
            if block in self._queued:
                continue
            self._queued.add(block)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="longmedia-prefetch")
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(self._pool.submit(self._read_ahead, block))

    def _read_ahead(self, block: int) -> None:
        total = 0
        for s in self._slices(block):
            try:
                self._advise(s.fd, s.offset, s.size, WILLNEED)
            except OSError as error:  # named reason: a closed or unsupported file; the cast reads it anyway
                with self._lock:
                    self.failures.append(f"block {block}: posix_fadvise failed: {error}")
                return
            total += s.size
        with self._lock:
            self.advised_bytes += total
            self.advised_blocks += 1

    def close(self) -> None:
        """Wait for the queued advice and end the thread (nothing is left running after a run)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._pending.clear()


__all__ = ["DiskPrefetch", "FileSlice", "WILLNEED"]
