"""The Sampler plans the job it runs, and the stages' errors say what happened (issue 28, deliver 3), in-process.

Each test here failed on the code before issue 28:
* the Sampler planned under reference_budget "max" whatever Setup's job said;
* it sized only the positive prompt's rows (a longer negative prompt's model call went unplanned);
* a packed layout it could not read was re-planned silently without guides and references;
* an OOM inside a learned upscaler was reported as "this upscaler does not take H3 latents";
* a Hi-Res or Refiner pass that fits no mode was refused advising Setup's segment_seconds, which they do not have.
"""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

from longmedia.errors import LongMediaInputError
from longmedia.h3.profiles import DeviceProfile
from longmedia.planning.types import PlanRequest
from longmedia.report.oom import LongMediaOOM
from longmedia.testing import conditioning as tc
from longmedia.testing.tiny_h3 import TINY_DIMS

W = H = 64
FRAMES = 22
NORMAL = PlanRequest(memory_mode="normal", attention_mode="existing")


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.nested_tensor
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.comfy.passes import sampler as comfy_sampler
    from longmedia.comfy.passes import stages

    model = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    return {"samplers": comfy.samplers, "ncs": ncs, "h3n": h3n, "model": model, "core": comfy_sampler,
            "stages": stages, "nested": comfy.nested_tensor.NestedTensor}


def guider(env, positive, negative, cfg=3.0):
    g = env["samplers"].CFGGuider(env["model"])
    g.set_conds(positive, negative)
    g.set_cfg(cfg)
    return g


def sigmas(env, steps=2):
    return env["samplers"].calculate_sigmas(env["model"].get_model_object("model_sampling"), "simple", steps).cpu()


def latent(env, frames=FRAMES):
    return env["h3n"].EmptyMiniMaxH3LatentAV.execute(W, H, frames).result[0]


def run(env, g, lat=None, request=NORMAL, seed=4):
    return env["core"].run_sampler(env["ncs"].Noise_RandomNoise(seed), g, env["samplers"].sampler_object("euler"),
                                   sigmas(env), lat or latent(env), request)


def test_the_sampler_node_plans_under_setup_s_reference_budget(env, comfyui_root):
    from test_parameters_live import _generator

    from longmedia.comfy.setup import run_setup

    gen = _generator()
    gen.import_comfyui(comfyui_root)
    node = importlib.import_module(f"{gen.load_pack().__name__}.nodes.sampler").LongMediaSampler
    pos, neg = tc.random_conditioning(9, dims=TINY_DIMS, seed=11), tc.random_conditioning(4, dims=TINY_DIMS, seed=12)
    for budget in ("medium", "high"):
        setup = run_setup(pos, neg, width=W, height=H, seconds=FRAMES / 24, reference_budget=budget)
        assert setup.job.reference_budget == budget
        out = node.execute(env["ncs"].Noise_RandomNoise(5), guider(env, setup.positive, setup.negative),
                           env["samplers"].sampler_object("euler"), sigmas(env), setup.latent, job=setup.job,
                           memory_mode="normal", attention_mode="existing")
        report = out.ui["longmedia_report"][0]
        assert report["plan"]["geometry"]["reference_budget"]["name"] == budget      # was "max" before issue 28
    without = node.execute(env["ncs"].Noise_RandomNoise(5), guider(env, pos, neg), env["samplers"].sampler_object("euler"),
                           sigmas(env), latent(env), memory_mode="normal", attention_mode="existing")
    assert without.ui["longmedia_report"][0]["plan"]["geometry"]["reference_budget"]["name"] == "max"   # no job


def test_a_longer_negative_prompt_is_the_pass_the_plan_sizes(env):
    from longmedia.comfy.passes.sampler_inputs import stock_row_spans

    pos, neg = tc.random_conditioning(7, dims=TINY_DIMS, seed=1), tc.random_conditioning(61, dims=TINY_DIMS, seed=2)
    lat = latent(env)
    result = run(env, guider(env, pos, neg), lat)
    video, audio = lat["samples"].unbind()
    want = stock_row_spans(video, audio, neg)
    assert result.plan.geometry.text_rows == 61 and result.plan.geometry.seq_len == want[-1][1]
    shorter = run(env, guider(env, neg, pos), lat)               # the same two prompts swapped: the same plan rows
    assert shorter.plan.geometry.seq_len == result.plan.geometry.seq_len


def test_a_layout_the_sampler_cannot_read_is_an_error_naming_the_guider(env, monkeypatch):
    pos, neg = tc.random_conditioning(7, dims=TINY_DIMS, seed=3), tc.random_conditioning(5, dims=TINY_DIMS, seed=4)
    guide = {"frame": 0, "latent": torch.randn(1, 24, 1, 4, 4, generator=torch.Generator().manual_seed(5))}
    bad = [[pos[0][0], dict(pos[0][1], minimax_keyframes=[guide])]]      # no resolved_frame_index
    g = guider(env, bad, neg)

    def never(*args, **kwargs):
        raise AssertionError("sampling started")

    monkeypatch.setattr(type(g), "sample", never)
    with pytest.raises(LongMediaInputError) as info:
        run(env, g)
    assert info.value.input_name == "guider" and "resolved_frame_index" in str(info.value)
    assert "{frame, latent}" in str(info.value)


class OOMUpscaler:
    """A latent upscaler (the HunyuanVideo SR interface) whose forward runs out of memory."""

    def __init__(self):
        self.model = torch.nn.Conv3d(24, 24, 1)

    def resample_latent(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB (GPU 0; 15.99 GiB total)")


def test_an_upscaler_oom_is_the_oom_report_with_its_phase(env):
    pos, neg = tc.random_conditioning(7, dims=TINY_DIMS, seed=6), tc.random_conditioning(5, dims=TINY_DIMS, seed=7)
    first = run(env, guider(env, pos, neg)).output
    with pytest.raises(LongMediaOOM) as info:
        env["stages"].upscale_latent(first, 1.5, "bilinear", OOMUpscaler())
    report = info.value.report
    assert report.phase == "latent_upscale" and "upscaler" in report.pressure_point
    assert "Tried to allocate 9.00 GiB" in report.error and "job input" in report.next_step


def test_a_stage_pass_that_fits_no_mode_names_the_stage_s_input(env, monkeypatch):
    pos, neg = tc.random_conditioning(7, dims=TINY_DIMS, seed=8), tc.random_conditioning(5, dims=TINY_DIMS, seed=9)
    g = guider(env, pos, neg)
    first = run(env, g).output
    tiny = dataclasses.replace(DeviceProfile.card(2, 8), vram_free_bytes=1 << 16, name="a card with 64 KiB free")
    monkeypatch.setattr(env["core"], "load_device_profile", lambda load_device, measured=None: tiny)
    auto = PlanRequest()
    with pytest.raises(LongMediaInputError) as hires:
        env["stages"].run_hires(env["ncs"].Noise_RandomNoise(1), g, env["samplers"].sampler_object("euler"),
                                sigmas(env, 4), first, auto, scale=1.5)
    with pytest.raises(LongMediaInputError) as refiner:
        env["stages"].run_refiner(env["ncs"].Noise_RandomNoise(1), g, env["samplers"].sampler_object("euler"),
                                  first, auto, steps=2)
    for info in (hires, refiner):
        assert info.value.input_name == "job" and "segment by segment" in info.value.fix   # was "latent"
        assert "job input" in info.value.fix
    assert "lower scale" in hires.value.fix and "lower scale" not in refiner.value.fix
