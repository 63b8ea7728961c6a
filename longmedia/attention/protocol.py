"""The contract between the streamed executor and whatever computes attention for it."""

from __future__ import annotations

from typing import Protocol

import torch


class AttentionFn(Protocol):
    """Exact or approximate attention for one chunk of queries against every key.

    q: [1, heads, rows, head_dim], k and v: [1, heads, seq_len, head_dim] (strided views are allowed:
    H3 keeps them inside fused buffers). `q_offset` is the packed-sequence index of q's first row,
    so position-aware backends (Sol's diagonal band, per-row exactness) know where the chunk sits.
    Returns [1, rows, heads * head_dim] in q's dtype, the layout ComfyUI's `optimized_attention`
    returns with `skip_reshape=True`.
    """

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int) -> torch.Tensor: ...


def merge_heads(out: torch.Tensor) -> torch.Tensor:
    """[B, H, rows, D] -> [B, rows, H * D] (free when the storage is already [B, rows, H, D])."""
    b, h, rows, d = out.shape
    return out.transpose(1, 2).reshape(b, rows, h * d)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int = 0) -> torch.Tensor:
    """PyTorch SDPA in ComfyUI's `attention_pytorch` layout: the default when no backend is handed in."""
    del q_offset  # exact attention does not depend on where the chunk sits
    b, heads, rows, dim = q.shape
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)
    return out.transpose(1, 2).reshape(b, rows, heads * dim)
