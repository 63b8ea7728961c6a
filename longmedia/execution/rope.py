"""H3's per-head q/k RMSNorm + partial split-half RoPE, in place, on whole tensors or on row chunks.

Stock H3 calls comfy-kitchen's fused `rms_rope_split_half_(q, k, ...)` on the whole fused QKV buffer.
The op is independent per (row, head), so the executor gets the same numbers on row chunks, and on
K or Q alone by pairing the first half of the heads with the second half (two views of one tensor,
same shape, disjoint elements). comfy-kitchen picks the backend (CUDA, Triton, eager) as it does for
stock; without comfy-kitchen a torch transcription of its eager math is used.
"""

from __future__ import annotations

import importlib

import torch


def _kitchen():
    try:
        return importlib.import_module("comfy_kitchen")
    except ImportError:  # named fallback: core tests may run without comfy-kitchen
        return None


def _eager_one(x: torch.Tensor, rope: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """comfy-kitchen's eager `_rms_rope1(split_half=True)` for x: [1, S, H, D]."""
    xn = torch.nn.functional.rms_norm(x, (x.shape[-1],), weight=weight, eps=eps)
    rot = rope.shape[-3] * 2
    part = xn[..., :rot]
    t = part.reshape(*part.shape[:-1], 2, -1).movedim(-2, -1).unsqueeze(-2).to(rope.dtype)
    out = rope[..., 0] * t[..., 0] + rope[..., 1] * t[..., 1]
    out = out.movedim(-1, -2).reshape(*part.shape).type_as(x)
    return torch.cat((out, xn[..., rot:]), dim=-1) if rot != x.shape[-1] else out


def norm_rope_pair_(q: torch.Tensor, k: torch.Tensor, rope: torch.Tensor, q_weight: torch.Tensor,
                    k_weight: torch.Tensor, eps: float) -> None:
    """Stock H3's call: q and k [1, S, H, D] normed and rotated in place; rope [1, S, 1, rot/2, 2, 2]."""
    q_weight = q_weight.to(device=q.device)
    k_weight = k_weight.to(device=k.device)
    ck = _kitchen()
    if ck is not None:
        ck.rms_rope_split_half_(q, k, rope, q_weight, k_weight, epsilon=eps, rot_dim=rope.shape[-3] * 2)
        return
    q.copy_(_eager_one(q, rope, q_weight, eps))
    k.copy_(_eager_one(k, rope, k_weight, eps))


def norm_rope_(x: torch.Tensor, rope: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """One of q or k [1, S, H, D], in place, with the same numbers as the paired stock call."""
    heads = x.shape[2]
    if heads % 2 == 0:
        half = heads // 2
        norm_rope_pair_(x[:, :, :half], x[:, :, half:], rope, weight, weight, eps)
        return
    # odd head count: pair with a scratch partner of the same shape (its result is discarded)
    norm_rope_pair_(x, torch.empty_like(x), rope, weight, weight, eps)
