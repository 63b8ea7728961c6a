"""Seams of segmented jobs: pass slices, context guides, keyframe routing, assembly, seeds (random tensors)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from longmedia.errors import LongMediaInputError
from longmedia.h3 import lattice as L
from longmedia.limits import MAX_SEED
from longmedia.segments import seams
from longmedia.segments.timeline import plan_segments

H, W = 2, 3   # latent cells: the helpers only cut along time


def job_latents(plan, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(1, 24, plan.video_latent_frames, H, W, generator=g).to(dtype)
    a = torch.randn(1, 32, 2, plan.audio_latent_frames, generator=g).to(dtype)
    return v, a


def random_pass(seg, g):
    return (torch.randn(1, 24, seg.latent_frames, H, W, generator=g),
            torch.randn(1, 32, 2, seg.audio_frames, generator=g))


PLANS = [dict(total_frames=107, segment_seconds=39 / 24, context_frames=22),   # 3 equal later passes
         dict(total_seconds=30, segment_seconds=10, context_frames=22),        # trimmed last pass
         dict(total_frames=56, segment_seconds=22 / 24, context_frames=5),     # smallest passes
         dict(total_seconds=20, segment_seconds=6, context_frames=39)]


@pytest.mark.parametrize("kw", PLANS)
def test_assembling_the_passes_of_a_latent_gives_it_back(kw):
    plan = plan_segments(**kw)
    truth = job_latents(plan)
    g = torch.Generator().manual_seed(1)
    passes = []
    for seg in plan.segments:
        v, a = seams.pass_latents(seg, *truth)
        assert v.shape[2] == seg.latent_frames and a.shape[-1] == seg.audio_frames
        # a pass's context prefix is dropped: scribble over it
        cv, ca = seg.new_latent_slice[0], seg.new_audio_slice[0]
        v[:, :, :cv] = torch.randn(v[:, :, :cv].shape, generator=g)
        a[..., :ca] = torch.randn(a[..., :ca].shape, generator=g)
        passes.append((v, a))
    video, audio = seams.assemble(plan, passes)
    assert torch.equal(video, truth[0]) and torch.equal(audio, truth[1])


@pytest.mark.parametrize("kw", PLANS)
def test_assembled_length_is_the_stock_latent_of_the_job(kw):
    plan = plan_segments(**kw)
    g = torch.Generator().manual_seed(2)
    video, audio = seams.assemble(plan, [random_pass(s, g) for s in plan.segments])
    frames = plan.pixel_frames
    assert frames % 17 == 5 and frames >= plan.requested_frames
    assert video.shape == (1, 24, L.latent_frames(frames), H, W)
    assert audio.shape == (1, 32, 2, round(frames / 24 * 40))
    assert torch.isfinite(video).all() and video.std() > 0.5 and audio.std() > 0.5


@pytest.mark.parametrize("kw", PLANS)
def test_context_guide_is_the_previous_pass_tail(kw):
    plan = plan_segments(**kw)
    g = torch.Generator().manual_seed(3)
    outs = [random_pass(s, g) for s in plan.segments]
    result = seams.empty_result(plan, *outs[0])
    for seg, (v, a) in zip(plan.segments, outs):
        if seg.index:
            kf = seams.context_keyframe(seg, *result)
            prev_v, prev_a = outs[seg.index - 1]
            assert kf["resolved_frame_index"] == 0
            assert torch.equal(kf["latent"], prev_v[:, :, -seg.context_latent_frames:])
            assert torch.equal(kf["audio_latent"], prev_a[..., -seg.context_audio_frames:])
            assert kf["latent"].shape[2] == L.latent_frames(plan.context_frames)
            # the guide is a copy: later writes to the result do not reach it
            before, saved = kf["latent"].clone(), result[0].clone()
            result[0].add_(1.0)
            assert torch.equal(kf["latent"], before)
            result[0].copy_(saved)
        seams.place(seg, result, v, a)
    for seg, (v, a) in zip(plan.segments, outs):
        (va, vb), (aa, ab) = seg.video_latent_range, seg.audio_range
        nv, na = seams.new_content(seg, v, a)
        assert torch.equal(result[0][:, :, va:vb], nv) and torch.equal(result[1][..., aa:ab], na)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_passes_tile_any_plan(data):
    clips = data.draw(st.integers(1, 6), label="new clips per segment")
    context_clips = data.draw(st.integers(0, clips - 1), label="context clips")
    total_clips = data.draw(st.integers(clips, 30), label="job clips")
    plan = plan_segments(total_frames=17 * total_clips + 5, segment_seconds=(17 * clips + 5) / 24,
                         context_frames=17 * context_clips + 5)
    truth = job_latents(plan, seed=total_clips)
    passes = [seams.pass_latents(s, *truth) for s in plan.segments]
    video, audio = seams.assemble(plan, passes)
    assert torch.equal(video, truth[0]) and torch.equal(audio, truth[1])


def test_bf16_round_trip_is_exact():
    plan = plan_segments(**PLANS[0])
    truth = job_latents(plan, dtype=torch.bfloat16)
    video, audio = seams.assemble(plan, [seams.pass_latents(s, *truth) for s in plan.segments])
    assert video.dtype == torch.bfloat16 and torch.equal(video, truth[0]) and torch.equal(audio, truth[1])


def test_job_latent_of_another_length_is_refused_with_the_expected_length():
    from longmedia.job.preflight import check_latent_matches_job

    plan = plan_segments(**PLANS[0])
    v, a = job_latents(plan)
    check_latent_matches_job(plan.pixel_frames, tuple(v.shape), tuple(a.shape))
    with pytest.raises(LongMediaInputError) as info:
        check_latent_matches_job(plan.pixel_frames, tuple(v[:, :, :-5].shape), tuple(a.shape))
    msg = str(info.value)
    assert info.value.input_name == "latent" and "the job's 107 frames (32 video / 178 audio latent frames)" in msg
    with pytest.raises(LongMediaInputError, match="latent"):
        check_latent_matches_job(plan.pixel_frames, tuple(v.shape), tuple(a[..., :-1].shape))


def test_pass_output_of_the_wrong_length_is_a_seam_error():
    plan = plan_segments(**PLANS[0])
    seg = plan.segments[1]
    g = torch.Generator().manual_seed(4)
    v, a = random_pass(seg, g)
    result = seams.empty_result(plan, v, a)
    with pytest.raises(seams.SeamError, match="segment 1"):
        seams.place(seg, result, v[:, :, 1:], a)
    with pytest.raises(seams.SeamError, match="audio"):
        seams.place(seg, result, v, a[..., :-1])
    with pytest.raises(ValueError, match="first pass"):
        seams.context_latents(plan.segments[0], *result)


def _kf(frame, latent_t=None, audio_t=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    kf = {"resolved_frame_index": frame, "tag": seed}
    if latent_t:
        kf["latent"] = torch.randn(1, 24, latent_t, H, W, generator=g)
    if audio_t:
        kf["audio_latent"] = torch.randn(1, 32, 2, audio_t, generator=g)
    return kf


def test_user_keyframes_move_to_the_pass_that_holds_them():
    plan = plan_segments(**PLANS[0])     # passes [0,39) [17,73) [51,107); new frames from 0, 39, 73
    last = plan.pixel_frames - 1
    first, mid, end = _kf(0, 1, seed=1), _kf(40, 2, 30, seed=2), _kf(last, 1, seed=3)
    routed = seams.route_keyframes(plan, [first, mid, end])
    assert [len(r) for r in routed] == [1, 1, 1]
    assert routed[0][0]["resolved_frame_index"] == 0 and routed[0][0]["latent"] is first["latent"]
    seg1, seg2 = plan.segments[1], plan.segments[2]
    assert routed[1][0]["resolved_frame_index"] == 40 - seg1.pass_start and routed[1][0]["tag"] == 2
    assert torch.equal(routed[1][0]["audio_latent"], mid["audio_latent"])       # fits: kept whole
    assert routed[2][0]["resolved_frame_index"] == seg2.pass_frames - 1
    assert mid["resolved_frame_index"] == 40                                      # inputs untouched
    assert seams.route_keyframes(plan, None) == ((), (), ())


def test_keyframe_audio_is_cut_to_the_pass_track_and_clips_must_fit():
    plan = plan_segments(**PLANS[0])
    seg1 = plan.segments[1]
    frame = seg1.pass_end - 3
    routed = seams.route_keyframes(plan, [_kf(frame, audio_t=200, seed=5)])
    local = frame - seg1.pass_start
    cut = routed[1][0]["audio_latent"]
    assert cut.shape[-1] == int(seg1.audio_frames - 5 / 3 * local) < 200
    with pytest.raises(LongMediaInputError, match=r"minimax_keyframes\[0\].*segment 1"):
        seams.route_keyframes(plan, [_kf(seg1.pass_end - 10, latent_t=7)])   # a 22-frame clip over the seam
    with pytest.raises(LongMediaInputError, match="frame index"):
        seams.route_keyframes(plan, [_kf(plan.pixel_frames)])
    with pytest.raises(LongMediaInputError, match="resolved_frame_index"):
        seams.route_keyframes(plan, [{"resolved_frame_index": 1.5}])


def test_segment_seeds_derive_pin_and_wrap():
    assert seams.segment_seeds(3, 10) == (10, 11, 12)
    assert seams.segment_seeds(3, 10, (7,)) == (7, 11, 12)
    assert seams.segment_seeds(3, MAX_SEED) == (MAX_SEED, 1, 2)        # later passes wrap below MAX_SEED
    assert seams.segment_seeds(3, MAX_SEED - 1) == (MAX_SEED - 1, 0, 1)
    with pytest.raises(LongMediaInputError) as info:
        seams.segment_seeds(2, 0, (1, 2, 3))
    assert info.value.input_name == "seeds"
    with pytest.raises(LongMediaInputError) as info:
        seams.segment_seeds(2, 0, (1, 2 ** 64))
    assert info.value.input_name == "seeds[1]"
    assert len(set(seams.segment_seeds(5, 123))) == 5
    with pytest.raises(LongMediaInputError, match="seeds"):
        seams.segment_seeds(2, 0, (1, 2, 3))
    with pytest.raises(LongMediaInputError, match=r"seeds\[1\]"):
        seams.segment_seeds(3, 0, (1, -2))
