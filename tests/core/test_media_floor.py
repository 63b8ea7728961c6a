"""The media floor without ComfyUI: the sink a chunked decoder writes into, and Decode & Save's report kind."""

from __future__ import annotations

import pytest
import torch

from longmedia.media.chunk_sink import ChunkSink
from longmedia.report.decode_save import CHUNKED, DecodeSaveReport


def _sink(frames: list, chunks: list, cancels: list | None = None, total: int = 10) -> ChunkSink:
    return ChunkSink((1, 3, total, 4, 6), torch.float32, frames.append, chunks.append,
                     lambda: cancels.append(1) if cancels is not None else None)


def test_the_sink_hands_each_chunk_on_in_order_as_frames_and_keeps_none():
    torch.manual_seed(3)
    video = torch.rand(1, 3, 10, 4, 6, dtype=torch.float64)
    frames, chunks, cancels = [], [], []
    sink = _sink(frames, chunks, cancels)
    sink[:, :, 0:4, :, :].copy_(video[:, :, 0:4])
    sink[:, :, 4:10, :, :].copy_(video[:, :, 4:10])
    assert sink.written == 10 and sink.chunks == 2 and len(cancels) == 2
    got = torch.cat(frames)
    assert got.shape == (10, 4, 6, 3) and got.dtype == torch.float32
    assert torch.equal(got, video[0].movedim(0, -1).to(torch.float32))
    assert [(c.start, c.stop) for c in chunks] == [(0, 4), (4, 10)]
    assert sink.largest_frames == 6 and sink.largest_bytes == 6 * 3 * 4 * 6 * 4


def test_the_sink_refuses_a_write_out_of_order_or_of_another_shape():
    sink = _sink([], [])
    with pytest.raises(RuntimeError, match="from 4 after 0"):
        sink[:, :, 4:6, :, :].copy_(torch.rand(1, 3, 2, 4, 6, generator=torch.Generator().manual_seed(35)))
    with pytest.raises(RuntimeError, match="chunk into"):
        sink[:, :, 0:2, :, :].copy_(torch.rand(1, 3, 2, 5, 6, generator=torch.Generator().manual_seed(37)))
    with pytest.raises(TypeError, match="ChunkSink takes"):
        sink[0]


def test_the_decode_report_names_its_kind():
    report = DecodeSaveReport("a.mp4", "video", 22, 64, 64, 24.0, 8, 19.0, CHUNKED, 2, 17, 1, 2, 0, 0, 1.0, ())
    assert report.to_dict()["kind"] == "decode_save" and report.to_dict()["decode_path"] == CHUNKED
