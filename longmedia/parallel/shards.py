"""A rank's rows of the packed tensors, as `partition.RowShards` assigns them.

Padding rows are zeros, belong to no modulation span, have a zero RoPE table, and are dropped wherever rows meet:
keys and values lose them after the rows->heads exchange (they never enter attention) and the final gather
cuts them.
"""

from __future__ import annotations

import torch

from ..execution.modulation import clip_mod_rows
from .partition import RowShards


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
