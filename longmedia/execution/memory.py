"""Activation bytes of one H3 block, stock and streamed: the executor's published memory formula.

Counted in elements of the compute dtype per token, then multiplied out. The hidden state `x`
(S x hidden) is included: it is live for the whole block. Weights are not: the planner adds them.
`score_bytes` is what the attention backend materialises per (head, query, key): 0 for fused
backends (flash, cuDNN, our Triton kernels), > 0 for math/naive attention.

The streamed figures are upper bounds of the allocations the executor makes, term by term, in the
order `longmedia.execution.streamed_block` makes them; `tests/core/test_memory_bound.py` checks
them against a live-bytes tracker and `bench/block.py` against CUDA's allocator.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..h3.dims import H3Dims
from .chunks import ChunkSizes


@dataclass(frozen=True)
class BlockMemory:
    """Peak live activation bytes of one block, per phase and overall."""

    attention_bytes: int
    mlp_bytes: int

    @property
    def peak_bytes(self) -> int:
        return max(self.attention_bytes, self.mlp_bytes)


def _rows(chunk: int, seq_len: int) -> int:
    return min(chunk, seq_len) if chunk > 0 else seq_len


def _attention_scores(rows: int, seq_len: int, heads: int, score_bytes: int) -> int:
    return heads * rows * seq_len * score_bytes


def _stock_attention_elems(s: int, d: H3Dims) -> int:
    h, i = d.hidden, d.inner
    # x, norm1 out (modulated in place), fused qkv (q/k normed in place), v.clone(),
    # attention output and its head-merge copy, out_proj output
    return s * (h + h + 3 * i + i + 2 * i + h)


def _streamed_attention_elems(s: int, d: H3Dims, c: ChunkSizes) -> int:
    h, i = d.hidden, d.inner
    g = c.group_heads(d.heads) * d.head_dim
    r = _rows(c.qkv_chunk_tokens, s)
    p = _rows(c.out_proj_chunk_tokens, r)
    if g == i:
        held = s * (h + 2 * i)                      # x, K, V for every head
        return held + max(r * (h + i),              # norm1 rows with k (then v) rows, or q rows
                          r * 3 * i,                # q rows, attention output and its head-merge copy
                          r * i + p * h)            # attention output rows, out_proj rows
    held = s * (2 * h + 2 * g)                      # x, modulated norm1 for every row, K and V of a group
    return held + max(r * 3 * g,                    # q rows, attention output and its head-merge copy
                      r * g + p * h)                # attention output rows, partial out_proj rows


def _stock_mlp_elems(s: int, d: H3Dims) -> int:
    h, f = d.hidden, d.ffn
    # x, norm2 out, fc1 out (2f), silu(gate) (f) multiplied in place, fc2 out
    return s * (h + h + 2 * f + f + h)


def _streamed_mlp_elems(s: int, d: H3Dims, c: ChunkSizes) -> int:
    h, f = d.hidden, d.ffn
    m = _rows(c.mlp_chunk_tokens, s)
    return s * h + m * max(h + 2 * f, 2 * f + f + h)


ADALN_TIMESTEP_ROWS = 4  # distinct timesteps in one H3 forward: video, audio, cond, audio cond


def _adaln_elems(d: H3Dims) -> int:
    """The block's six adaLN tensors, [timesteps x 3 modalities, hidden] each."""
    return ADALN_TIMESTEP_ROWS * 3 * 6 * d.hidden


def _int8_input_bytes(rows: int, width: int) -> int:
    """comfy-kitchen's INT8 linear quantises its input per row: an int8 copy plus one fp32 scale a row."""
    return rows * (width + 4)


def block_memory(seq_len: int, dims: H3Dims, chunks: ChunkSizes, dtype_bytes: int = 2,
                 score_bytes: int = 0, int8_linears: bool = False) -> BlockMemory:
    """Peak live activation bytes of one block forward at `seq_len` packed tokens.

    int8_linears: the block's Linears are INT8 tensorwise (their quantised inputs are counted).
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    adaln = _adaln_elems(dims) * dtype_bytes
    if chunks.streams_attention:
        rows = _rows(chunks.qkv_chunk_tokens, seq_len)
        heads = chunks.group_heads(dims.heads)
        attn = _streamed_attention_elems(seq_len, dims, chunks) * dtype_bytes
    else:
        rows, heads = seq_len, dims.heads
        attn = _stock_attention_elems(seq_len, dims) * dtype_bytes
    attn += _attention_scores(rows, seq_len, heads, score_bytes)
    if chunks.streams_mlp:
        mlp = _streamed_mlp_elems(seq_len, dims, chunks) * dtype_bytes
    else:
        mlp = _stock_mlp_elems(seq_len, dims) * dtype_bytes
    if int8_linears:  # the widest quantised input of each phase: out_proj's (inner) and fc2's (ffn)
        attn += _int8_input_bytes(rows, dims.inner)
        mlp += _int8_input_bytes(_rows(chunks.mlp_chunk_tokens, seq_len), dims.ffn)
    return BlockMemory(attention_bytes=attn + adaln, mlp_bytes=mlp + adaln)


def predicted_peak_bytes(seq_len: int, dims: H3Dims, chunks: ChunkSizes, dtype_bytes: int = 2,
                         score_bytes: int = 0, int8_linears: bool = False) -> int:
    """Peak live activation bytes of one block (hidden state included, weights excluded)."""
    return block_memory(seq_len, dims, chunks, dtype_bytes, score_bytes, int8_linears).peak_bytes


def stock_peak_bytes(seq_len: int, dims: H3Dims, dtype_bytes: int = 2, score_bytes: int = 0) -> int:
    """Peak live activation bytes of ComfyUI's stock block forward."""
    return predicted_peak_bytes(seq_len, dims, ChunkSizes(), dtype_bytes, score_bytes)
