"""Directing a long job on the tiny H3 checkpoints: a prompt per segment, pinned seeds, and retakes.

A 4-segment job with 4 prompts (Setup encodes each with the tiny text encoder) runs; changing segment 2's seed
(the third) samples segments 2 and 3 only, and the output equals a fresh run with the same per-segment inputs
bit for bit; another model, a LoRA-style weight patch, another sampler or other sigmas invalidate every segment.
"""

from __future__ import annotations

import pytest
import torch
from testnodes import tiny_text_encoder as tc

from longmedia.comfy.passes import segmented
from longmedia.errors import LongMediaInputError
from longmedia.planning.types import PlanRequest
from longmedia.segments.retakes import RetakeCache
from longmedia.testing.tiny_h3 import TINY_DIMS
from longmedia.units import MIB

W = H = 64
STEPS, SEED = 2, 5
SEGMENT_SECONDS, CONTEXT = 39 / 24, 22        # a 39-frame first pass, then 34 new frames behind 22 context frames
SECONDS = (39 + 3 * 34) / 24                  # 141 frames: 4 segments
PROMPTS = ("a red fox trots through fresh snow", "the fox stops and sniffs the cold air",
           "the fox leaps onto a frozen river, ice cracking under its paws", "the fox runs into the pine forest")
NORMAL = PlanRequest(memory_mode="normal", attention_mode="existing")


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs

    from longmedia.comfy import setup as comfy_setup

    clip = tc.tiny_text_encoder(TINY_DIMS, seed=0)
    return {"samplers": comfy.samplers, "ncs": ncs, "clip": clip, "setup": comfy_setup, "sd": comfy.sd,
            "neg": tc.encode_prompt(clip, ""), "path": str(tiny_checkpoints["fp32"]),
            "other_path": str(tiny_checkpoints["bf16"]),
            "model": comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))}


def setup(env, prompts=PROMPTS, **kw):
    return env["setup"].run_setup(None, env["neg"], width=W, height=H, seconds=SECONDS, segment_seconds=SEGMENT_SECONDS,
                                  context_frames=CONTEXT, clip=env["clip"], prompt="",
                                  segment_prompts="\n".join(prompts), **kw)


@pytest.fixture(scope="module")
def story(env):
    return setup(env)


def run(env, made, cache=None, *, seeds=None, model=None, sampler="euler", scheduler="simple", steps=STEPS, cfg=3.0):
    """One segmented run with fresh ComfyUI objects (guider, sampler, sigmas, noise), as a new queue makes them."""
    samplers = env["samplers"]
    model = model or env["model"]
    guider = samplers.CFGGuider(model)
    guider.set_conds(made.positive, made.negative)
    guider.set_cfg(cfg)
    sigmas = samplers.calculate_sigmas(model.get_model_object("model_sampling"), scheduler, steps).cpu()
    return segmented.run_segmented(env["ncs"].Noise_RandomNoise(SEED), guider, samplers.sampler_object(sampler),
                                   sigmas, made.latent, NORMAL, made.job.segments, seeds=seeds,
                                   prompts=made.job.prompts, retakes=cache)


class Passes:
    """Counts the passes sampled and records the positive text each one got."""

    def __init__(self, monkeypatch):
        self.texts = []
        real = segmented.comfy_sampler.run_sampler

        def run_sampler(noise, guider, *args, **kwargs):
            self.texts.append(guider.original_conds["positive"][0]["cross_attn"])
            return real(noise, guider, *args, **kwargs)

        monkeypatch.setattr(segmented.comfy_sampler, "run_sampler", run_sampler)


def latents(result):
    return [*result.output["samples"].unbind(), *result.denoised["samples"].unbind()]


def identical(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(latents(a), latents(b), strict=True))


def test_four_prompts_condition_their_own_segments(env, story, monkeypatch):
    job = story.job
    assert job.segmented and job.segments.count == 4 and job.prompts.texts == PROMPTS
    passes = Passes(monkeypatch)
    result = run(env, story)
    assert len(passes.texts) == 4
    for text, prompt in zip(passes.texts, PROMPTS):    # each pass: its own prompt through the same text encoder
        assert torch.equal(text, tc.encode_prompt(env["clip"], prompt)[0][0])
    assert len({t.shape[1] for t in passes.texts}) > 1       # the prompts differ in length ...
    longest = max(t.shape[1] for t in passes.texts)
    assert job.geometry.text_rows == longest                  # ... and Setup planned every pass for the longest
    forecast = result.report.forecast
    actual = [s.run.plan.geometry.seq_len for s in result.report.segments]
    assert all(f.seq_len == a + longest - t.shape[1] for f, a, t in zip(forecast, actual, passes.texts))
    assert [s.prompt for s in result.report.segments] == list(PROMPTS)
    assert all(s.source == "sampled" for s in result.report.segments) and result.report.retakes is None
    summary = setup(env).summary
    assert "| start | duration | prompt" in summary and "the fox leaps onto a frozen river, ice \u2026" in summary
    video, audio = result.output["samples"].unbind()
    assert video.shape[2] == job.segments.video_latent_frames and torch.isfinite(video).all() and video.std() > 0.05


@pytest.mark.parametrize("node", ["hires", "refiner"])
def test_hires_and_refiner_passes_get_their_segment_s_prompt(env, story, monkeypatch, node):
    """Each Hi-Res / Refiner pass is guided by its own segment's prompt, as the Sampler's pass was, and every pass
    is planned for the longest prompt's rows."""
    from longmedia.comfy.passes import stages

    sampled = run(env, story)
    samplers = env["samplers"]
    guider = samplers.CFGGuider(env["model"])
    guider.set_conds(story.positive, story.negative)
    guider.set_cfg(3.0)
    texts = []
    real = stages.run_sampler if node == "hires" else stages.sample_keeping_audio

    def record(noise, g, *args, **kwargs):
        texts.append(g.original_conds["positive"][0]["cross_attn"])
        return real(noise, g, *args, **kwargs)

    monkeypatch.setattr(stages, "run_sampler" if node == "hires" else "sample_keeping_audio", record)
    noise, euler = env["ncs"].Noise_RandomNoise(SEED), samplers.sampler_object("euler")
    if node == "hires":
        sigmas = samplers.calculate_sigmas(env["model"].get_model_object("model_sampling"), "simple", 4).cpu()
        result = stages.run_hires(noise, guider, euler, sigmas, sampled.output, NORMAL, scale=1.5, job=story.job)
    else:
        result = stages.run_refiner(noise, guider, euler, sampled.output, NORMAL, steps=2, job=story.job)
    assert len(texts) == 4
    for text, prompt in zip(texts, PROMPTS):
        assert torch.equal(text, tc.encode_prompt(env["clip"], prompt)[0][0])
    longest = max(t.shape[1] for t in texts)
    forecast, segments = result.report.forecast, result.report.segments
    assert all(f.seq_len == s.run.plan.geometry.seq_len + longest - t.shape[1]
               for f, s, t in zip(forecast, segments, texts, strict=True))
    assert [s.prompt for s in segments] == list(PROMPTS) and result.report.prompts is not None


def test_a_refiner_with_its_own_prompt_keeps_it_on_every_pass(env, story, monkeypatch):
    """A stage guider built on another positive (a detail prompt, say) is the user's choice: every pass gets it,
    and the report says Setup's per-segment prompts were not followed."""
    from longmedia.comfy.passes import stages

    sampled = run(env, story)
    samplers = env["samplers"]
    detail = tc.encode_prompt(env["clip"], "sharp fur detail, crisp snow texture")
    guider = samplers.CFGGuider(env["model"])
    guider.set_conds(detail, story.negative)
    guider.set_cfg(3.0)
    texts = []
    real = stages.sample_keeping_audio

    def record(noise, g, *args, **kwargs):
        texts.append(g.original_conds["positive"][0]["cross_attn"])
        return real(noise, g, *args, **kwargs)

    monkeypatch.setattr(stages, "sample_keeping_audio", record)
    result = stages.run_refiner(env["ncs"].Noise_RandomNoise(SEED), guider, samplers.sampler_object("euler"),
                                sampled.output, NORMAL, steps=2, job=story.job)
    assert len(texts) == 4 and all(torch.equal(t, detail[0][0]) for t in texts)
    assert any("the guider's own positive prompt on every pass" in n for n in result.report.notes)
    assert result.report.prompts is None and all(s.prompt is None for s in result.report.segments)


@pytest.mark.parametrize("family", ["fl2va", "ref2va"])
def test_segment_prompts_see_the_frames_or_references_as_the_stock_node_shows_them(env, family):
    """fl2va and ref2va: every segment prompt is encoded with the frames / references presented to Qwen exactly as
    the stock node presents them for one prompt (its conditioning's text equals the stock node's for that prompt)."""
    import comfy_extras.nodes_minimax_h3 as h3n
    from test_stage_nodes import TinyAudioVAE, TinyVideoVAE

    g = torch.Generator().manual_seed(8)
    picture = torch.rand(1, 64, 64, 3, generator=g)
    vae = TinyVideoVAE()
    prompts = ("<Picture 1> walks in snow", "<Picture 1> reaches the river") if family == "ref2va" else PROMPTS[:2]
    kw = ({"references": {"ref_image_1": picture}, "audio_vae": TinyAudioVAE()} if family == "ref2va"
          else {"first_frame": picture})
    made = setup(env, prompts=prompts, family=family, vae=vae, **kw)
    assert made.job.prompts.texts[:2] == prompts and made.job.prompts.conditioning[0] is made.positive
    for text, cond in zip(prompts, made.job.prompts.conditioning[:2]):
        if family == "ref2va":
            stock = h3n.MiniMaxH3ReferenceToVideo.execute(clip=env["clip"], vae=vae, audio_vae=None, prompt=text,
                                                          width=W, height=H, length=made.plan.pass_frames,
                                                          ref_images={"ref_image_1": picture}).result[0]
        else:
            stock = h3n.MiniMaxH3ImageToVideo.execute(env["clip"], vae, text, W, H, made.plan.total_frames,
                                                      first_frame=picture).result[0]
        assert torch.equal(cond[0][0], stock[0][0])
    plain = tc.encode_prompt(env["clip"], prompts[1])[0][0]       # the text alone, nothing presented
    assert plain.shape[1] < made.job.prompts.conditioning[1][0][0].shape[1]


def test_a_retake_of_segment_2_samples_it_and_the_next_only(env, story, monkeypatch, tmp_path):
    cache = RetakeCache(64 * MIB, 64 * MIB, tmp_path)
    first = run(env, story, cache)
    assert [s.source for s in first.report.segments] == ["sampled"] * 4
    passes = Passes(monkeypatch)
    retake = run(env, story, cache, seeds=(None, None, 777))
    assert len(passes.texts) == 2                                     # only segments 2 and 3 were sampled
    segs = retake.report.segments
    assert [s.source for s in segs] == ["reused", "reused", "sampled", "sampled"]
    assert [s.seed for s in segs] == [SEED, SEED + 1, 777, SEED + 3]
    assert [s.sample_seconds == 0.0 for s in segs] == [True, True, False, False]   # the time shows it
    assert retake.report.retakes.reused == (0, 1) and retake.report.retakes.sampled == (2, 3)
    assert any(line.startswith("retakes: reused segments 0, 1; sampled 2, 3") for line in retake.report.summary_lines())
    assert retake.report.to_dict()["retakes"]["entries"] == 6
    assert retake.report.retakes.ram_bytes > 0 and retake.report.retakes.ram_bound_bytes == 64 * MIB
    fresh = run(env, story, seeds=(None, None, 777))                  # no cache: every segment sampled
    assert identical(retake, fresh)
    a, b = first.output["samples"].unbind()[0], retake.output["samples"].unbind()[0]
    cut = story.job.segments.segments[2].video_latent_range[0]
    assert torch.equal(a[:, :, :cut], b[:, :, :cut]) and not torch.equal(a[:, :, cut:], b[:, :, cut:])
    again = run(env, story, cache, seeds=(None, None, 777))          # nothing changed: everything reused
    assert [s.source for s in again.report.segments] == ["reused"] * 4 and identical(again, fresh)


def test_spill_files_deleted_or_damaged_are_sampled_again_and_a_full_temp_folder_is_survived(env, story, tmp_path,
                                                                                              monkeypatch):
    """Issue 49, in real ComfyUI: with every segment spilled to the temp folder (RAM bound 0), deleting one spill
    file and cutting another short made every later retake fail; now those segments are sampled again and the
    output equals a run without the cache. A temp folder that cannot be written no longer fails the prompt after
    sampling: the run finishes, nothing partial stays, and the report says the segments were not cached."""
    import pathlib

    import longmedia.segments.retakes as retakes

    cache = RetakeCache(0, 64 * MIB, tmp_path)
    first = run(env, story, cache)
    files = sorted(cache.spill_dir.glob("*.pt"))
    assert len(files) == 4
    files[0].unlink()
    files[1].write_bytes(files[1].read_bytes()[:64])
    again = run(env, story, cache)
    assert identical(again, first) and again.report.retakes.unreadable == 2
    assert any("missing or damaged" in line for line in again.report.summary_lines())

    def full(obj, path):
        pathlib.Path(path).write_bytes(b"PK")
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    monkeypatch.setattr(retakes.torch, "save", full)
    other = RetakeCache(0, 64 * MIB, tmp_path / "full")
    done = run(env, story, other)
    assert identical(done, first) and len(other) == 0 and list((tmp_path / "full").rglob("*.pt")) == []
    assert any("could not spill" in line for line in done.report.summary_lines())


def test_each_retake_resamples_from_the_first_segment_no_earlier_run_shares(env, story, tmp_path):
    """The retake rule on the product's own loop (`run_segmented`) over a history of edits: a run reuses the
    longest prefix of segments that any earlier run shared (not only the last run), and samples every segment
    after it; the last run equals a fresh one bit for bit."""
    cache = RetakeCache(64 * MIB, 0, tmp_path)
    history, last = [], None
    for pins in [(None,) * 4, (None, 11), (None, None, 12), (None,) * 4, (None, 11, 12)]:
        seeds = tuple(pins) + (None,) * (4 - len(pins))
        shared = max((next((i for i in range(4) if old[i] != seeds[i]), 4) for old in history), default=0)
        last = run(env, story, cache, seeds=seeds)
        got = [s.source for s in last.report.segments]
        assert got == ["reused"] * shared + ["sampled"] * (4 - shared), (history, seeds, got)
        history.append(seeds)
    assert identical(last, run(env, story, seeds=history[-1]))


def test_retakes_on_a_one_pass_job_are_said_to_be_unused(env, tmp_path):
    """Issue 49: a Retakes node connected to a one-pass job was silently unused; the report now says so."""
    made = env["setup"].run_setup(None, env["neg"], width=W, height=H, seconds=1.0, segment_seconds=0.0,
                                  context_frames=CONTEXT, clip=env["clip"], prompt="a river")
    assert not made.job.segmented
    samplers = env["samplers"]
    guider = samplers.CFGGuider(env["model"])
    guider.set_conds(made.positive, made.negative)
    sigmas = samplers.calculate_sigmas(env["model"].get_model_object("model_sampling"), "simple", STEPS).cpu()
    result = segmented.run_job(env["ncs"].Noise_RandomNoise(SEED), guider, samplers.sampler_object("euler"), sigmas,
                               made.latent, NORMAL, made.job, retakes=RetakeCache(64 * MIB, 0, tmp_path))
    assert any(n.startswith("retakes: not used: this job is one pass") for n in result.report.notes)


def test_the_job_key_changes_with_the_device_list(env, story):
    """Issue 49: a retake after changing `devices` reused the single-device segments, which differ from two ranks'
    within float tolerance (2.1e-6), not bit for bit as the Retakes node promises: the device list is in the key."""
    from longmedia.comfy.retakes import keys

    samplers = env["samplers"]
    guider = samplers.CFGGuider(env["model"])
    guider.set_conds(story.positive, story.negative)
    sigmas = samplers.calculate_sigmas(env["model"].get_model_object("model_sampling"), "simple", STEPS).cpu()
    args = (guider, samplers.sampler_object("euler"), sigmas, NORMAL, story.latent, env["ncs"].Noise_RandomNoise(SEED),
            story.job.segments, ("positive", "negative"))
    one, two, spaced = (keys.job_digest(*args, devices=d)[0] for d in ("", "cpu,cpu", " cpu , cpu "))
    assert one == keys.job_digest(*args)[0] and one != two and two == spaced


@pytest.mark.parametrize("steps", [4, 8])
def test_a_turbo_schedule_retake_reuses_the_segments_before_it(env, story, tmp_path, steps):
    """A turbo LoRA's schedule (4 or 8 steps at cfg 1; the LoRA itself: test_lora_paths): a retake of segment 2
    reuses segments 0 and 1, samples 2 and 3, and equals a run without the cache bit for bit."""
    cache = RetakeCache(64 * MIB, 0, tmp_path)
    first = run(env, story, cache, steps=steps, cfg=1.0)
    assert [s.source for s in first.report.segments] == ["sampled"] * 4
    retake = run(env, story, cache, seeds=(None, None, 777), steps=steps, cfg=1.0)
    assert [s.source for s in retake.report.segments] == ["reused", "reused", "sampled", "sampled"]
    assert identical(retake, run(env, story, seeds=(None, None, 777), steps=steps, cfg=1.0))


def test_a_changed_prompt_resamples_from_its_segment(env, story, tmp_path):
    cache = RetakeCache(64 * MIB, 0, tmp_path)
    run(env, story, cache)
    edited = setup(env, prompts=PROMPTS[:3] + ("the fox curls up to sleep",))   # Setup runs again
    result = run(env, edited, cache)
    assert [s.source for s in result.report.segments] == ["reused", "reused", "reused", "sampled"]
    assert identical(result, run(env, edited))


@pytest.mark.parametrize("change", ["model", "lora", "sampler", "sigmas"])
def test_model_patches_sampler_and_sigmas_invalidate_every_segment(env, story, tmp_path, change):
    cache = RetakeCache(64 * MIB, 0, tmp_path)
    run(env, story, cache)
    same = run(env, story, cache, model=env["model"].clone())        # a clone of the same weights is the same model
    assert [s.source for s in same.report.segments] == ["reused"] * 4
    kw = {}
    if change == "model":
        kw["model"] = env["sd"].load_diffusion_model(env["other_path"])   # another checkpoint file
    elif change == "lora":
        patched = env["model"].clone()
        key = next(k for k in patched.model.state_dict() if k.endswith("blocks.0.attn.to_q.weight")
                   or k.endswith(".weight") and "blocks.0" in k)
        weight = patched.model.state_dict()[key]
        diff = torch.randn(weight.shape, generator=torch.Generator().manual_seed(11)) * 0.01
        assert patched.add_patches({key: (diff,)}, 1.0) == [key]
        kw["model"] = patched
    elif change == "sampler":
        kw["sampler"] = "dpmpp_2m"
    else:
        kw["scheduler"] = "beta"
    result = run(env, story, cache, **kw)
    assert [s.source for s in result.report.segments] == ["sampled"] * 4, change


def test_the_same_checkpoint_loaded_again_is_the_same_model_and_a_rewritten_one_is_not(env, story, tmp_path):
    """Issue 49: the model was known by identity, so a retake after ComfyUI dropped and reloaded it (any other
    prompt does) sampled every segment again. Core loaders record the file on the patcher (`cached_patcher_init`):
    the same file loaded again is the same model, a file rewritten since (size or modification time) is not, and
    a model with no such record (a custom loader) is known by identity and the report says so."""
    import os
    import shutil

    path = tmp_path / "unet.safetensors"
    shutil.copyfile(env["path"], path)
    cache = RetakeCache(64 * MIB, 64 * MIB, tmp_path / "temp")
    first = run(env, story, cache, model=env["sd"].load_diffusion_model(str(path)))
    assert first.report.retakes.in_memory_only is None and not first.report.retakes.notes()
    again = run(env, story, cache, model=env["sd"].load_diffusion_model(str(path)))     # dropped and reloaded
    assert [s.source for s in again.report.segments] == ["reused"] * 4 and identical(again, first)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))            # the file rewritten
    rewritten = run(env, story, cache, model=env["sd"].load_diffusion_model(str(path)))
    assert [s.source for s in rewritten.report.segments] == ["sampled"] * 4
    custom = env["sd"].load_diffusion_model(str(path))
    custom.cached_patcher_init = None                                                    # a custom loader
    unknown = run(env, story, cache, model=custom)
    assert [s.source for s in unknown.report.segments] == ["sampled"] * 4
    assert any("by identity, not by content" in n for n in unknown.report.retakes.notes())


def test_a_sigma_shifted_model_reloaded_keys_the_same_without_pins(env, story):
    """The stock MiniMaxH3SigmaShift patches a new model_sampling module onto a clone: a small module, known by its
    class and values (no pin), so the job's key of a model loaded again and shifted again is the same, and another
    shift is another key."""
    import comfy_extras.nodes_minimax_h3 as h3n

    from longmedia.comfy.retakes import keys

    samplers = env["samplers"]

    def digest(shift_video):
        model = env["sd"].load_diffusion_model(env["path"])
        shifted = h3n.MiniMaxH3SigmaShift.execute(model, shift_video, 3.0).result[0]
        guider = samplers.CFGGuider(shifted)
        guider.set_conds(story.positive, story.negative)
        sigmas = samplers.calculate_sigmas(shifted.get_model_object("model_sampling"), "simple", STEPS).cpu()
        return keys.job_digest(guider, samplers.sampler_object("euler"), sigmas, NORMAL, story.latent,
                               env["ncs"].Noise_RandomNoise(SEED), story.job.segments, ("positive", "negative"))

    (a, pins_a), (b, pins_b), (c, _) = digest(12.0), digest(12.0), digest(8.0)
    assert pins_a == pins_b == () and a == b != c


def test_bad_direction_is_refused_before_any_sampling(env, story, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("sampling started")

    monkeypatch.setattr(segmented.comfy_sampler, "run_sampler", never)
    with pytest.raises(LongMediaInputError, match="at most 4") as info:
        setup(env, prompts=PROMPTS + ("one too many",))
    assert info.value.input_name == "segment_prompts"
    with pytest.raises(LongMediaInputError) as info:
        setup(env, prompts=("0s: snow", "2 sec: river"))
    assert info.value.input_name == "segment_prompts line 2"
    # issue 49: a line past the text encoder's 32,768 tokens is named, and so is the line, in a short message
    with pytest.raises(LongMediaInputError, match="tokens") as info:
        setup(env, prompts=("snow", "river " * 40_000))
    assert info.value.input_name == "segment_prompts line 2" and len(str(info.value)) < 400
    made = story
    samplers = env["samplers"]
    guider = samplers.CFGGuider(env["model"])
    guider.set_conds(made.positive, made.negative)
    sigmas = samplers.calculate_sigmas(env["model"].get_model_object("model_sampling"), "simple", STEPS).cpu()
    args = (env["ncs"].Noise_RandomNoise(SEED), guider, samplers.sampler_object("euler"), sigmas, made.latent, NORMAL)
    with pytest.raises(LongMediaInputError) as info:
        segmented.run_job(*args, made.job, segment_seeds=f"auto auto {2 ** 64}")
    assert info.value.input_name == "segment_seeds[2]"
    with pytest.raises(LongMediaInputError) as info:
        segmented.run_job(*args, made.job, segment_seeds="1 2 3 4 5")
    assert info.value.input_name == "segment_seeds"
    # issue 49: a superscript digit, the top ComfyUI seed pinned on segment 0 (ComfyUI overflowed on it), a megabyte
    for seeds, name in (("²", "segment_seeds[0]"), (f"{2 ** 64 - 1}", "segment_seeds[0]"),
                        ("1" * 1_000_000, "segment_seeds[0]")):
        with pytest.raises(LongMediaInputError) as info:
            segmented.run_job(*args, made.job, segment_seeds=seeds)
        assert info.value.input_name == name and len(str(info.value)) < 400
    for wrong in ("x", 5):   # an API prompt's literal where the Retakes node's output belongs
        with pytest.raises(LongMediaInputError, match="LongMedia Retakes") as info:
            segmented.run_job(*args, made.job, retakes=wrong)
        assert info.value.input_name == "retakes"
    other = samplers.CFGGuider(env["model"])
    other.set_conds(tc.encode_prompt(env["clip"], "something else"), made.negative)
    with pytest.raises(LongMediaInputError) as info:
        segmented.run_job(args[0], other, *args[2:], made.job)
    assert info.value.input_name == "guider"
