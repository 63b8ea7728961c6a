# ruff: noqa: F811  (env: test_stage_nodes.py's module fixture, imported, then named by each test)
"""Hi-Res and the Refiner against ComfyUI's own H3 code, in-process on the tiny checkpoints (Setup's tests and the
shared fixture and helpers: test_stage_nodes.py)."""

from __future__ import annotations

import pytest
import torch
from test_stage_nodes import (  # noqa: F401
    FRAMES,
    NORMAL,
    H,
    TinyVideoVAE,
    W,
    audio,
    env,
    guider,
    nested,
    rand,
    setup,
    sigmas,
    streams,
)

from longmedia.errors import LongMediaInputError
from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import TINY_DIMS

# --- Hi-Res ----------------------------------------------------------------------------------------------------

def first_pass(env, seed=11, positive=None, latent=None):
    latent = latent or env["h3n"].EmptyMiniMaxH3LatentAV.execute(W, H, FRAMES).result[0]
    g = guider(env, positive or env["pos"])
    out = env["stages"].run_sampler(env["ncs"].Noise_RandomNoise(seed), g, env["samplers"].sampler_object("euler"),
                                    sigmas(env), latent, NORMAL)
    return g, out.output


def hires(env, g, latent, seed=12, steps=4, request=NORMAL, **kw):
    return env["stages"].run_hires(env["ncs"].Noise_RandomNoise(seed), g, env["samplers"].sampler_object("euler"),
                                   sigmas(env, steps), latent, request, **kw)


def refine(env, g, latent, seed=18, request=NORMAL, **kw):
    return env["stages"].run_refiner(env["ncs"].Noise_RandomNoise(seed), g, env["samplers"].sampler_object("euler"),
                                     latent, request, **kw)


def stock_masked(env, g, sig, latent, seed):
    """SamplerCustomAdvanced with a nested noise mask: video 1, audio 0 (what the stages must equal)."""
    video, audio_ = streams(latent)
    mask = nested(torch.ones((1, 1) + tuple(video.shape[2:])), torch.zeros((1, 1) + tuple(audio_.shape[2:])))
    masked = {**latent, "noise_mask": mask}
    return env["ncs"].SamplerCustomAdvanced.execute(env["ncs"].Noise_RandomNoise(seed), g,
                                                    env["samplers"].sampler_object("euler"), sig, masked).result[0]


def test_hires_equals_resample_plus_masked_stock_sampling(env):
    from longmedia.h3.latent_resample import resample_video

    g, first = first_pass(env)
    video, audio_ = streams(first)
    result = hires(env, g, first, scale=1.5, denoise=0.5)
    up = resample_video(video, (6, 6), "bicubic")
    stock = stock_masked(env, g, sigmas(env, 4)[-3:], {"samples": nested(up, audio_)}, 12)
    ours_v, ours_a = streams(result.output)
    assert ours_v.shape == (1, 24, 7, 6, 6) and torch.equal(ours_v, streams(stock)[0])
    assert torch.equal(ours_a, audio_)                                   # bit for bit
    assert not torch.equal(ours_v, up) and torch.isfinite(ours_v).all()
    assert result.plan.geometry.video_rows == 7 * 9 and result.sigmas.numel() == 3
    assert "noise_mask" not in result.output and "noise_mask" not in result.denoised
    assert torch.equal(streams(result.denoised)[1], audio_)
    notes = "\n".join(result.report.notes)
    assert "64x64 -> 96x96 px" in notes and "audio kept bit for bit" in notes


def test_hires_streamed_plan_matches_normal(env):
    g, first = first_pass(env)
    normal = hires(env, g, first, seed=13, scale=2.0)
    low = hires(env, g, first, seed=13, scale=2.0, request=PlanRequest(
        memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64, mlp_chunk_tokens=64))
    a, b = streams(low.output)[0], streams(normal.output)[0]
    assert ((a - b).norm() / b.norm()).item() < 1e-5
    assert low.plan.memory_mode == "low_vram" and low.report.streamed_blocks == tuple(range(TINY_DIMS.num_blocks))


def test_hires_without_keep_audio_resamples_the_audio(env):
    g, first = first_pass(env)
    result = hires(env, g, first, seed=14, scale=1.25, keep_audio=False)
    assert not torch.equal(streams(result.output)[1], streams(first)[1])
    assert any("re-noised and sampled" in n for n in result.report.notes)


def test_hires_resizes_fl2va_guides_with_the_video(env):
    fl = setup(env, family="fl2va", vae=TinyVideoVAE(), first_frame=rand(1, 64, 64, 3, seed=15))
    g, first = first_pass(env, positive=fl.positive, latent=fl.latent)
    result = hires(env, g, first, seed=16, steps=3, scale=2.0, denoise=0.67)
    assert streams(result.output)[0].shape == (1, 24, 7, 8, 8) and torch.isfinite(streams(result.output)[0]).all()
    assert result.plan.geometry.cond_rows == 16 and any("guide latents resized" in n for n in result.report.notes)
    assert g.original_conds["positive"][0]["minimax_keyframes"][0]["latent"].shape[-1] == 4   # caller's guider intact


def test_hires_with_a_learned_upscaler(env):
    from comfy.ldm.hunyuan_video.upsampler import HunyuanVideo15SRModel

    def sr(channels):
        model = HunyuanVideo15SRModel("720p", {"in_channels": channels, "out_channels": channels,
                                               "hidden_channels": 8, "num_blocks": 1, "global_residual": False})
        gen = torch.Generator().manual_seed(17)
        model.load_sd({k: torch.randn(v.shape, generator=gen) * 0.05 for k, v in model.get_sd().items()})
        return model

    g, first = first_pass(env)
    up, notes = env["stages"].upscale_latent(first, 1.5, "bilinear", sr(24))
    video = streams(up)[0]
    assert video.shape == (1, 24, 7, 6, 6) and torch.isfinite(video).all() and "HunyuanVideo15SRModel" in notes[0]
    assert streams(up)[1] is streams(first)[1]
    with pytest.raises(LongMediaInputError, match="upscaler"):
        env["stages"].upscale_latent(first, 1.5, "bilinear", sr(32))
    with pytest.raises(LongMediaInputError, match="upscaler"):
        env["stages"].upscale_latent(first, 1.5, "bilinear", object())


@pytest.mark.parametrize("kw,name", [(dict(scale=2.5), "scale"), (dict(denoise=0.1), "denoise"),
                                     (dict(renoise_sigma=5.0), "renoise_sigma"), (dict(method="lanczos"), "method")])
def test_hires_input_errors(env, kw, name):
    g, first = first_pass(env)
    with pytest.raises(LongMediaInputError, match=name):
        hires(env, g, first, **kw)


def test_renoise_sigma_starts_the_tail_there(env):
    sig = sigmas(env, 6)
    tail = env["stages"].tail_sigmas(sig, 0.5, renoise_sigma=0.5)
    assert tail[0].item() == 0.5 and torch.equal(tail[1:], sig[sig < 0.5])
    assert torch.equal(env["stages"].tail_sigmas(sig, 0.5), sig[-4:])


# --- Refiner ---------------------------------------------------------------------------------------------------

def test_refiner_equals_masked_stock_sampling_and_keeps_audio(env):
    g, first = first_pass(env)
    result = refine(env, g, first, steps=2, denoise=0.3)
    schedule = env["ncs"].BasicScheduler.execute(g.model_patcher, "simple", 2, 0.3).result[0]
    assert torch.equal(result.sigmas, schedule)
    stock = stock_masked(env, g, schedule, first, 18)
    video, audio_ = streams(result.output)
    assert torch.equal(video, streams(stock)[0]) and not torch.equal(video, streams(first)[0])
    assert torch.equal(audio_, streams(first)[1]) and torch.equal(streams(result.denoised)[1], streams(first)[1])
    # the masked stock run alone does not give the exact audio back: restoring it is what makes it bit for bit
    assert (streams(stock)[1] - streams(first)[1]).abs().max() < 1e-4


def test_refiner_explicit_sigmas_and_errors(env):
    g, first = first_pass(env)
    sig = sigmas(env, 8)[-3:]
    result = refine(env, g, first, seed=19, sigmas=sig)
    assert torch.equal(result.sigmas, sig) and any("connected sigmas" in n for n in result.report.notes)
    for kw, name in ((dict(steps=0), "steps"), (dict(denoise=0.0), "denoise"),
                     (dict(sigmas=torch.tensor([0.2, 0.5, 0.0])), "sigmas")):
        with pytest.raises(LongMediaInputError, match=name):
            refine(env, g, first, **kw)
    with pytest.raises(LongMediaInputError, match="latent"):
        refine(env, g, {"samples": torch.zeros(1, 16, 2, 8, 8)})


def test_setup_resizes_a_reference_as_the_stock_node_does(comfy_inprocess):
    """Setup shrinks a picture and a video within the reference budget with ComfyUI's public `common_upscale`,
    giving what the stock H3 node's own resize gives (its private `_resize`, read here only to compare)."""
    from comfy_extras.nodes_minimax_h3 import _resize

    from longmedia.comfy.setup import prepared_references
    from longmedia.job.setup_plan import ReferencePrep

    pic, video = rand(1, 24, 40, 4, seed=5), rand(5, 24, 40, 3, seed=6)
    preps = (ReferencePrep("ref_image_1", "picture", resize_to=(32, 16)),
             ReferencePrep("ref_video_1", "video", resize_to=(32, 16), keep_frames=5))
    plan = type("Plan", (), {"preps": preps})  # prepared_references reads only the plan's preps
    out = prepared_references({"ref_image_1": pic, "ref_video_1": video}, plan)
    assert torch.equal(out["ref_images"]["ref_image_1"], _resize(pic[:1], 32, 16, "disabled"))
    assert torch.equal(out["ref_videos"]["ref_video_1"], _resize(video, 32, 16, "disabled"))
