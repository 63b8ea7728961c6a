"""Hi-Res and Refiner over a segmented job (issue 28), in-process on the tiny checkpoints.

Setup makes a 3-segment job (107 frames: a 39-frame pass, then two 56-frame passes behind 22 context frames), the
segmented Sampler runs it, then Hi-Res and Refiner take the job and run one planned pass per segment. A wrapped
`run_sampler` records every stage pass (its latent, guides and output), so each pass's rows, starting latent and
context guide are checked against the plan and against its neighbour.

Seams are measured as the Sampler's segmentation is: the context a later pass is given must be its neighbour's final
latents of those frames (here: of this stage, at the new size) bit for bit. The join figure (`seam_steps`: the
latent step across each join over the median step inside) is printed beside the Sampler's own.
"""

from __future__ import annotations

import pytest
import torch
from testnodes import tiny_text_encoder as tc

from longmedia.comfy.passes import stages as comfy_stages
from longmedia.comfy.passes.segmented import run_segmented
from longmedia.h3 import lattice as L
from longmedia.h3.latent_resample import resample_video
from longmedia.planning.types import PlanRequest
from longmedia.report.segmented import SegmentedReport
from longmedia.segments import seams
from longmedia.segments.seam_steps import seam_steps
from longmedia.testing.tiny_h3 import TINY_DIMS

W = H = 64                                   # 4x4 latent cells: 2x2 patches = 4 packed rows per latent frame
FRAMES, SEGMENT, CONTEXT = 107, 39 / 24, 22
NORMAL = PlanRequest(memory_mode="normal", attention_mode="existing")


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs

    from longmedia.comfy.setup import run_setup

    clip = tc.tiny_text_encoder(TINY_DIMS, seed=0)
    pos, neg = tc.encode_prompt(clip, "a heron lands on a frozen pond at dawn"), tc.encode_prompt(clip, "")
    model = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    setup = run_setup(pos, neg, width=W, height=H, seconds=FRAMES / 24, segment_seconds=SEGMENT,
                      context_frames=CONTEXT)
    guider = comfy.samplers.CFGGuider(model)
    guider.set_conds(setup.positive, setup.negative)
    guider.set_cfg(3.0)
    return {"samplers": comfy.samplers, "ncs": ncs, "model": model, "setup": setup, "guider": guider,
            "job": setup.job}


def sigmas(env, steps):
    return env["samplers"].calculate_sigmas(env["model"].get_model_object("model_sampling"), "simple", steps).cpu()


def euler(env):
    return env["samplers"].sampler_object("euler")


@pytest.fixture(scope="module")
def sampled(env):
    job = env["job"]
    assert job.segmented and job.segments.count == 3
    out = run_segmented(env["ncs"].Noise_RandomNoise(3), env["guider"], euler(env), sigmas(env, 2),
                        env["setup"].latent, NORMAL, job.segments)
    return out


class Passes:
    """Every stage pass through stages.run_sampler: its latent (video, audio), its context guide, its output."""

    def __init__(self, monkeypatch):
        self.passes = []
        real = comfy_stages.run_sampler

        def run_sampler(noise, guider, sampler, sigmas, latent, request, *args, **kwargs):
            frames = guider.original_conds["positive"][0].get("minimax_keyframes") or []
            neg = guider.original_conds["negative"][0].get("minimax_keyframes") or []
            self.passes.append({"seed": noise.seed, "latent": [t.clone() for t in latent["samples"].unbind()],
                                "guides": [dict(k) for k in frames], "negative_guides": len(neg),
                                "stage": kwargs.get("stage")})
            result = real(noise, guider, sampler, sigmas, latent, request, *args, **kwargs)
            self.passes[-1]["output"] = [t.clone() for t in result.output["samples"].unbind()]
            return result

        monkeypatch.setattr(comfy_stages, "run_sampler", run_sampler)


def hires(env, latent, monkeypatch, scale, seed=12, **kw):
    cap = Passes(monkeypatch)
    result = comfy_stages.run_hires(env["ncs"].Noise_RandomNoise(seed), env["guider"], euler(env), sigmas(env, 4),
                                    latent, NORMAL, scale=scale, denoise=0.5, job=env["job"], **kw)
    return result, cap


def video_rows(run_report):
    return run_report.plan.geometry.video_rows


@pytest.mark.parametrize("scale,cells", [(2.0, 8), (1.5, 6)])
def test_hires_runs_one_planned_pass_per_segment_with_rows_times_the_scale(env, sampled, monkeypatch, scale, cells):
    plan = env["job"].segments
    result, cap = hires(env, sampled.output, monkeypatch, scale)
    report = result.report
    assert isinstance(report, SegmentedReport) and len(report.segments) == len(cap.passes) == plan.count
    assert len(report.forecast) == plan.count
    low = sampled.report.segments
    for seg, ours, first in zip(plan.segments, report.segments, low):
        g, g0 = ours.run.plan.geometry, first.run.plan.geometry
        # rows scale with the area in 2x2 patches: (8/4)^2 = 4 at scale 2, (6/4)^2 = 2.25 at scale 1.5
        assert g.video_rows == g0.video_rows * scale ** 2 == seg.latent_frames * (cells // 2) ** 2
        # the context guide's video rows scale the same way; audio, its guide's audio and the text do not
        assert g.rows_of("cond") == g0.rows_of("cond") * scale ** 2 == seg.context_latent_frames * (cells // 2) ** 2
        assert g.rows_of("cond_audio") == g0.rows_of("cond_audio") == 2 * seg.context_audio_frames
        assert g.audio_rows == g0.audio_rows and g.text_rows == g0.text_rows
        assert len(ours.run.boundaries) == 1                        # each pass planned after its own boundary
        assert ours.run.plan.memory_mode == "normal"
    assert [f.seq_len for f in report.forecast] == [s.run.plan.geometry.seq_len for s in report.segments]
    video, audio = result.output["samples"].unbind()
    in_v, in_a = sampled.output["samples"].unbind()
    assert video.shape == (1, 24, plan.video_latent_frames, cells, cells) and torch.isfinite(video).all()
    assert torch.equal(audio, in_a)                                  # audio kept bit for bit, pass by pass
    assert [p["seed"] for p in cap.passes] == [12, 13, 14]
    assert any("per segment" in n for n in report.notes) and any(n.startswith("seams") for n in report.notes)


def test_hires_context_is_the_neighbour_s_hires_latents(env, sampled, monkeypatch):
    """The seam check: pass i starts from, and is guided by, pass i-1's final Hi-Res latents of its context frames
    (bit for bit); its other frames are its own slice of the low-resolution job latent, upscaled."""
    plan = env["job"].segments
    result, cap = hires(env, sampled.output, monkeypatch, 2.0)
    in_v, in_a = sampled.output["samples"].unbind()
    for seg, p in zip(plan.segments, cap.passes):
        start_v, start_a = p["latent"]
        low_v, low_a = seams.pass_latents(seg, in_v, in_a)
        n = seg.context_latent_frames
        assert torch.equal(start_v[:, :, n:], resample_video(low_v, (8, 8), "bicubic")[:, :, n:])
        assert torch.equal(start_a, low_a)
        if not seg.index:
            assert p["guides"] == []
            continue
        prev_v = cap.passes[seg.index - 1]["output"][0]     # (the recorded audio is before the stage restores it)
        want_v, want_a = prev_v[:, :, -n:], in_a[..., seg.audio_start:seg.audio_new_start]   # audio kept: the input's
        assert torch.equal(start_v[:, :, :n], want_v)
        (guide,) = p["guides"]
        assert guide["resolved_frame_index"] == 0 and torch.equal(guide["latent"], want_v)
        assert torch.equal(guide["audio_latent"], want_a) and p["negative_guides"] == 1
    out_v, _ = result.output["samples"].unbind()
    ours, theirs = seam_steps(plan, *result.output["samples"].unbind()), seam_steps(plan, *sampled.output["samples"].unbind())
    print(f"Hi-Res x2 {ours.line()}\nSampler {theirs.line()}")
    # the joins are no rougher than the content itself (the Sampler's first pass sets the content's own spread)
    assert max(ours.video) <= max(ours.inside_video_max, max(theirs.video), theirs.inside_video_max)


def test_hires_first_pass_equals_a_plain_hires_of_its_slice(env, sampled, monkeypatch):
    plan = env["job"].segments
    seg = plan.segments[0]
    result, cap = hires(env, sampled.output, monkeypatch, 1.5, seed=21)
    in_v, in_a = sampled.output["samples"].unbind()
    import comfy.nested_tensor

    first = {"samples": comfy.nested_tensor.NestedTensor(seams.pass_latents(seg, in_v, in_a))}
    plain = comfy_stages.run_hires(env["ncs"].Noise_RandomNoise(21), env["guider"], euler(env), sigmas(env, 4),
                                   first, NORMAL, scale=1.5, denoise=0.5)
    ov = cap.passes[0]["output"][0]
    pv, pa = plain.output["samples"].unbind()
    assert torch.equal(ov, pv) and torch.equal(pa, first["samples"].unbind()[1])
    a, b = seg.video_latent_range
    assert torch.equal(result.output["samples"].unbind()[0][:, :, a:b], pv)


def test_hires_without_keep_audio_continues_the_neighbour_s_audio(env, sampled, monkeypatch):
    plan = env["job"].segments
    result, cap = hires(env, sampled.output, monkeypatch, 1.5, keep_audio=False)
    _, in_a = sampled.output["samples"].unbind()
    _, audio = result.output["samples"].unbind()
    assert not torch.equal(audio, in_a) and torch.isfinite(audio).all()
    for seg in plan.segments[1:]:
        prev_a = cap.passes[seg.index - 1]["output"][1]
        want = prev_a[..., -seg.context_audio_frames:]
        assert torch.equal(cap.passes[seg.index]["latent"][1][..., :seg.context_audio_frames], want)
        assert torch.equal(cap.passes[seg.index]["guides"][0]["audio_latent"], want)


def test_refiner_runs_per_segment_and_keeps_each_segment_s_audio(env, sampled, monkeypatch):
    plan = env["job"].segments
    cap = Passes(monkeypatch)
    result = comfy_stages.run_refiner(env["ncs"].Noise_RandomNoise(31), env["guider"], euler(env), sampled.output,
                                      NORMAL, steps=2, denoise=0.3, job=env["job"])
    in_v, in_a = sampled.output["samples"].unbind()
    video, audio = result.output["samples"].unbind()
    assert torch.equal(audio, in_a) and video.shape == in_v.shape and not torch.equal(video, in_v)
    assert len(cap.passes) == plan.count and all(p["stage"].stage == "refiner" for p in cap.passes)
    for seg, ours, first in zip(plan.segments, result.report.segments, sampled.report.segments):
        assert ours.run.plan.geometry.seq_len == first.run.plan.geometry.seq_len   # same rows as the Sampler's pass
        assert torch.equal(cap.passes[seg.index]["latent"][1], seams.pass_latents(seg, in_v, in_a)[1])
        if seg.index:
            n = seg.context_latent_frames
            assert torch.equal(cap.passes[seg.index]["guides"][0]["latent"],
                               cap.passes[seg.index - 1]["output"][0][:, :, -n:])
    assert result.sigmas.numel() == 3 and any("audio kept bit for bit" in n for n in result.report.notes)


def test_a_stage_job_of_another_length_is_refused_before_sampling(env, sampled, monkeypatch):
    from longmedia.errors import LongMediaInputError

    def never(*args, **kwargs):
        raise AssertionError("sampling started")

    monkeypatch.setattr(comfy_stages, "run_sampler", never)
    import comfy.nested_tensor

    in_v, in_a = sampled.output["samples"].unbind()
    short = {"samples": comfy.nested_tensor.NestedTensor((in_v[:, :, :22], in_a[..., :L.target_audio_frames(73)]))}
    with pytest.raises(LongMediaInputError, match="^latent="):
        comfy_stages.run_hires(env["ncs"].Noise_RandomNoise(1), env["guider"], euler(env), sigmas(env, 4), short,
                               NORMAL, job=env["job"])
    with pytest.raises(LongMediaInputError, match="^job="):
        comfy_stages.run_refiner(env["ncs"].Noise_RandomNoise(1), env["guider"], euler(env), sampled.output, NORMAL,
                                 job="not a job")
    with pytest.raises(LongMediaInputError, match="^upscaler="):
        comfy_stages.run_hires(env["ncs"].Noise_RandomNoise(1), env["guider"], euler(env), sigmas(env, 4),
                               sampled.output, NORMAL, job=env["job"], upscaler=object())


def test_another_setups_job_of_the_same_length_is_refused_by_name(env, sampled, monkeypatch):
    """Issue 49: Hi-Res or the Refiner given another Setup's job of the same length but other segments ran per that
    job without a word. Setup's latent carries its plan's signature, the Sampler's output keeps it, and the stages
    refuse the other job by name before sampling; the right job still runs."""
    from longmedia.comfy.setup import run_setup
    from longmedia.errors import LongMediaInputError
    from longmedia.job.preflight import LATENT_SEGMENTS_KEY

    job = env["job"]
    assert env["setup"].latent[LATENT_SEGMENTS_KEY] == job.segments.signature()
    assert sampled.output[LATENT_SEGMENTS_KEY] == job.segments.signature()
    other = run_setup(env["setup"].positive, env["setup"].negative, width=W, height=H, seconds=FRAMES / 24,
                      segment_seconds=56 / 24, context_frames=CONTEXT).job
    assert other.segmented and other.segments.pixel_frames == job.segments.pixel_frames
    assert other.segments.signature() != job.segments.signature()

    def never(*args, **kwargs):
        raise AssertionError("sampling started")

    monkeypatch.setattr(comfy_stages, "run_sampler", never)
    with pytest.raises(LongMediaInputError, match="^job=") as info:
        comfy_stages.run_hires(env["ncs"].Noise_RandomNoise(1), env["guider"], euler(env), sigmas(env, 4),
                               sampled.output, NORMAL, job=other)
    assert "segments differ" in str(info.value)
    with pytest.raises(LongMediaInputError, match="^job="):
        comfy_stages.run_refiner(env["ncs"].Noise_RandomNoise(1), env["guider"], euler(env), sampled.output, NORMAL,
                                 job=other)
    from longmedia.comfy.passes import segmented

    monkeypatch.setattr(segmented, "run_segmented", never)
    with pytest.raises(LongMediaInputError, match="^job="):   # the Sampler: Setup's latent, another Setup's job
        segmented.run_job(env["ncs"].Noise_RandomNoise(1), env["guider"], euler(env), sigmas(env, 2),
                          env["setup"].latent, NORMAL, other)


class _OOMUpscaler:
    """A loaded latent upscaler (HunyuanVideo 1.5 SR's kind) whose every call runs out of memory."""

    def __init__(self):
        self.model = torch.nn.Conv3d(24, 24, 1)
        self.calls = 0

    def resample_latent(self, x):
        self.calls += 1
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB (GPU 0; 15.99 GiB total)")


def test_an_upscaler_oom_in_a_segmented_hires_advises_a_shorter_segment(env, sampled, monkeypatch):
    """The job input is connected, so 'connect the job' would be wrong advice: the report names segment_seconds."""
    from longmedia.report.oom import LongMediaOOM

    up = _OOMUpscaler()
    with pytest.raises(LongMediaOOM) as info:
        hires(env, sampled.output, monkeypatch, 1.5, upscaler=up)
    report = info.value.report
    assert up.calls == 1 and report.phase == "latent_upscale" and "Tried to allocate 3.00 GiB" in report.error
    assert report.pressure_point.startswith("segment_seconds") and "job input" not in report.next_step


def test_a_stage_split_over_two_runs_equals_one_run(env, sampled, monkeypatch):
    """passes/done: Hi-Res run as passes 0..0 then 1..2 (continuing the first run's latents) equals one run, bit for
    bit; so does the Sampler. What a long job split over processes (bench.long_job --passes) relies on."""
    def streams(result):
        return [t.clone() for t in result.output["samples"].unbind()], \
            [t.clone() for t in result.denoised["samples"].unbind()]

    whole, _ = hires(env, sampled.output, monkeypatch, 1.5, seed=41)
    first, _ = hires(env, sampled.output, monkeypatch, 1.5, seed=41, passes=(0, 1))
    rest, _ = hires(env, sampled.output, monkeypatch, 1.5, seed=41, passes=(1, 3), done=streams(first))
    assert [s.index for s in first.report.segments] == [0] and [s.index for s in rest.report.segments] == [1, 2]
    for a, b in zip(whole.output["samples"].unbind(), rest.output["samples"].unbind()):
        assert torch.equal(a, b)
    for a, b in zip(whole.denoised["samples"].unbind(), rest.denoised["samples"].unbind()):
        assert torch.equal(a, b)
    job = env["job"]
    args = (env["guider"], euler(env), sigmas(env, 2), env["setup"].latent, NORMAL, job.segments)
    head = run_segmented(env["ncs"].Noise_RandomNoise(3), *args, passes=(0, 2))
    tail = run_segmented(env["ncs"].Noise_RandomNoise(3), *args, passes=(2, 3), done=streams(head))
    for a, b in zip(sampled.output["samples"].unbind(), tail.output["samples"].unbind()):
        assert torch.equal(a, b)
    from longmedia.errors import LongMediaInputError

    with pytest.raises(LongMediaInputError, match="^done="):
        run_segmented(env["ncs"].Noise_RandomNoise(3), *args, passes=(1, 3))
    with pytest.raises(LongMediaInputError, match="^passes="):
        run_segmented(env["ncs"].Noise_RandomNoise(3), *args, passes=(2, 5), done=streams(head))
    with pytest.raises(LongMediaInputError, match="^done.output="):
        hires(env, sampled.output, monkeypatch, 2.0, passes=(1, 3), done=streams(first))   # done at 6x6, not 8x8


class ReachedTheLoop(Exception):
    """Raised by the spy on the pass loop: the run got there, nothing needs to sample."""


def test_the_sampler_hi_res_and_the_refiner_reach_the_one_pass_loop(env, monkeypatch):
    """Issue 48: the Sampler's segmented run, Hi-Res and the Refiner run their passes through the one loop
    (`pass_loop.run_passes`), each with its own differences as parameters: the Sampler's without stage latents,
    Hi-Res's at the upscaled size, the Refiner's at the input's size with the audio kept."""
    from longmedia.comfy.passes import pass_loop, segmented

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs)
        raise ReachedTheLoop

    monkeypatch.setattr(pass_loop, "run_passes", spy)
    noise, latent, job = env["ncs"].Noise_RandomNoise(7), env["setup"].latent, env["job"]
    with pytest.raises(ReachedTheLoop):
        segmented.run_job(noise, env["guider"], euler(env), sigmas(env, 2), latent, NORMAL, job)
    with pytest.raises(ReachedTheLoop):
        comfy_stages.run_hires(noise, env["guider"], euler(env), sigmas(env, 4), latent, NORMAL, scale=1.5,
                               keep_audio=False, job=job)
    with pytest.raises(ReachedTheLoop):
        comfy_stages.run_refiner(noise, env["guider"], euler(env), latent, NORMAL, steps=2, job=job)
    sampler_run, hires_run, refiner_run = seen
    assert sampler_run.get("stage") is None and not sampler_run.get("keep_own_positive")
    assert (hires_run["stage"].size, hires_run["stage"].keep_audio) == ((6, 6), False)
    assert (refiner_run["stage"].size, refiner_run["stage"].keep_audio) == ((4, 4), True)
    assert hires_run["keep_own_positive"] and refiner_run["keep_own_positive"]


@pytest.mark.parametrize("node", ["sampler", "hires", "refiner"])
def test_cancel_after_a_pass_stops_the_run_before_the_next_pass(env, sampled, monkeypatch, node):
    """Cancel (ComfyUI's interrupt flag, as its Cancel button sets it) while pass 0 runs: the loop's check before
    pass 1 raises ComfyUI's interrupt, so no later pass starts, and the flag is consumed for the next prompt."""
    import comfy.model_management as mm

    from longmedia.comfy.passes import sampler as comfy_sampler
    from longmedia.comfy.passes import segmented

    module = comfy_sampler if node == "sampler" else comfy_stages
    real, ran = module.run_sampler, []

    def cancelled_during(*args, **kwargs):
        ran.append(len(ran))   # on entry: a pass that starts counts, even if ComfyUI's sampling then stops it
        result = real(*args, **kwargs)
        mm.interrupt_current_processing(True)
        return result

    monkeypatch.setattr(module, "run_sampler", cancelled_during)
    noise, job = env["ncs"].Noise_RandomNoise(9), env["job"]
    try:
        with pytest.raises(mm.InterruptProcessingException):
            if node == "sampler":
                segmented.run_job(noise, env["guider"], euler(env), sigmas(env, 2), env["setup"].latent, NORMAL, job)
            elif node == "hires":
                comfy_stages.run_hires(noise, env["guider"], euler(env), sigmas(env, 4), sampled.output, NORMAL,
                                       scale=1.5, job=job)
            else:
                comfy_stages.run_refiner(noise, env["guider"], euler(env), sampled.output, NORMAL, steps=2, job=job)
        assert ran == [0] and not mm.processing_interrupted()
    finally:
        mm.interrupt_current_processing(False)
