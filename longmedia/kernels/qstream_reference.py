"""Plain fp32 torch reference of the exact query-streaming kernel (same signature, no triton needed)."""

from __future__ import annotations

import math

import torch

from .int8_kv import dequantize_kv_int8
from .launch import LaunchConfig, check_out, check_qkv, empty_output

REFERENCE_ROWS = 1024  # query rows per softmax step: bounds the [rows, seq] fp32 scores


def default_sm_scale(head_dim: int, sm_scale: float | None) -> float:
    """1/sqrt(head_dim) unless the caller overrides it."""
    return 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)


def dequantized(x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """fp32 copy of K or V, dequantised when int8."""
    return dequantize_kv_int8(x, scale) if x.dtype == torch.int8 else x.float()


def qstream_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, k_scale: torch.Tensor | None = None,
                      v_scale: torch.Tensor | None = None, sm_scale: float | None = None,
                      out: torch.Tensor | None = None, config: LaunchConfig | None = None) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v in fp32; returns [B, H, Sq, D] in q's dtype laid out [B, Sq, H, D]."""
    del config  # no tiles here
    check_qkv(q, k, v, k_scale, v_scale)
    if out is None:
        out = empty_output(q)
    check_out(out, q)
    scale = default_sm_scale(q.shape[-1], sm_scale)
    kf, vf = dequantized(k, k_scale), dequantized(v, v_scale)
    for r0 in range(0, q.shape[2], REFERENCE_ROWS):
        rows = q[:, :, r0:r0 + REFERENCE_ROWS].float()
        probs = torch.softmax(rows @ kf.transpose(-1, -2) * scale, dim=-1)
        out[:, :, r0:r0 + REFERENCE_ROWS] = (probs @ vf).to(q.dtype)
    return out
