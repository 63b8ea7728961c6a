"""Which packed rows and which heads each of N ranks holds.

Rows: rank r holds global rows [r*L, r*L + L) with L = ceil(S / N); rows at or past S are padding (the last
ranks' shards are filled up to L so every rank runs the same chunk loop and the all-to-alls are even). Padding
rows are zeros, belong to no modulation span, have a zero RoPE table, and are dropped wherever rows meet:
keys and values lose them after the rows->heads exchange (they never enter attention) and the final gather
cuts them. Heads: the first H mod N ranks take ceil(H/N) heads, the rest floor(H/N) (56 heads on 3 ranks:
19, 19, 18); a rank may hold no head of a small head group and then computes no attention for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..execution.modulation import clip_mod_rows


def head_counts(heads: int, world: int) -> tuple[int, ...]:
    """Heads per rank: uneven counts differ by one, the larger ones first."""
    base, extra = divmod(heads, world)
    return tuple(base + (1 if r < extra else 0) for r in range(world))


@dataclass(frozen=True)
class RowShards:
    """S packed rows over `world` ranks, `rows_per_rank` each (the last shards padded)."""

    seq_len: int
    world: int

    def __post_init__(self) -> None:
        if self.seq_len < 1 or self.world < 1:
            raise ValueError(f"RowShards needs seq_len >= 1 and world >= 1, got {self.seq_len}, {self.world}")

    @property
    def rows_per_rank(self) -> int:
        return -(-self.seq_len // self.world)

    @property
    def padded_len(self) -> int:
        return self.rows_per_rank * self.world

    def span(self, rank: int) -> tuple[int, int]:
        """[start, stop) of the real global rows rank `rank` holds (stop may equal start: all padding)."""
        start = min(rank * self.rows_per_rank, self.seq_len)
        return start, min(start + self.rows_per_rank, self.seq_len)

    def real_rows(self, rank: int) -> int:
        a, b = self.span(rank)
        return b - a


def shard_rows(t: torch.Tensor, shards: RowShards, rank: int, dim: int = 0) -> torch.Tensor:
    """Rank `rank`'s rows of `t` along `dim`, zero-padded to `rows_per_rank` (a new tensor)."""
    a, b = shards.span(rank)
    shape = list(t.shape)
    shape[dim] = shards.rows_per_rank
    out = t.new_zeros(shape)
    out.narrow(dim, 0, b - a).copy_(t.narrow(dim, a, b - a))
    return out


def shard_mod_rows(mod_rows, shards: RowShards, rank: int):
    """The modulation table of rank `rank`'s rows, re-based to its shard; per-token rows sliced to match.
    Padding rows are in no span: modulation and gating leave them alone."""
    a, b = shards.span(rank)
    return clip_mod_rows(mod_rows, a, b)


def shard_rope(rope: torch.Tensor, shards: RowShards, rank: int) -> torch.Tensor:
    """Rank `rank`'s rows of the rotation table [1, S, 1, rot/2, 2, 2] (padding rows zero)."""
    return shard_rows(rope, shards, rank, dim=1)
