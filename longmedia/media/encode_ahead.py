"""Decode & Save's hand-over between the VAE and the mp4 writer: the writer runs one chunk behind, on its own thread.

Without it the device waits while the CPU converts and h264-encodes each finished chunk (17 frames), and the CPU
waits while the device decodes the next one. PyAV releases the GIL inside the encoder, so one worker thread lets
the two overlap. The frames reach the writer in order, unchanged, so the file is the same.

The caller calls `wait` before it copies the next chunk off the device, so RAM holds one chunk of frames, as
without the thread; the device's decode of that next chunk is what overlaps the encode. A hand-over waits too, so
no more than one chunk is ever in flight. An error of the writer is raised in the caller's thread at the next
`wait`, hand-over or `finish`; `discard` (after an error or Cancel) waits for the chunk in flight and drops what
it raised.

On a CPU-only ComfyUI (`--cpu`) the VAE's chunks are already in RAM and the CPU has nothing to overlap with, so the
writer runs inline (`threaded=False`), as before.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch


class EncodeAhead:
    """`write(frames)` for each chunk, one chunk behind the caller, on one worker thread."""

    def __init__(self, write: Callable[[torch.Tensor], None], threaded: bool = True):
        self._write = write
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="longmedia-mp4") if threaded else None
        self._pending: Future | None = None
        self.handed = 0

    def __call__(self, frames: torch.Tensor) -> None:
        self.wait()
        self.handed += 1
        if self._pool is None:
            self._write(frames)
            return
        self._pending = self._pool.submit(self._run, frames)

    def _run(self, frames: torch.Tensor) -> None:
        with torch.inference_mode():       # inference mode is per thread; ComfyUI runs nodes inside it
            self._write(frames)

    def wait(self) -> None:
        """Until the chunk in flight is written; raise what the writer raised."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()               # the writer's error, raised here

    def finish(self) -> None:
        """Wait for the last chunk to be written; raise what the writer raised."""
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def discard(self) -> None:
        """After a failure or Cancel: let the chunk in flight end, drop its result, stop the thread."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.exception()            # waits; an error of the writer is not the failure being reported
        if self._pool is not None:
            self._pool.shutdown(wait=True)
