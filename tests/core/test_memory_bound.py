"""The executor's published memory formula bounds what it allocates, and stock exceeds it."""

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.execution.memory import predicted_peak_bytes, stock_peak_bytes
from longmedia.execution.streamed_block import run_block
from longmedia.h3.dims import H3_FULL, H3Dims
from longmedia.testing.live_bytes import LiveBytes
from longmedia.testing.reference_block import ReferenceBlock, make_block_inputs

pytestmark = pytest.mark.usefixtures("comfy_execution_context")  # as ComfyUI runs nodes

DIMS = H3Dims(hidden=96, heads=4, head_dim=32, ffn=256, rope_inv_freq_len=4, time_embed_dim=32)
CASES = [ChunkSizes(128, 0, 128), ChunkSizes(128, 32, 64), ChunkSizes(96, 0, 200, 2),
         ChunkSizes(64, 16, 64, 1), ChunkSizes(333, 50, 71)]


@pytest.fixture(scope="module")
def block():
    return ReferenceBlock(DIMS).randomize_(torch.Generator().manual_seed(0))


def measure(fn, x):
    with LiveBytes() as lb:
        fn()
    return lb.peak_bytes + x.numel() * x.element_size()  # the hidden state is live throughout


@pytest.mark.parametrize("chunks", CASES, ids=str)
def test_streamed_peak_is_bounded_and_tight(block, chunks):
    for seq_len in (700, 2000):
        x, t_emb, segments, rope = make_block_inputs(DIMS, seq_len, generator=torch.Generator().manual_seed(seq_len))
        measured = measure(lambda: run_block(block, x, t_emb, segments, rope, chunks=chunks), x)
        predicted = predicted_peak_bytes(seq_len, DIMS, chunks, dtype_bytes=4)
        assert measured <= predicted, (seq_len, measured, predicted)
        assert measured >= 0.9 * predicted, (seq_len, measured, predicted)


def test_stock_exceeds_the_streamed_bound_at_large_s(block):
    seq_len = 3000
    x, t_emb, segments, rope = make_block_inputs(DIMS, seq_len, generator=torch.Generator().manual_seed(1))
    stock = measure(lambda: block(x, t_emb, segments, rope), x)
    streamed_bound = predicted_peak_bytes(seq_len, DIMS, ChunkSizes(128, 0, 128), dtype_bytes=4)
    assert stock > 2.5 * streamed_bound
    assert stock <= stock_peak_bytes(seq_len, DIMS, dtype_bytes=4)


def test_full_size_ratio_at_104k():
    s = 104_466
    stock = stock_peak_bytes(s, H3_FULL)
    assert predicted_peak_bytes(s, H3_FULL, ChunkSizes(4096, 4096, 4096)) <= 0.35 * stock
    assert predicted_peak_bytes(s, H3_FULL, ChunkSizes(4096, 1024, 2048, 8)) <= 0.31 * stock
