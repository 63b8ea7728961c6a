"""Ulysses sequence parallelism for one rank: the exchanging attention, one block on the rank's row shard
through the exact streamed block, and the one gather after the last block.

Per block, each rank runs `execution.streamed_block.run_block` on its own rows (norms, modulation, projections,
RoPE, MLP and residuals are row-wise, so they split by rows as they are) with `UlyssesAttention` as its
attention. That attention, called with q/k/v of the rank's rows and all H heads:
  1. rows->heads: one all-to-all sends each rank its heads of every row (q, k and v together when the block
     hands the whole shard at once, the stock attention stage: two all-to-alls per block in all);
  2. attends with the rank's H/N whole heads over the full sequence, queries streamed in `query_chunk` rows
     (the inner attention must be exact: the gathered queries are not one contiguous run of rows);
  3. heads->rows: one all-to-all returns every rank its rows with all heads.
When the block streams its attention (qkv_chunk_tokens > 0) it hands K/V for the whole shard first (the call
with q_offset 0 starts a new K/V set: K and V are exchanged once, received into the block's own K/V buffers when
the rank's heads of every row fit there (H divisible by N; the block reads those buffers only through this
attention), held for the block's later query chunks) and then one query chunk per call: the same bytes move,
in 2 + 2 x chunks all-to-alls. Every rank holds the same number of rows (`RowShards` pads), so every rank runs the same chunk loop.

Cancel: a rank cannot stop alone inside a block (its peers would wait in a collective), so the ranks agree on
stopping before each block (`agreed_stop`); inside a block nothing is interrupted.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..attention.protocol import AttentionFn, sdpa_attention
from ..execution.chunks import ChunkSizes
from ..execution.streamed_block import run_block
from .group import RankGroup
from .partition import RowShards, head_counts
from .shards import shard_mod_rows, shard_rope, shard_rows


class UlyssesAttention:
    """An `AttentionFn` that exchanges rows for heads around an exact inner attention (one block's calls)."""

    def __init__(self, group: RankGroup, shards: RowShards, inner: AttentionFn | None = None, query_chunk: int = 0):
        self.group, self.shards = group, shards
        self.inner = inner or sdpa_attention
        self.query_chunk = query_chunk
        self._kv: tuple[torch.Tensor, torch.Tensor] | None = None

    def _to_heads(self, parts: list[torch.Tensor], counts: tuple[int, ...],
                  into: torch.Tensor | None = None) -> list[torch.Tensor]:
        """[1, H, X, D] each (this rank's X rows, all heads) -> [h_mine, N*X, D] each (every rank's rows, my
        heads; strided views of one received buffer, rows in global order). `into`: a buffer to receive in."""
        g, world = self.group, self.group.world
        _, _, x, d = parts[0].shape
        m, mine = len(parts), counts[g.rank]
        bounds = [sum(counts[:j]) for j in range(world + 1)]
        # sent: for each rank j, [X, m, h_j, D]; received: for each rank i, [X, m, h_mine, D] = [N*X, m, h_mine, D]
        stage = torch.cat([torch.stack([p[0, bounds[j]:bounds[j + 1]].transpose(0, 1) for p in parts], dim=1)
                           .reshape(-1) for j in range(world)])
        n = world * x * m * mine * d
        out = into[:n] if into is not None else stage.new_empty(n)
        g.all_to_all(out, stage, [x * m * mine * d] * world, [x * m * c * d for c in counts])
        del stage
        got = out.view(world * x, m, mine, d)
        return [got[:, i].transpose(0, 1) for i in range(m)]

    def _to_rows(self, o: torch.Tensor, rows: int, counts: tuple[int, ...], d: int) -> torch.Tensor:
        """[N*rows, h_mine * D] (my heads, every rank's rows) -> [1, rows, H*D] (my rows, every head)."""
        g, world = self.group, self.group.world
        mine = counts[g.rank]
        out = o.new_empty(rows * sum(counts) * d)
        g.all_to_all(out, o.reshape(-1), [rows * c * d for c in counts], [rows * mine * d] * world)
        pieces = [p.view(rows, c, d) for p, c in zip(out.split([rows * c * d for c in counts]), counts)]
        return torch.cat(pieces, dim=1).reshape(1, rows, sum(counts) * d)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [h, n, D] against k, v [h, S, D] -> [n, h*D], queries streamed."""
        h, n, d = q.shape
        out = q.new_empty(n, h * d)
        if h == 0:
            return out
        step = self.query_chunk if self.query_chunk > 0 else n
        for a in range(0, n, step):
            b = min(a + step, n)
            out[a:b] = self.inner(q[None, :, a:b], k[None], v[None], q_offset=a)[0]
        return out

    def _in_place(self, t: torch.Tensor, counts: tuple[int, ...]) -> torch.Tensor | None:
        """The flat storage of a K or V buffer [1, H, L, D] (a [L, H, D] tensor) when my heads of every row fit in
        it: the block reads it only through this attention, so the exchange may receive into it."""
        base = t[0].transpose(0, 1)
        if not base.is_contiguous() or self.group.world * counts[self.group.rank] > t.shape[1]:
            return None
        return base.view(-1)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int) -> torch.Tensor:
        counts = head_counts(q.shape[1], self.group.world)
        rows, s = q.shape[2], self.shards.seq_len
        if q_offset == 0 and rows == k.shape[2]:  # the whole shard at once: q, k, v in one exchange
            qh, kh, vh = self._to_heads([q, k, v], counts)
            self._kv = None
        else:
            if q_offset == 0:  # a new K/V set (a block, or a head group of it): exchanged once, into its own buffer
                (kh,) = self._to_heads([k], counts, self._in_place(k, counts))
                (vh,) = self._to_heads([v], counts, self._in_place(v, counts))
                self._kv = (kh, vh)
            if self._kv is None:
                raise RuntimeError("UlyssesAttention got a query chunk before the K/V set's first chunk (q_offset 0)")
            (qh,) = self._to_heads([q], counts)
            kh, vh = self._kv
        if q_offset + rows >= k.shape[2]:  # the K/V set's last query chunk: its buffers may go after this call
            self._kv = None
        o = self._attend(qh, kh[:, :s], vh[:, :s])
        del qh, kh, vh
        return self._to_rows(o, rows, counts, q.shape[3]).to(q.dtype)


def agreed_stop(group: RankGroup, requested: bool) -> bool:
    """Whether any rank asked to stop: every rank gets the same answer, so all stop before the same block."""
    return group.any_rank(requested)


class ShardedPass:
    """One forward pass on one rank: its shard of the packed rows, modulation table and RoPE."""

    def __init__(self, group: RankGroup, seq_len: int, mod_rows, rope: torch.Tensor):
        self.group = group
        self.shards = RowShards(seq_len, group.world)
        self.mod_rows = shard_mod_rows(mod_rows, self.shards, group.rank)
        self.rope = shard_rope(rope, self.shards, group.rank)

    def enter(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's rows of the full packed sequence [S, hidden] (padded)."""
        if x.shape[0] != self.shards.seq_len:
            raise ValueError(f"the pass holds {self.shards.seq_len} rows, got {x.shape[0]}")
        return shard_rows(x, self.shards, self.group.rank)

    def block(self, block, x: torch.Tensor, t_emb: torch.Tensor, *, chunks: ChunkSizes,
              inner: AttentionFn | None = None, query_chunk: int = 0, **run_block_args) -> torch.Tensor:
        """One block on this rank's rows (in place), its attention exchanged; the other ranks run the same call."""
        attention = UlyssesAttention(self.group, self.shards, inner, query_chunk)
        return run_block(block, x, t_emb, self.mod_rows, self.rope, chunks=chunks, attention=attention,
                         interrupt=None, **run_block_args)

    def leave(self, x: torch.Tensor) -> torch.Tensor:
        """The one gather: every rank's rows, padding cut, as the full packed sequence [S, hidden]."""
        return torch.cat(self.group.all_gather(x), dim=0)[: self.shards.seq_len]


def run_blocks(group: RankGroup, blocks, x: torch.Tensor, t_emb: torch.Tensor, mod_rows, rope: torch.Tensor, *,
               chunks: ChunkSizes, inner: AttentionFn | None = None, query_chunk: int = 0,
               stop_requested: Callable[[], bool] | None = None) -> torch.Tensor | None:
    """`blocks` over the full packed sequence `x` on every rank: shard, run, gather once. Returns the full
    sequence, or None when the ranks agreed to stop before a block."""
    sp = ShardedPass(group, x.shape[0], mod_rows, rope)
    h = sp.enter(x)
    for block in blocks:
        if agreed_stop(group, bool(stop_requested and stop_requested())):
            return None
        h = sp.block(block, h, t_emb, chunks=chunks, inner=inner, query_chunk=query_chunk)
    return sp.leave(h)
