"""The streamed executor on ComfyUI's own DiTBlock at full H3 width, bf16 on CUDA, under inference_mode."""

from __future__ import annotations

import os

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.execution.streamed_block import run_block
from longmedia.h3.dims import H3_FULL as D

ROOT = os.environ.get("LONGMEDIA_COMFYUI_ROOT", "").strip()
pytestmark = pytest.mark.skipif(not ROOT, reason="LONGMEDIA_COMFYUI_ROOT is not set (source tools/gpu/bootstrap.sh)")
SEQ = 3001  # ragged against every chunk below
CUDA = torch.device("cuda")


@pytest.fixture(scope="module")
def comfy():
    with pytest.MonkeyPatch.context() as mp:  # the checkout on sys.path for this module's tests only
        mp.syspath_prepend(ROOT)
        import comfy.ldm.minimax.model as h3
        import comfy.ops

        from longmedia.comfy.patching import block_patch
        from longmedia.comfy.patching.attention_override import existing_attention_fn
        yield h3, comfy.ops, block_patch, existing_attention_fn


@pytest.fixture(scope="module")
def block_and_inputs(comfy):
    h3, ops, _, _ = comfy
    g = torch.Generator(CUDA).manual_seed(0)
    block = h3.DiTBlock(D.hidden, D.heads, D.head_dim, D.ffn, D.time_embed_dim, 1e-5, 1e-5, dtype=torch.bfloat16,
                        device=CUDA, operations=ops.disable_weight_init)
    with torch.no_grad():
        for name, p in block.named_parameters():
            r = torch.randn(p.shape, generator=g, device=CUDA)
            p.copy_(r / p.shape[1] ** 0.5 * (0.2 if "adaln" in name else 1.0) if p.ndim == 2 else 1 + 0.1 * r)
    block.requires_grad_(False)
    x = torch.randn(SEQ, D.hidden, generator=g, device=CUDA).to(torch.bfloat16)
    t_emb = torch.randn(2, D.time_embed_dim, generator=g, device=CUDA).to(torch.bfloat16)
    segments = [(0, 300, 4), (300, 2100, 0), (2100, 2700, 2), (2700, SEQ, 3)]
    pos = torch.rand(SEQ, 3, generator=g, device=CUDA, dtype=torch.float64) * 50
    inv = 1.0 / (10000.0 ** (torch.arange(D.rope_inv_freq_len, device=CUDA, dtype=torch.float32) / D.rope_inv_freq_len))
    half = torch.cat((pos.float().unsqueeze(-1) * inv.view(1, 1, -1)).unbind(dim=1), dim=-1)
    rope = h3.rope_rotation_table(torch.cat((half, half), dim=-1), torch.bfloat16)
    return block, x, t_emb, segments, rope


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("chunks", [ChunkSizes(1024, 0, 1024), ChunkSizes(777, 300, 2048),
                                    ChunkSizes(1024, 0, 1024, 8), ChunkSizes(2048, 512, 0, 14)],
                         ids=["all_heads", "all_heads_out_chunks", "groups_of_8", "groups_of_14"])
def test_streamed_block_matches_comfy_block_bf16(comfy, block_and_inputs, chunks):
    _, _, patch, existing = comfy
    block, x, t_emb, segments, rope = block_and_inputs
    with torch.inference_mode():
        stock = block(x.clone(), t_emb, segments, rope, transformer_options={})
        out = run_block(block, x.clone(), t_emb, segments, rope, chunks=chunks,
                        attention=existing({}, block.attn.heads), weights=patch.comfy_weights(),
                        interrupt=patch.comfy_interrupt, cast_small=patch.comfy_cast_small)
    torch.cuda.synchronize()
    assert torch.isfinite(stock).all() and rel(stock, x) > 1e-2  # the block changes its input
    assert rel(out, stock) <= 2e-2, chunks
