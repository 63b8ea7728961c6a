"""A clean-room H3 DiT block: H3's block math and parameter names, written from the model card of
ComfyUI's `DiTBlock`, with plain torch modules. CI compares the streamed executor against it
without ComfyUI; tests/comfyui compares against ComfyUI's own block.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..execution.modulation import gate_, modulate_
from ..execution.rope import norm_rope_pair_
from ..h3.dims import H3Dims


def swiglu(u):
    gate, up = u.chunk(2, dim=-1)
    return nn.functional.silu(gate).mul_(up)


class _Attention(nn.Module):
    def __init__(self, d: H3Dims, dtype, device):
        super().__init__()
        self.heads, self.head_dim = d.heads, d.head_dim
        self.qkv_proj = nn.Linear(d.hidden, 3 * d.inner, bias=False, dtype=dtype, device=device)
        self.q_norm = nn.RMSNorm(d.head_dim, eps=1e-5, dtype=dtype, device=device)
        self.k_norm = nn.RMSNorm(d.head_dim, eps=1e-5, dtype=dtype, device=device)
        self.out_proj = nn.Linear(d.inner, d.hidden, bias=False, dtype=dtype, device=device)

    def forward(self, x, rope, attention):
        s, inner = x.shape[0], self.heads * self.head_dim
        q, k, v = self.qkv_proj(x).split(inner, dim=-1)
        q = q.view(1, s, self.heads, self.head_dim)
        k = k.view(1, s, self.heads, self.head_dim)
        norm_rope_pair_(q, k, rope, self.q_norm.weight, self.k_norm.weight, self.q_norm.eps)
        v = v.reshape(s, self.heads, self.head_dim)
        out = attention(q[0].transpose(0, 1).unsqueeze(0), k[0].transpose(0, 1).unsqueeze(0),
                        v.transpose(0, 1).unsqueeze(0), q_offset=0)
        return self.out_proj(out.squeeze(0))


class _MLP(nn.Module):
    def __init__(self, d: H3Dims, dtype, device):
        super().__init__()
        self.fc1 = nn.Linear(d.hidden, 2 * d.ffn, bias=False, dtype=dtype, device=device)
        self.fc2 = nn.Linear(d.ffn, d.hidden, bias=False, dtype=dtype, device=device)

    def forward(self, x):
        return self.fc2(swiglu(self.fc1(x)))


class _AdalnProj(nn.Module):
    def __init__(self, d: H3Dims, dtype, device):
        super().__init__()
        self.hidden = d.hidden
        self.linear = nn.Linear(d.time_embed_dim, 6 * d.hidden * 3, bias=True, dtype=dtype, device=device)

    def forward(self, t_emb):
        y = self.linear(nn.functional.silu(t_emb))
        return y.view(y.shape[0] * 3, 6 * self.hidden).chunk(6, dim=-1)


class ReferenceBlock(nn.Module):
    """H3's DiT block with the same submodule names, so the executor runs on it unchanged."""

    def __init__(self, dims: H3Dims, *, dtype=torch.float32, device=None):
        super().__init__()
        self.dims = dims
        self.norm1 = nn.RMSNorm(dims.hidden, eps=1e-5, dtype=dtype, device=device)
        self.norm2 = nn.RMSNorm(dims.hidden, eps=1e-5, dtype=dtype, device=device)
        self.attn = _Attention(dims, dtype, device)
        self.mlp = _MLP(dims, dtype, device)
        self.adaln_proj = _AdalnProj(dims, dtype, device)
        self.requires_grad_(False)  # inference weights, as ComfyUI loads them

    @torch.no_grad()
    def randomize_(self, generator: torch.Generator) -> "ReferenceBlock":
        """Random weights scaled so activations stay O(1); norm weights and adaLN non-trivial."""
        for name, p in self.named_parameters():
            r = torch.randn(p.shape, generator=generator, dtype=torch.float32)
            if p.ndim == 2:
                scale = 1.0 / math.sqrt(p.shape[1])
                if name.startswith("adaln_proj"):
                    scale *= 0.2
                p.copy_(r * scale)
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * r)
            else:
                p.copy_(0.05 * r)
        return self

    @torch.no_grad()
    def forward(self, x, t_emb, mod_rows, rope, attention=None):
        from ..attention.protocol import sdpa_attention

        attention = attention or sdpa_attention
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaln_proj(t_emb)
        h = modulate_(self.norm1(x), shift_msa, scale_msa, mod_rows)
        x = gate_(x, gate_msa, self.attn(h, rope, attention), mod_rows)
        h = modulate_(self.norm2(x), shift_mlp, scale_mlp, mod_rows)
        return gate_(x, gate_mlp, self.mlp(h), mod_rows)


def rope_table(seq_len: int, dims: H3Dims, dtype, device=None, generator=None) -> torch.Tensor:
    """A rotation table shaped like H3's: [1, S, 1, rot_dim/2, 2, 2], from 3-axis positions."""
    pos = torch.rand(seq_len, 3, generator=generator, dtype=torch.float64) * 64.0
    inv = 1.0 / (10000.0 ** (torch.arange(dims.rope_inv_freq_len, dtype=torch.float64) / dims.rope_inv_freq_len))
    half = (pos.unsqueeze(-1) * inv).reshape(seq_len, -1).to(torch.float32)
    c, s = torch.cos(half), torch.sin(half)
    table = torch.stack([c, -s, s, c], dim=-1).reshape(1, seq_len, 1, half.shape[1], 2, 2)
    return table.to(dtype=dtype, device=device)


def random_mod_rows(seq_len: int, generator: torch.Generator, rows: int = 6) -> list[tuple[int, int, int]]:
    """A random contiguous mod_rows table (start, stop, adaLN row) covering [0, seq_len)."""
    n = int(torch.randint(1, 6, (1,), generator=generator)) if seq_len > 1 else 1
    n = min(n, seq_len)
    cuts = sorted(torch.randperm(seq_len - 1, generator=generator)[: n - 1].add(1).tolist()) if n > 1 else []
    bounds = [0, *cuts, seq_len]
    return [(a, b, int(torch.randint(0, rows, (1,), generator=generator))) for a, b in zip(bounds, bounds[1:])]


def make_block_inputs(dims: H3Dims, seq_len: int, *, dtype=torch.float32, device=None,
                      generator: torch.Generator | None = None):
    """(x, t_emb, mod_rows, rope_table) for one block call: random, never zeros."""
    g = generator or torch.Generator().manual_seed(0)
    x = torch.randn(seq_len, dims.hidden, generator=g).to(dtype=dtype, device=device)
    t_emb = torch.randn(2, dims.time_embed_dim, generator=g).to(dtype=dtype, device=device)
    return x, t_emb, random_mod_rows(seq_len, g), rope_table(seq_len, dims, dtype, device, g)
