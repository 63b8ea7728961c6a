"""Chunk sizes of the streamed block executor: what the planner decides and the executor obeys."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkSizes:
    """Rows (tokens) per chunk for each phase of one H3 block; 0 means the stock path for that phase.

    qkv_chunk_tokens:      rows per K/V projection chunk and per query chunk (`sol_qkv_chunk_tokens`).
                           0 = stock attention (one fused QKV projection, one attention call).
    out_proj_chunk_tokens: rows per out-projection call inside a query chunk (`sol_out_proj_chunk_tokens`);
                           0 = the whole query chunk at once.
    mlp_chunk_tokens:      rows per SwiGLU MLP chunk (`mlp_chunk_tokens`); 0 = stock MLP.
    heads_per_group:       heads whose K/V are held for the whole sequence at once; 0 = all heads.
                           Fewer heads hold less K/V but keep the modulated norm1 output for the whole
                           sequence and fold each group's partial out-projection into the residual.
    """

    qkv_chunk_tokens: int = 0
    out_proj_chunk_tokens: int = 0
    mlp_chunk_tokens: int = 0
    heads_per_group: int = 0

    def __post_init__(self) -> None:
        for name in ("qkv_chunk_tokens", "out_proj_chunk_tokens", "mlp_chunk_tokens", "heads_per_group"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (0 = stock path), got {value!r}")

    @property
    def streams_attention(self) -> bool:
        return self.qkv_chunk_tokens > 0

    @property
    def streams_mlp(self) -> bool:
        return self.mlp_chunk_tokens > 0

    @property
    def is_stock(self) -> bool:
        return not (self.streams_attention or self.streams_mlp)

    def group_heads(self, heads: int) -> int:
        """Heads per K/V group, resolved against the model's head count."""
        if self.heads_per_group == 0 or self.heads_per_group >= heads:
            return heads
        return self.heads_per_group

