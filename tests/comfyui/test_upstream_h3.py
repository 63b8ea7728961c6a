"""LongMedia's streamed model call against ComfyUI's own H3 forward on the upstream generation (0.38+):
per-token modulation rows (audio denoise mask), text tag runs, a PDD head bank and a VSA gate checkpoint.

Each test skips, naming the missing feature, on a ComfyUI that lacks it (the August 0.33 snapshot)."""

from __future__ import annotations

import inspect

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import TINY_DIMS, tiny_h3_state_dict, write_tiny_h3

SIGMAS = torch.tensor([1.0, 0.95, 0.85, 0.6, 0.3, 0.0])
PDD_HEADS = 3


@pytest.fixture(scope="module")
def h3(comfy_inprocess):
    import comfy.ldm.minimax.model as model

    return model


def needs(h3, feature):
    checks = {
        "masks": ("MiniMaxH3Model.forward takes audio_denoise_mask (per-token modulation rows)",
                  "audio_denoise_mask" in inspect.signature(h3.MiniMaxH3Model.forward).parameters),
        "pdd": ("FinalLayer.forward takes sample_sigmas (PDD head bank)",
                "sample_sigmas" in inspect.signature(h3.FinalLayer.forward).parameters),
        "gate": ("DiTBlock takes gate_compress (VSA gate)",
                 "gate_compress" in inspect.signature(h3.DiTBlock.__init__).parameters),
    }
    what, present = checks[feature]
    if not present:
        pytest.skip(f"this ComfyUI lacks the feature: {what} (ComfyUI 0.38+)")


def load(tmp_path, pdd_heads=1, gate_compress=False):
    import comfy.sd

    path = write_tiny_h3(tmp_path, variant="fp32", gate_compress=gate_compress)
    patcher = comfy.sd.load_diffusion_model(str(path))
    if pdd_heads > 1:  # ComfyUI's CPU loader checks shapes strictly: the bank goes in after loading
        sd = tiny_h3_state_dict(variant="fp32", pdd_heads=pdd_heads)
        final = patcher.model.diffusion_model.final_layer
        for name in ("video_out", "audio_out"):
            head = getattr(final, name)
            head.weight = torch.nn.Parameter(sd[f"final_layer.{name}.weight"], requires_grad=False)
            head.bias = torch.nn.Parameter(sd[f"final_layer.{name}.bias"], requires_grad=False)
    return patcher


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def model_call(model, patches, final_forward, *, mask, seed=0):
    g = torch.Generator().manual_seed(seed)
    video = torch.randn(1, TINY_DIMS.video_channels, 3, 6, 8, generator=g)
    audio = torch.randn(1, TINY_DIMS.audio_channels, 2, 12, generator=g)
    context = torch.randn(1, 11, TINY_DIMS.text_dim, generator=g)
    tags = torch.tensor([1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1])  # text split into tag runs
    topts = {"patches_replace": {"dit": patches}, "sample_sigmas": SIGMAS}
    kwargs = {}
    if mask:
        am = torch.ones(1, 1, 2, 12)
        am[..., :5] = 0.0
        kwargs["audio_denoise_mask"] = am
    final = model.final_layer
    if final_forward is not None:
        final.forward = final_forward
    try:
        return model([video, audio], torch.tensor([850.0]), context, transformer_options=topts,
                     minimax_payload={"text_token_tags": tags}, **kwargs)
    finally:
        final.__dict__.pop("forward", None)


def streamed(model, chunks, seen=None):
    from longmedia.comfy.patching.attention_override import existing_attention_fn
    from longmedia.comfy.patching.block_patch import comfy_weights, outside_malloc_graph, streamed_replacement
    from longmedia.execution.final_layer import chunked_final_forward

    def spy(index, when):
        if seen is not None and when == "start":
            seen.append(index)

    patches = {("double_block", i): streamed_replacement(b, i, chunks, existing_attention_fn, on_block=spy)
               for i, b in enumerate(model.blocks)}
    return patches, outside_malloc_graph(chunked_final_forward(model.final_layer, 7, weights=comfy_weights()))


@pytest.mark.parametrize("pdd_heads,gate", [(1, False), (PDD_HEADS, False), (1, True), (PDD_HEADS, True)])
def test_masked_model_call_matches_the_hosts(h3, tmp_path, pdd_heads, gate):
    needs(h3, "masks")
    if pdd_heads > 1:
        needs(h3, "pdd")
    if gate:
        needs(h3, "gate")
    model = load(tmp_path, pdd_heads, gate).model.diffusion_model
    captured = []

    def capture(args, extra):
        captured.append(args["mod_segments"])
        return extra["original_block"](args)

    seen: list[int] = []
    with torch.inference_mode():
        stock = model_call(model, {("double_block", 0): capture}, None, mask=True)
        unmasked = model_call(model, {}, None, mask=False)
        patches, final = streamed(model, ChunkSizes(13, 5, 11), seen)
        ours = model_call(model, patches, final, mask=True)
    rows = [row for _, _, row in captured[0]]
    assert any(isinstance(r, torch.Tensor) for r in rows)  # per-token rows reached the blocks
    assert sum(1 for a, b, r in captured[0] if a < 11) >= 3  # and the text came as several runs
    assert seen == list(range(TINY_DIMS.num_blocks))
    assert rel(stock[1], unmasked[1]) > 1e-3
    for o, s in zip(ours, stock):
        assert torch.isfinite(s).all() and s.abs().sum() > 0
        assert rel(o, s) <= 1e-5


def test_pdd_sampler_job_matches_stock(h3, comfy_inprocess, tmp_path):
    needs(h3, "pdd")
    from comfy_extras import nodes_custom_sampler as ncs
    from harness import tiny_sampler_job

    from longmedia.comfy.passes.sampler import run_sampler

    patcher = load(tmp_path, PDD_HEADS)

    def job():
        return tiny_sampler_job(patcher, seed=4, steps=3)

    with torch.inference_mode():
        sv, sa = ncs.SamplerCustomAdvanced.execute(*job()).result[0]["samples"].unbind()
        result = run_sampler(*job(), PlanRequest(memory_mode="low_vram", attention_mode="existing",
                                                 sol_qkv_chunk_tokens=64, mlp_chunk_tokens=64))
    ov, oa = result.output["samples"].unbind()
    assert result.report.streamed_blocks == tuple(range(TINY_DIMS.num_blocks))
    assert result.plan.model.dims.video_channels == TINY_DIMS.video_channels
    assert torch.isfinite(sv).all() and sv.std() > 0.05
    assert rel(ov, sv) <= 1e-5 and rel(oa, sa) <= 1e-5
