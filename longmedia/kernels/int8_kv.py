"""Symmetric per-token-per-head int8 quantisation of K/V (scales in fp32, one per row of each head)."""

from __future__ import annotations

import torch

from .launch import AttentionArgumentError

INT8_MAX = 127.0
_MIN_SCALE = 1e-12  # an all-zero row gets this scale (its int8 values are 0 either way)


def quantize_kv_int8(x: torch.Tensor, *, out: torch.Tensor | None = None, scale_out: torch.Tensor | None = None,
                     chunk_rows: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x [B, H, S, D] to (int8 [B, H, S, D], fp32 scales [B, H, S]) with x ~= q * scale[..., None].

    `out`/`scale_out` may be slices of preallocated buffers (any strides), e.g.
    `quantize_kv_int8(k_rows, out=k8[:, :, a:b], scale_out=ks[:, :, a:b])`, so K/V can be quantised
    one row chunk at a time; fp32 temporaries cover at most `chunk_rows` rows.
    """
    if x.dim() != 4 or not x.is_floating_point():
        raise AttentionArgumentError(
            f"quantize_kv_int8 takes a float [batch, heads, seq, head_dim] tensor, got {tuple(x.shape)} {x.dtype}")
    if chunk_rows < 1:
        raise AttentionArgumentError(f"chunk_rows must be >= 1, got {chunk_rows}")
    b, h, s, d = x.shape
    if out is None:
        out = torch.empty(b, h, s, d, dtype=torch.int8, device=x.device)
    if scale_out is None:
        scale_out = torch.empty(b, h, s, dtype=torch.float32, device=x.device)
    if tuple(out.shape) != (b, h, s, d) or out.dtype != torch.int8:
        raise AttentionArgumentError(f"out must be int8 {(b, h, s, d)}, got {out.dtype} {tuple(out.shape)}")
    if tuple(scale_out.shape) != (b, h, s) or scale_out.dtype != torch.float32:
        raise AttentionArgumentError(
            f"scale_out must be float32 {(b, h, s)}, got {scale_out.dtype} {tuple(scale_out.shape)}")
    for r0 in range(0, s, chunk_rows):
        r1 = min(s, r0 + chunk_rows)
        rows = x[:, :, r0:r1].float()
        scale = rows.abs().amax(dim=-1).clamp_min(_MIN_SCALE * INT8_MAX) / INT8_MAX
        out[:, :, r0:r1] = torch.round(rows / scale[..., None]).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
        scale_out[:, :, r0:r1] = scale
    return out, scale_out


def dequantize_kv_int8(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """int8 [B, H, S, D] and fp32 scales [B, H, S] back to `dtype` (math in fp32)."""
    if x.dtype != torch.int8 or tuple(scale.shape) != tuple(x.shape[:3]):
        raise AttentionArgumentError(
            f"dequantize_kv_int8 takes int8 [B, H, S, D] and scales [B, H, S], got {x.dtype} {tuple(x.shape)} "
            f"and {tuple(scale.shape)}")
    return (x.float() * scale.float()[..., None]).to(dtype)


def kv_bytes(k: torch.Tensor, k_scale: torch.Tensor | None = None) -> int:
    """Bytes K (or V) occupies including its scales: what int8 storage saves."""
    extra = 0 if k_scale is None else k_scale.numel() * k_scale.element_size()
    return k.numel() * k.element_size() + extra
