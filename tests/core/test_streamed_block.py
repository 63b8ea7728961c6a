"""The streamed executor equals the stock block math (clean-room H3 block) within dtype tolerance."""

import contextlib

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.execution.streamed_block import run_block
from longmedia.h3.dims import H3Dims
from longmedia.testing.reference_block import ReferenceBlock, make_block_inputs

pytestmark = pytest.mark.usefixtures("comfy_execution_context")  # as ComfyUI runs nodes

DIMS = H3Dims(hidden=64, heads=4, head_dim=32, ffn=128, text_dim=48, rope_inv_freq_len=4, time_embed_dim=32)
ODD = H3Dims(hidden=48, heads=3, head_dim=32, ffn=96, text_dim=40, rope_inv_freq_len=4, time_embed_dim=24)
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def setup(dims, seq_len, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    block = ReferenceBlock(dims, dtype=dtype).randomize_(g)
    x, t_emb, segments, rope = make_block_inputs(dims, seq_len, dtype=dtype, generator=g)
    assert x.abs().sum() > 0 and len(segments) >= 1
    return block, x, t_emb, segments, rope


def random_chunks(g, seq_len, heads):
    pick = lambda hi: int(torch.randint(1, max(2, hi), (1,), generator=g))  # noqa: E731
    return ChunkSizes(qkv_chunk_tokens=pick(seq_len + 8), out_proj_chunk_tokens=int(torch.randint(0, 40, (1,), generator=g)),
                      mlp_chunk_tokens=pick(seq_len + 8), heads_per_group=int(torch.randint(0, heads + 1, (1,), generator=g)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seq_len", [1, 2, 63, 300, 1031])
def test_random_chunks_match_stock(dtype, seq_len):
    block, x, t_emb, segments, rope = setup(DIMS, seq_len, dtype, seed=seq_len)
    stock = block(x.clone(), t_emb, segments, rope)
    assert torch.isfinite(stock).all() and rel(stock, x) > 1e-3  # the block really changes x
    g = torch.Generator().manual_seed(1000 + seq_len)
    for _ in range(4):
        chunks = random_chunks(g, seq_len, DIMS.heads)
        out = run_block(block, x.clone(), t_emb, segments, rope, chunks=chunks)
        assert rel(out, stock) <= TOL[dtype], chunks


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_all_heads_streaming_is_bitwise_on_cpu(dtype):
    # one query chunk's update touches only its own rows; row-chunked GEMMs give the same bits on CPU
    block, x, t_emb, segments, rope = setup(DIMS, 517, dtype, seed=7)
    stock = block(x.clone(), t_emb, segments, rope)
    out = run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(61, 0, 0))
    assert torch.equal(out, stock)


def test_stock_chunks_are_the_stock_path():
    block, x, t_emb, segments, rope = setup(DIMS, 200, torch.bfloat16, seed=3)
    assert torch.equal(run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes()),
                       block(x.clone(), t_emb, segments, rope))


def test_odd_head_count_and_single_head_groups():
    block, x, t_emb, segments, rope = setup(ODD, 257, torch.float32, seed=11)
    stock = block(x.clone(), t_emb, segments, rope)
    for chunks in (ChunkSizes(50, 7, 33), ChunkSizes(64, 0, 64, 1), ChunkSizes(100, 30, 0, 2)):
        assert rel(run_block(block, x.clone(), t_emb, segments, rope, chunks=chunks), stock) <= 1e-5


def test_in_place_and_returns_x():
    block, x, t_emb, segments, rope = setup(DIMS, 90, torch.float32, seed=5)
    y = x.clone()
    assert run_block(block, y, t_emb, segments, rope, chunks=ChunkSizes(16, 4, 16)) is y


def test_interrupt_is_honoured_at_every_chunk():
    block, x, t_emb, segments, rope = setup(DIMS, 100, torch.float32, seed=6)
    calls = []

    class Cancel(Exception):
        pass

    def interrupt():
        calls.append(1)
        if len(calls) == 5:
            raise Cancel

    with pytest.raises(Cancel):
        run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(10, 0, 10), interrupt=interrupt)
    counted = []
    run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(10, 0, 10), interrupt=lambda: counted.append(1))
    assert len(counted) == 1 + 10 + 10 + 10  # entry, K/V chunks, query chunks, MLP chunks


def test_int8_tensorwise_through_comfy_kitchen():
    qt = pytest.importorskip("comfy_kitchen.tensor").QuantizedTensor
    block, x, t_emb, segments, rope = setup(DIMS, 300, torch.bfloat16, seed=9)
    linears = [block.attn.qkv_proj, block.attn.out_proj, block.mlp.fc1, block.mlp.fc2]
    quant = {id(m): qt.from_float(m.weight.data, "TensorWiseINT8Layout") for m in linears}

    @contextlib.contextmanager
    def int8_weights(module, like):
        yield quant.get(id(module), module.weight), module.bias

    stock = run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(), weights=int8_weights)
    assert rel(stock, block(x.clone(), t_emb, segments, rope)) < 2e-2  # INT8 is close to bf16
    streamed = run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(37, 11, 53), weights=int8_weights)
    assert torch.equal(streamed, stock)  # per-row activation scales: row chunks change nothing
    grouped = run_block(block, x.clone(), t_emb, segments, rope, chunks=ChunkSizes(64, 5, 17, 2), weights=int8_weights)
    assert rel(grouped, stock) <= 2e-2


def test_negative_chunk_is_rejected():
    with pytest.raises(ValueError, match="mlp_chunk_tokens"):
        ChunkSizes(mlp_chunk_tokens=-1)
