"""Which packed rows and which heads each of N ranks holds (torch-free: the planner reads it).

Rows: rank r holds global rows [r*L, r*L + L) with L = ceil(S / N); rows at or past S are padding (the last
ranks' shards are filled up to L so every rank runs the same chunk loop and the all-to-alls are even).
Heads: the first H mod N ranks take ceil(H/N) heads, the rest floor(H/N) (56 heads on 3 ranks: 19, 19, 18);
a rank may hold no head of a small head group and then computes no attention for it.
"""

from __future__ import annotations

from dataclasses import dataclass


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
