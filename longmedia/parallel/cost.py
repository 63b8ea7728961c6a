"""What one rank of a Ulysses pass holds and sends, per block: the formulas the planner uses (torch-free).

Rows per rank L = ceil(S / N). A rank's row-wise stages see L rows, so its block activations are the streamed
block's (`execution.memory.block_memory`) at L rows, plus the exchange buffers below. Its attention holds K/V
of H/N heads over all S rows: S * inner / N elements each, the same count as K/V of L rows and all heads.

Link bytes a rank sends per block (to the N-1 others; (N-1)/N of what it exchanges):
  rows->heads: q, k and v of its L rows, 3 * L * inner elements; heads->rows: the attention output, L * inner.
"""

from __future__ import annotations

from ..execution.chunks import ChunkSizes
from ..h3.dims import H3Dims


def rank_rows(seq_len: int, world: int) -> int:
    return -(-seq_len // world)


def link_bytes_per_block(seq_len: int, world: int, dims: H3Dims, dtype_bytes: int) -> int:
    """Bytes one rank sends over the link in one block's two exchanges."""
    if world <= 1:
        return 0
    rows = rank_rows(seq_len, world)
    return int(4 * rows * dims.inner * dtype_bytes * (world - 1) / world)


def exchange_buffer_bytes(seq_len: int, world: int, dims: H3Dims, chunks: ChunkSizes, dtype_bytes: int) -> int:
    """Peak bytes the exchanges add to a rank's attention stage beyond `block_memory` at L rows.

    Stock attention: q/k/v staged to send (3 L inner) and received (3 L inner) while the fused qkv and v's copy
    (counted by `block_memory`) are live and norm1's output (also counted there, L hidden) is already freed: 4 L
    inner beyond it in all, an upper bound that holds while inner >= hidden/2 (H3: 7168 vs 5376). Then the output
    received and merged, the q/k/v buffers freed by then. Streamed with g heads held (all, or a group): K, then
    V, staged (L g each; a send buffer may outlive its exchange until the backend's thread drops it, so both
    are counted) and received into the block's own K/V buffers; where a rank's share of heads does not fit
    there (g not divisible by N) the received K and V are new buffers (2 N L ceil(g/N) D); per query chunk of r
    rows, q staged and received, the inner attention's output and its merge, the output received, and the
    attention's own temporaries, a lingering send buffer (7 r g; tests/core/test_sequence_parallel.py measures it).
    """
    if world <= 1:
        return 0
    rows, inner = rank_rows(seq_len, world), dims.inner
    if not chunks.streams_attention:
        return 4 * rows * inner * dtype_bytes
    heads = chunks.group_heads(dims.heads)
    g = heads * dims.head_dim
    r = min(chunks.qkv_chunk_tokens, rows)
    apart = 0 if heads % world == 0 else 2 * world * rows * -(-heads // world) * dims.head_dim
    return (2 * rows * g + apart + 7 * r * g) * dtype_bytes
