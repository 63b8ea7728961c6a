"""ComfyUI's BlockSparseAttention on its real sparse path (CUDA, bf16, head_dim 128, kitchen's Sol) around
LongMedia's streamed block, in both install orders. On the CPU BSA never hands its attention, so this is the
only place the handed attention itself is seen (the contract on the CPU: tests/comfyui/test_block_sparse_contract.py).

BSA's attention is the whole attention phase with no query-row range: LongMedia's streamed block must refuse it
by name (never drop it silently) whichever replacement was installed first; where BSA hands nothing (a dense
call: outside its sigma window) our streamed block runs inside BSA's patch and equals the stock block.
"""

from __future__ import annotations

import importlib
import inspect
import os

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.h3.dims import H3_FULL as D

ROOT = os.environ.get("LONGMEDIA_COMFYUI_ROOT", "").strip()
pytestmark = pytest.mark.skipif(not ROOT, reason="LONGMEDIA_COMFYUI_ROOT is not set (source tools/gpu/bootstrap.sh)")
CUDA = torch.device("cuda")
HEADS = 4                 # head_dim stays H3's 128 (BSA's kernel needs it); fewer heads keep the block small
SEQ = 5000                # more than one of BSA's 4096-row producer chunks, ragged against ours
CHUNKS = ChunkSizes(1024, 0, 1024)


@pytest.fixture(scope="module")
def host():
    with pytest.MonkeyPatch.context() as mp:  # the checkout on sys.path for this module's tests only
        mp.syspath_prepend(ROOT)
        yield _host()


def _host():
    import comfy.ldm.minimax.model as h3
    import comfy.ops
    import comfy_kitchen as ck

    try:
        bsa = importlib.import_module("comfy_extras.nodes_sparse_attention")
    except ImportError:
        pytest.skip("this ComfyUI lacks the feature: BlockSparseAttention (comfy_extras.nodes_sparse_attention)")
    if not ck.sol_attn_is_available(CUDA):
        pytest.skip("this GPU lacks the feature: a compiled comfy-kitchen sol_attn kernel (BSA's sparse path)")
    if "attention" not in inspect.signature(h3.DiTBlock.forward).parameters:
        pytest.skip("this ComfyUI lacks the feature: DiTBlock.forward(..., attention=None) (ComfyUI 0.38+)")
    return h3, comfy.ops, bsa


@pytest.fixture(scope="module")
def block_args(host):
    h3, ops, _ = host
    g = torch.Generator(CUDA).manual_seed(7)
    hidden = HEADS * D.head_dim
    block = h3.DiTBlock(hidden, HEADS, D.head_dim, 2 * hidden, D.time_embed_dim, 1e-5, 1e-5, dtype=torch.bfloat16,
                        device=CUDA, operations=ops.disable_weight_init)
    with torch.no_grad():
        for name, p in block.named_parameters():
            r = torch.randn(p.shape, generator=g, device=CUDA)
            p.copy_(r / p.shape[1] ** 0.5 * (0.2 if "adaln" in name else 1.0) if p.ndim == 2 else 1 + 0.1 * r)
    block.requires_grad_(False)
    x = torch.randn(SEQ, hidden, generator=g, device=CUDA).to(torch.bfloat16)
    t_emb = torch.randn(2, D.time_embed_dim, generator=g, device=CUDA).to(torch.bfloat16)
    segments = [(0, 400, 4), (400, 3600, 0), (3600, 4300, 2), (4300, SEQ, 3)]
    pos = torch.rand(SEQ, 3, generator=g, device=CUDA, dtype=torch.float64) * 50
    inv = 1.0 / (10000.0 ** (torch.arange(D.rope_inv_freq_len, device=CUDA, dtype=torch.float32) / D.rope_inv_freq_len))
    half = torch.cat((pos.float().unsqueeze(-1) * inv.view(1, 1, -1)).unbind(dim=1), dim=-1)
    rope = h3.rope_rotation_table(torch.cat((half, half), dim=-1), torch.bfloat16)
    return block, x, t_emb, segments, rope


def sparse_patch(bsa, *, window=(1e9, 0.0)):
    return bsa.SparseAttnPatch(tau=1.3, topk_ratio=0.0, vsa=False, sigma_start=window[0], sigma_end=window[1],
                               min_tokens=0, dense_blocks=set(), sink_conditioning="off", extra_tokens=0, verbose=True)


def call(block_args, topts=None):
    block, x, t_emb, segments, rope = block_args
    args = {"img": x.clone(), "t_emb": t_emb, "mod_segments": segments, "rope_freqs": rope,
            "transformer_options": dict(topts or {})}
    handed = []

    def original_block(a):
        handed.append(a.get("attention"))
        return {"img": block(a["img"], a["t_emb"], a["mod_segments"], a["rope_freqs"],
                             transformer_options=a["transformer_options"], attention=a.get("attention"))}
    return args, {"original_block": original_block}, handed


def ours(block, previous=None):
    from longmedia.comfy.patching.attention_override import existing_attention_fn
    from longmedia.comfy.patching.block_patch import streamed_replacement

    return streamed_replacement(block, 0, CHUNKS, existing_attention_fn, previous=previous, memory_mode="low_vram")


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_bsa_alone_really_hands_its_sparse_attention_here(host, block_args):
    _, _, bsa = host
    args, extra, handed = call(block_args)
    with torch.inference_mode():
        out = bsa.make_h3_block_patch(block_args[0], 0, sparse_patch(bsa))(args, extra)["img"]
    torch.cuda.synchronize()
    assert len(handed) == 1 and handed[0] is not None and handed[0].__module__ == bsa.__name__
    assert torch.isfinite(out).all() and rel(out, block_args[1]) > 1e-2


def test_ours_installed_after_bsa_refuses_its_sparse_attention_by_name(host, block_args):
    from longmedia.comfy.patching.block_patch import HandedAttentionError

    _, _, bsa = host
    bsa_fn = bsa.make_h3_block_patch(block_args[0], 0, sparse_patch(bsa))
    args, extra, handed = call(block_args)
    with torch.inference_mode(), pytest.raises(HandedAttentionError) as info:
        ours(block_args[0], previous=bsa_fn)(args, extra)
    message = str(info.value)
    assert "ComfyUI's BlockSparseAttention node" in message and "memory_mode=normal" in message
    assert handed == []  # our streamed block took the call (BSA's original_block), not the stock block


def test_ours_installed_before_chaining_bsa_refuses_its_sparse_attention_by_name(host, block_args):
    from longmedia.comfy.patching.block_patch import HandedAttentionError

    _, _, bsa = host
    if "previous" not in inspect.signature(bsa.make_h3_block_patch).parameters:
        pytest.skip("this ComfyUI lacks the feature: BlockSparseAttention chaining an existing double_block "
                    "replacement (make_h3_block_patch(..., previous), upstream cf3103c5)")
    bsa_fn = bsa.make_h3_block_patch(block_args[0], 0, sparse_patch(bsa), previous=ours(block_args[0]))
    args, extra, handed = call(block_args)
    with torch.inference_mode(), pytest.raises(HandedAttentionError, match="BlockSparseAttention node"):
        bsa_fn(args, extra)
    assert handed == []


def test_outside_its_sigma_window_bsa_hands_nothing_and_ours_streams_inside_it(host, block_args):
    _, _, bsa = host
    block, x, t_emb, segments, rope = block_args
    bsa_fn = bsa.make_h3_block_patch(block, 0, sparse_patch(bsa, window=(0.5, 0.4)))
    sigmas = torch.tensor([0.9], device=CUDA)  # above sigma_start: BSA stays dense
    args, extra, handed = call(block_args, {"sigmas": sigmas})
    with torch.inference_mode():
        stock = block(x.clone(), t_emb, segments, rope, transformer_options={})
        out = ours(block, previous=bsa_fn)(args, extra)["img"]
    torch.cuda.synchronize()
    assert handed == [] and torch.isfinite(out).all()
    assert rel(out, stock) <= 2e-2
