"""Setup, Hi-Res and Refiner against ComfyUI's own H3 code, in-process on the tiny checkpoints.

(Through a real server's /prompt: tests/comfyui/test_workflows_api.py.)

Encoding paths use in-process stand-ins, since no tiny VAE loads through the stock loaders: `TinyVideoVAE`
(16x16 average pool, H3's 1+4+4+4+4 frames per latent within each 17-frame clip, a fixed random
3 -> 24 channel mix) and `TinyAudioVAE` (800-sample frames at 32 kHz -> [1, 32, 2, T]); the text
encoder is the tiny random Qwen3-VL with the real H3 tokenizer (`testnodes.tiny_text_encoder`).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from testnodes import tiny_text_encoder as tc

from longmedia.errors import LongMediaInputError
from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import TINY_DIMS

W, H, SECONDS, FRAMES = 64, 64, 0.9, 22     # 7 latent frames x 4 rows, 37 audio latent frames
NORMAL = PlanRequest(memory_mode="normal", attention_mode="existing")


class TinyVideoVAE:
    """Shapes and frame grouping of H3's video VAE: [F, H, W, 3] -> [1, 24, T, H/16, W/16]."""

    def __init__(self, seed: int = 0):
        self.mix = torch.randn(24, 3, generator=torch.Generator().manual_seed(seed))
        self.calls = 0

    def encode(self, pixels):
        self.calls += 1
        frames = pixels.shape[0]
        x = torch.nn.functional.avg_pool2d(pixels[..., :3].float().movedim(-1, 0), 16)     # [3, F, h, w]
        group = torch.tensor([0] if frames == 1 else
                             [(i // 17) * 5 + (0 if i % 17 == 0 else (i % 17 - 1) // 4 + 1) for i in range(frames)])
        t = int(group.max()) + 1
        summed = torch.zeros(3, t, *x.shape[2:]).index_add_(1, group, x)
        counts = torch.zeros(t).index_add_(0, group, torch.ones(frames))
        return torch.einsum("oc,cthw->othw", self.mix, summed / counts.view(1, t, 1, 1)).unsqueeze(0)


class TinyAudioVAE:
    """Shapes of H3's audio VAE at 32 kHz: [1, samples, channels] -> [1, 32, 2, ceil(samples / 800)]."""

    audio_sample_rate = 32000

    def __init__(self):
        self.calls = 0

    def encode(self, wave):
        self.calls += 1
        n, ch = wave.shape[1], wave.shape[2]
        t = math.ceil(n / 800)
        x = torch.nn.functional.pad(wave[0].float(), (0, 0, 0, t * 800 - n)).view(t, 800, ch).mean(1)
        x = x.repeat(1, 2)[:, :2] if ch == 1 else x[:, :2]
        return (x.T.unsqueeze(0) * torch.linspace(0.5, 1.5, 32).view(32, 1, 1)).unsqueeze(0)


def rand(*shape, seed=0, scale=1.0):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def audio(seconds, seed=0, channels=2):
    wave = (torch.randn(1, channels, round(seconds * 32000), generator=torch.Generator().manual_seed(seed)) * 0.1)
    return {"waveform": wave, "sample_rate": 32000}


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.comfy import setup as comfy_setup
    from longmedia.comfy.passes import sampler_inputs as comfy_job
    from longmedia.comfy.passes import stages as comfy_stages

    clip = tc.tiny_text_encoder(TINY_DIMS, seed=0)
    return {"samplers": comfy.samplers, "ncs": ncs, "h3n": h3n, "clip": clip, "job": comfy_job,
            "setup": comfy_setup, "stages": comfy_stages, "neg": tc.encode_prompt(clip, ""),
            "pos": tc.encode_prompt(clip, "a red fox trots through fresh snow"),
            "model": comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))}


def layout(env, result):
    video, audio_ = env["job"].av_latents(result.latent)
    return [(kind, b - a) for a, b, kind in env["job"].stock_row_spans(video, audio_, result.positive)]


def planned(result):
    return [(s.kind, s.rows) for s in result.job.geometry.row_spans]


def setup(env, **kw):
    args = dict(width=W, height=H, seconds=SECONDS)
    args.update(kw)
    positive = args.pop("positive", None if "clip" in args else env["pos"])
    return env["setup"].run_setup(positive, env["neg"], **args)


def guider(env, positive, negative=None, cfg=3.0):
    g = env["samplers"].CFGGuider(env["model"])
    g.set_conds(positive, negative or env["neg"])
    g.set_cfg(cfg)
    return g


def sigmas(env, steps=3):
    return env["samplers"].calculate_sigmas(env["model"].get_model_object("model_sampling"), "simple", steps).cpu()


def streams(latent):
    return latent["samples"].unbind()


def nested(video, audio_):
    import comfy.nested_tensor

    return comfy.nested_tensor.NestedTensor((video, audio_))


# --- Setup ---------------------------------------------------------------------------------------------------

def test_t2va_latent_and_layout_are_stock(env):
    result = setup(env)
    stock = env["h3n"].EmptyMiniMaxH3LatentAV.execute(W, H, FRAMES).result[0]["samples"].unbind()
    for ours, ref in zip(streams(result.latent), stock):
        assert ours.shape == ref.shape and not ours.any()
    assert result.positive is env["pos"] and result.negative is env["neg"]
    assert layout(env, result) == planned(result)
    assert "0.9 s -> 22 frames" in result.summary and result.job.family == "t2va"
    assert "decode on this machine fits" in result.summary.splitlines()[-1]
    assert result.summary.splitlines()[-2].startswith(("on this machine (h3-int8 checkpoint, python -m longmedia "
                                                        "plan's defaults): LongMedia whole-job plan: FITS",
                                                        "whole job not planned: no GPU"))
    json.dumps(result.job.to_dict())


@pytest.mark.parametrize("ram", [8, 16, 32, 64])
def test_setup_refuses_where_the_whole_job_plan_does_and_the_sampler_reports_that_plan(env, ram):
    """Setup's preflight is `plan_job`'s verdict on the machine (an 8 GB machine: the decode does not fit in RAM; 16, 32
    and 64 GB: it fits), refused before the latent exists in its words, else noted as the CLI's first lines say it;
    the Sampler's one pass reports `plan_job` over its own plan, its steps and its guider's cfg."""
    from longmedia.h3.profiles import COMFYUI_HELD_BYTES, DeviceProfile
    from longmedia.job.setup_plan import SetupRequest, plan_setup
    from longmedia.planning.setup_job import machine_job
    from longmedia.planning.whole_job import plan_job

    device = DeviceProfile.card(16, ram, host_held_bytes=COMFYUI_HELD_BYTES)
    plan = plan_setup(SetupRequest(W, H, SECONDS, ram_available_bytes=device.ram_available_bytes))
    job = machine_job(plan.geometry, device)
    if not job.fits_ram:
        with pytest.raises(LongMediaInputError, match="the whole-job plan says DOES NOT FIT") as info:
            setup(env, device_profile=device)
        assert info.value.input_name == "seconds" and all(s in str(info.value) for s in job.shortfalls())
        assert ram == 8
        return
    result = setup(env, device_profile=device)
    assert "; ".join(job.headline()) in result.summary.splitlines()[-2] and ram >= 16
    steps, cfg = 2, 3.0
    g = guider(env, result.positive, result.negative, cfg)
    out = env["stages"].run_sampler(env["ncs"].Noise_RandomNoise(ram), g, env["samplers"].sampler_object("euler"),
                                    sigmas(env, steps), result.latent, NORMAL)
    report = out.report
    assert report.whole_job == plan_job(report.plan, steps=steps, cfg=cfg)
    assert report.to_dict()["whole_job"]["headline"] == list(report.whole_job.headline())
    assert report.whole_job.headline()[0] in report.summary_lines()


def test_t2va_with_clip_equals_clip_text_encode(env):
    result = setup(env, clip=env["clip"], prompt="a red fox trots through fresh snow")
    assert torch.equal(result.positive[0][0], env["pos"][0][0])
    assert layout(env, result) == planned(result)


def test_fl2va_from_positive_equals_stock_add_guide(env):
    first, last = rand(1, 80, 96, 3, seed=1), rand(1, 64, 64, 3, seed=2)
    vae = TinyVideoVAE()
    result = setup(env, family="fl2va", vae=vae, first_frame=first, last_frame=last)
    h3n = env["h3n"]
    latent = h3n.EmptyMiniMaxH3LatentAV.execute(W, H, FRAMES).result[0]
    cond = h3n.MiniMaxH3AddGuide.execute(env["pos"], latent, 0, vae=vae, image=first).result[0]
    cond = h3n.MiniMaxH3AddGuide.execute(cond, latent, -1, vae=vae, image=last).result[0]
    ours, stock = result.positive[0][1]["minimax_keyframes"], cond[0][1]["minimax_keyframes"]
    assert [k["resolved_frame_index"] for k in ours] == [0, FRAMES - 1]
    for a, b in zip(ours, stock):
        assert torch.equal(a["latent"], b["latent"])
    assert layout(env, result) == planned(result)
    assert any("AddGuide" in n for n in result.job.notes)


def test_fl2va_from_clip_equals_stock_image_to_video(env):
    first = rand(1, 64, 64, 3, seed=3)
    vae = TinyVideoVAE()
    result = setup(env, family="fl2va", clip=env["clip"], prompt="a fox", vae=vae, first_frame=first)
    cond, _ = env["h3n"].MiniMaxH3ImageToVideo.execute(env["clip"], vae, "a fox", W, H, FRAMES,
                                                        first_frame=first).result
    assert torch.equal(result.positive[0][0], cond[0][0])
    assert layout(env, result) == planned(result)


def test_ref2va_caps_follow_the_budget_and_the_layout_matches_the_plan(env):
    refs = {"ref_image_2": rand(2, 600, 600, 3, seed=4), "ref_video_1": rand(50, 180, 320, 3, seed=5),
            "ref_video_audio_1": audio(6.0, seed=6), "ref_audio_1": audio(5.5, seed=7, channels=1)}
    vae, avae = TinyVideoVAE(), TinyAudioVAE()
    result = setup(env, family="ref2va", clip=env["clip"], prompt="<Picture 1> and <Video 1>", vae=vae,
                   audio_vae=avae, ref_image_size="max", references=refs, seconds=1.6)
    assert layout(env, result) == planned(result)               # text rows included: presentation tokens
    blocks = result.positive[0][1]["minimax_refs"]
    assert [b["kind"] for b in blocks] == ["image", "video_audio", "audio"]
    picture, video, sound = blocks
    assert (picture["latent_w"] * 16, picture["latent_h"] * 16) == (512, 512)      # 608x608 capped to 512x512
    assert video["latent_t"] == 7 and video["latent_w"] * video["latent_h"] * 256 <= 512 * 288
    assert video["ref_audio_t"] == sound["ref_audio_t"] == 200                         # 6 s / 5.5 s -> 5 s
    notes = "\n".join(result.job.notes)
    assert "ref_image_2: 2 images" in notes and "39 -> 22 frames" in notes and "6 s -> 5 s" in notes


def test_ref2va_max_budget_equals_the_stock_node(env):
    refs = {"ref_image_1": rand(1, 96, 128, 3, seed=8), "ref_audio_1": audio(1.0, seed=9)}
    vae, avae = TinyVideoVAE(), TinyAudioVAE()
    result = setup(env, family="ref2va", clip=env["clip"], prompt="<Picture 1>", vae=vae, audio_vae=avae,
                   reference_budget="max", references=refs)
    cond, _ = env["h3n"].MiniMaxH3ReferenceToVideo.execute(
        clip=env["clip"], vae=vae, audio_vae=avae, prompt="<Picture 1>", width=W, height=H, length=FRAMES,
        ref_image_size="match", ref_images={"ref_image_1": refs["ref_image_1"]},
        ref_audios={"ref_audio_1": refs["ref_audio_1"]}).result
    assert torch.equal(result.positive[0][0], cond[0][0])
    for a, b in zip(result.positive[0][1]["minimax_refs"], cond[0][1]["minimax_refs"]):
        key = "latent" if "latent" in a else "audio_latent"
        assert torch.equal(a[key], b[key])
    assert not any("reference_budget" in n for n in result.job.notes)


def test_segmented_setup_returns_the_whole_job_latent(env):
    result = setup(env, seconds=2.0, segment_seconds=1.0, context_frames=22)
    stock = env["h3n"].EmptyMiniMaxH3LatentAV.execute(W, H, 56).result[0]["samples"].unbind()
    assert [s.shape for s in streams(result.latent)] == [s.shape for s in stock]
    job = result.job
    assert job.segmented and job.segments.count == 2 and job.geometry.frames == 39 and job.geometry.total_frames == 56


def test_segmented_fl2va_setup_runs_through_the_segmented_sampler(env):
    from longmedia.comfy.passes.segmented import run_segmented

    result = setup(env, family="fl2va", vae=TinyVideoVAE(), first_frame=rand(1, 64, 64, 3, seed=20),
                   last_frame=rand(1, 64, 64, 3, seed=21), seconds=2.0, segment_seconds=1.0)
    frames = [k["resolved_frame_index"] for k in result.positive[0][1]["minimax_keyframes"]]
    assert frames == [0, 55] and result.job.segmented
    out = run_segmented(env["ncs"].Noise_RandomNoise(22), guider(env, result.positive, result.negative),
                        env["samplers"].sampler_object("euler"), sigmas(env, 2), result.latent, NORMAL,
                        result.job.segments)
    video, audio_ = streams(out.output)
    assert video.shape == (1, 24, 17, 4, 4) and audio_.shape == (1, 32, 2, 93) and torch.isfinite(video).all()


@pytest.mark.parametrize("kw,name", [
    (dict(clip="clip", positive="pos"), "positive"),
    (dict(family="fl2va", first_frame=torch.rand(64, 64, 3)), "first_frame"),
    (dict(family="ref2va", clip="clip", references={"ref_video_audio_2": audio(1.0)}), "ref_video_audio_2"),
    (dict(family="ref2va", clip="clip", references={"ref_image_1": torch.rand(1, 64, 64, 3)}), "vae"),
    (dict(width=100), "width"),
    (dict(references={"ref_picture_1": torch.rand(1, 8, 8, 3)}), "ref_picture_1"),
    (dict(positive=[["not a tensor", {}]]), "positive"),
])
def test_setup_errors_come_before_any_encoding(env, kw, name):
    vae = TinyVideoVAE()
    kw = {k: (env[v] if isinstance(v, str) and v in ("clip", "pos") else v) for k, v in kw.items()}
    with pytest.raises(LongMediaInputError, match=name):
        setup(env, **({"vae": vae} if name != "vae" else {}), **kw)
    assert vae.calls == 0


def test_setup_reads_dynamic_flat_and_dotted_input_names_alike():
    """ComfyUI hands a DynamicCombo `family` to execute as a nested dict; a prompt saved with the flat names
    (ref_image_1) or, on a host without dynamic inputs, with the dotted ones (family.pictures.ref_image_1)
    arrives as extra keywords. All land on the same core names; two sources for one input are refused."""
    from longmedia.comfy.setup import setup_media

    pic, video, track, first = rand(1, 8, 8, 3, seed=1), rand(5, 8, 8, 3, seed=2), audio(1.0, seed=3), rand(1, 8, 8, 3)
    nested = {"family": "ref2va", "pictures": {"ref_image_1": pic}, "videos": {"ref_video_1": video},
              "video_audios": {"ref_video_audio_1": track}, "audios": {}}
    flat = {"ref_image_1": pic, "ref_video_1": video, "ref_video_audio_1": track}
    dotted = {"family.pictures.ref_image_1": pic, "family.videos.ref_video_1": video,
              "family.video_audios.ref_video_audio_1": track}
    for family, extra in ((nested, {}), ("ref2va", flat), ("ref2va", dotted), ({"family": "ref2va"}, flat)):
        name, media = setup_media(family, extra)
        assert name == "ref2va" and media.keys() == flat.keys(), (family, extra)
        assert all(media[k] is flat[k] for k in flat)
    assert setup_media({"family": "fl2va", "first_frame": first}, {}) == ("fl2va", {"first_frame": first})
    assert setup_media("t2va", {"ref_image_2": None}) == ("t2va", {})
    with pytest.raises(LongMediaInputError, match="ref_image_1.*family.pictures.ref_image_1"):
        setup_media(nested, {"ref_image_1": pic})
    with pytest.raises(LongMediaInputError, match="family.pictures.ref_picture_1"):
        setup_media("ref2va", {"family.pictures.ref_picture_1": pic})


def test_setup_job_samples_on_tiny_h3_with_the_planned_sequence(env):
    refs = {"ref_image_1": rand(1, 64, 96, 3, seed=10)}
    result = setup(env, family="ref2va", clip=env["clip"], prompt="<Picture 1> runs", vae=TinyVideoVAE(),
                   references=refs)
    out = env["stages"].run_sampler(env["ncs"].Noise_RandomNoise(5), guider(env, result.positive, result.negative),
                                    env["samplers"].sampler_object("euler"), sigmas(env, 2), result.latent, NORMAL)
    video, audio_ = streams(out.output)
    assert torch.isfinite(video).all() and video.std() > 0.05 and torch.isfinite(audio_).all()
    assert out.plan.geometry.seq_len == result.job.geometry.seq_len
