"""The sink a chunked video decoder writes into, in place of the whole-video buffer it would preallocate.

ComfyUI's H3 video VAE decodes 17-frame temporal chunks and writes each finished chunk into its output buffer in
order (`dec[:, :, a:b].copy_(part)`, reading `dec.shape[2]`). A `ChunkSink` takes those writes and hands each
chunk's frames on as they come, so RAM holds one chunk, never the video (`comfy/decode_save.py` is the glue).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ChunkWritten:
    """One chunk the decoder finished: frames [start, stop) of `total`."""

    start: int
    stop: int
    total: int
    host_bytes: int


class ChunkSink:
    """Stands where `VAE.decode` passes its preallocated video: [1, 3, T, H, W], written in order, chunk by chunk.

    Each write is converted to `dtype` on the host (stock's `copy_` into its buffer on the intermediate device)
    and handed to `consume` as frames [n, H, W, 3] (stock's `movedim(1, -1)`); nothing is kept after it.
    """

    def __init__(self, shape, dtype: torch.dtype, consume: Callable[[torch.Tensor], None],
                 on_chunk: Callable[[ChunkWritten], None], check_cancel: Callable[[], None],
                 ready: Callable[[], None] = lambda: None, room: Callable[[int], object] = lambda n: None):
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self._consume, self._on_chunk, self._check_cancel, self._ready = consume, on_chunk, check_cancel, ready
        self._room = room  # called with a chunk's host bytes before it is copied there (host_ram: pins freed)
        self.written = 0
        self.chunks = 0
        self.largest_frames = 0
        self.largest_bytes = 0

    def __getitem__(self, index) -> "_Window":
        if not (isinstance(index, tuple) and len(index) == 5 and all(isinstance(s, slice) for s in index)
                and all(s == slice(None) for i, s in enumerate(index) if i != 2) and index[2].step is None):
            raise TypeError(f"ChunkSink takes [:, :, a:b, :, :] writes, as MiniMaxH3VideoVAE.decode_temporal makes; "
                            f"got {index!r}")
        start, stop, _ = index[2].indices(self.shape[2])
        return _Window(self, start, stop)

    def copy_(self, src: torch.Tensor) -> "ChunkSink":
        self.write(0, src)
        return self

    def write(self, start: int, src: torch.Tensor) -> None:
        if start != self.written:
            raise RuntimeError(f"the VAE wrote frames from {start} after {self.written} were written: its chunked io "
                               "no longer writes in order, which Decode & Save relies on")
        if src.ndim != 5 or src.shape[0] != 1 or tuple(src.shape[3:]) != tuple(self.shape[3:]):
            raise RuntimeError(f"the VAE wrote a {tuple(src.shape)} chunk into a {tuple(self.shape)} video")
        self._check_cancel()
        self._ready()                  # the chunk before is written: one chunk of frames in RAM, never two
        self._room(src.numel() * torch.tensor([], dtype=self.dtype).element_size())
        host = src.to(device="cpu", dtype=self.dtype)
        n = host.shape[2]
        self.chunks += 1
        self.largest_frames = max(self.largest_frames, n)
        self.largest_bytes = max(self.largest_bytes, host.numel() * host.element_size())
        self._consume(host[0].movedim(0, -1))
        self.written += n
        self._on_chunk(ChunkWritten(start, self.written, self.shape[2], host.numel() * host.element_size()))
        del host


class _Window:
    def __init__(self, sink: ChunkSink, start: int, stop: int):
        self._sink, self._start, self._stop = sink, start, stop
        self.shape = torch.Size((*sink.shape[:2], stop - start, *sink.shape[3:]))

    def copy_(self, src: torch.Tensor) -> "_Window":
        if src.shape[2] != self._stop - self._start:
            raise RuntimeError(f"the VAE wrote {src.shape[2]} frames into a window of {self._stop - self._start}")
        self._sink.write(self._start, src)
        return self
