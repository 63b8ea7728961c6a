"""Kernel tests run on CPU through Triton's interpreter (fp16/fp32 only: bf16 and autotune break there).

TRITON_INTERPRET must be set before `triton.jit` decorates our kernels, i.e. before the kernel
modules are imported: this conftest is imported first. Modules needing triton call
`pytest.importorskip("triton", reason=NO_TRITON)`; the reference tests run anywhere.
"""

from __future__ import annotations

import math
import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402


def _positions(grid: tuple[int, int, int], text: int) -> torch.Tensor:
    """[text + t*h*w, 3] (t, y, x) positions: text rows first on the time axis, then a video grid."""
    t, hh, ww = grid
    tt, yy, xx = torch.meshgrid(torch.arange(t), torch.arange(hh), torch.arange(ww), indexing="ij")
    video = torch.stack([tt.reshape(-1) + text, yy.reshape(-1), xx.reshape(-1)], -1).float()
    words = torch.arange(text).float()[:, None].expand(text, 3) * torch.tensor([1.0, 0.0, 0.0])
    return torch.cat([words, video], 0)


def make_structured_qkv(batch: int, heads: int, grid: tuple[int, int, int], head_dim: int, *, text: int = 0,
                        rank: int = 8, align: float = 0.8, gain: float = 1.5, seed: int = 0,
                        dtype: torch.dtype = torch.float32):
    """Low-rank-plus-noise q/k/v over a (t, y, x) grid, RMS-normed q/k with split-half RoPE on 3/4 of each head.

    `align` couples q's and k's projections (RoPE then favours nearby keys), `gain` scales the logits.
    """
    g = torch.Generator().manual_seed(seed)
    pos = _positions(grid, text)
    s = pos.shape[0]
    freqs = torch.randn(3, 16, generator=g) * torch.tensor([0.3, 0.2, 0.2])[:, None]
    feats = torch.cos(pos @ freqs + torch.rand(16, generator=g) * 2 * math.pi)
    z = torch.einsum("sf,hfr->hsr", feats, torch.randn(heads, 16, rank, generator=g) / 4)
    w_shared = torch.randn(heads, rank, head_dim, generator=g)

    def project(coupled: bool) -> torch.Tensor:
        w = torch.randn(heads, rank, head_dim, generator=g)
        if coupled:
            w = align * w_shared + math.sqrt(1.0 - align * align) * w
        return z @ w + 0.15 * math.sqrt(rank) * torch.randn(heads, s, head_dim, generator=g)

    rot = (3 * head_dim // 4) // 6 * 6
    inv = 1.0 / (10000.0 ** (torch.arange(rot // 6).float() / (rot // 6)))
    ang = torch.cat([pos[:, a:a + 1] * inv for a in range(3)], -1)
    cos, sin = torch.cos(ang), torch.sin(ang)

    def norm_rope(x: torch.Tensor) -> torch.Tensor:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * gain
        a, b = x[..., :rot // 2], x[..., rot // 2:rot]
        return torch.cat([a * cos - b * sin, a * sin + b * cos, x[..., rot:]], -1)

    q, k, v = norm_rope(project(True)), norm_rope(project(True)), project(False)
    return tuple(x.unsqueeze(0).expand(batch, -1, -1, -1).contiguous().to(dtype) for x in (q, k, v))


def fused_views(seq: int, q_rows: int, heads: int, head_dim: int, *, dtype: torch.dtype, seed: int = 0):
    """q/k/v as strided [1, H, S, D] views of one [S, 3*H*D] buffer (H3's fused qkv layout)."""
    g = torch.Generator().manual_seed(seed)
    inner = heads * head_dim
    buf = torch.randn(seq, 3 * inner, generator=g).to(dtype)

    def view(col: int, rows: int) -> torch.Tensor:
        return buf[:rows, col * inner:(col + 1) * inner].view(rows, heads, head_dim).transpose(0, 1).unsqueeze(0)

    return view(0, q_rows), view(1, seq), view(2, seq)


@pytest.fixture
def structured_qkv():
    return make_structured_qkv


@pytest.fixture
def fused_qkv():
    return fused_views
