"""A model patched by ComfyUI's stock BlockSparseAttention node (0.38+): composed on stock blocks, refused
by name when LongMedia would stream blocks; the plan's reasons say which happened."""

from __future__ import annotations

import importlib

import pytest
import torch
from harness import tiny_sampler_job

from longmedia.errors import LongMediaInputError
from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import TINY_DIMS


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    try:
        bsa = importlib.import_module("comfy_extras.nodes_sparse_attention")
    except ImportError:
        pytest.skip("this ComfyUI has no comfy_extras.nodes_sparse_attention (BlockSparseAttention, ComfyUI 0.38+)")
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    plain = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    patched = bsa.BlockSparseAttention.execute(plain, {"selection": "sol-attn", "tau": 1.3}, 0.2, 1.0).result[0]
    return {"samplers": comfy.samplers, "ncs": ncs, "h3n": h3n, "plain": plain, "patched": patched}


def job(env, patcher):
    return tiny_sampler_job(patcher)


def test_block_sparse_model_is_detected_and_a_plain_one_is_not(env):
    from longmedia.comfy.patching.sparse_attention_node import block_sparse_evidence

    found = block_sparse_evidence(env["patched"], env["patched"].model_options)
    assert any("callback" in f for f in found) and any("override" in f for f in found)
    assert any(f"{TINY_DIMS.num_blocks} double blocks" in f for f in found)
    assert block_sparse_evidence(env["plain"], env["plain"].model_options) == ()


@pytest.mark.parametrize("attention_mode", ["existing", "auto"])
def test_stock_blocks_compose_with_block_sparse_attention(env, attention_mode):
    from longmedia.comfy.passes.sampler import run_sampler

    with torch.inference_mode():
        sv, sa = env["ncs"].SamplerCustomAdvanced.execute(*job(env, env["patched"])).result[0]["samples"].unbind()
        result = run_sampler(*job(env, env["patched"]), PlanRequest(memory_mode="normal", attention_mode=attention_mode))
    ov, oa = result.output["samples"].unbind()
    assert torch.isfinite(sv).all() and sv.std() > 0.05
    assert torch.equal(ov, sv) and torch.equal(oa, sa)
    assert result.plan.attention.backend == "existing" and result.report.streamed_blocks == ()
    assert any("BlockSparseAttention" in r and "composed" in r for r in result.plan.reasons)
    patches = env["patched"].model_options["transformer_options"]["patches_replace"]["dit"]
    assert all(fn.__module__ == "comfy_extras.nodes_sparse_attention" for fn in patches.values())  # left as installed


def test_streamed_blocks_refuse_a_block_sparse_model_by_name(env):
    from longmedia.comfy.passes.sampler import run_sampler

    with torch.inference_mode(), pytest.raises(LongMediaInputError, match="BlockSparseAttention") as info:
        run_sampler(*job(env, env["patched"]), PlanRequest(memory_mode="low_vram", attention_mode="existing",
                                                           sol_qkv_chunk_tokens=64))
    assert "memory_mode=normal" in str(info.value) and info.value.input_name == "model"
