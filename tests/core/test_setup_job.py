"""Setup's ComfyUI-free logic: snapping, input checks, reference caps, segments, notes, the job value."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longmedia.errors import LongMediaInputError
from longmedia.h3 import lattice as L
from longmedia.job.geometry import build_geometry
from longmedia.job.preflight import MAX_PASS_ROWS
from longmedia.job.setup_plan import MediaInput, SetupRequest, check_soundtracks, plan_setup


def stock_frames(seconds):
    n = max(5, -int(-seconds * 24 // 1))
    while n % 17 != 5:
        n += 1
    return n


def ref2va(*refs, budget="low", **kw):
    return SetupRequest(1344, 768, kw.pop("seconds", 10.0), family="ref2va", conditioning="clip",
                        reference_budget=budget, have_vae=True, have_audio_vae=True, prompt_tokens=30,
                        references=tuple(refs), **kw)


def test_ten_seconds_snaps_to_243_frames_and_says_so():
    plan = plan_setup(SetupRequest(1344, 768, 10.0, prompt_tokens=40))
    assert plan.total_frames == plan.pass_frames == 243 and plan.snapped_seconds == pytest.approx(10.125)
    assert plan.notes[0].startswith("duration 10 s -> 243 frames = 10.125 s")
    summary = plan.summary_lines()
    assert "243 frames (10.125 s" in summary[0]
    g = plan.geometry
    assert g.video_rows == 72 * 42 * 24 and g.audio_rows == 405 * 2 and g.text_rows == 40
    job = plan.job()
    assert job.family == "t2va" and not job.segmented and job.segments is None and job.notes == plan.notes
    json.dumps(job.to_dict())


@given(seconds=st.floats(0.04, 150.0), w=st.integers(1, 64), h=st.integers(1, 64))
@settings(max_examples=60, deadline=None)
def test_one_pass_matches_stock_snapping_and_geometry(seconds, w, h):
    geometry = build_geometry(w * 32, h * 32, seconds=seconds, text_tokens=17)
    if geometry.seq_len > MAX_PASS_ROWS:   # over the hard cap: refused, naming the length input
        with pytest.raises(LongMediaInputError, match="seconds="):
            plan_setup(SetupRequest(w * 32, h * 32, seconds, prompt_tokens=17))
        return
    plan = plan_setup(SetupRequest(w * 32, h * 32, seconds, prompt_tokens=17))
    assert plan.total_frames == stock_frames(seconds) and L.is_lattice_frames(plan.total_frames)
    assert plan.geometry == geometry


@pytest.mark.parametrize("name,value,fix", [("width", 1000, "992 or 1024"), ("height", 770, "768 or 800"),
                                            ("width", 16, "from 32"), ("height", 20000, "to 16384")])
def test_size_errors_name_input_and_fix(name, value, fix):
    kwargs = {"width": 1344, "height": 768, name: value}
    with pytest.raises(LongMediaInputError, match=name) as info:
        plan_setup(SetupRequest(seconds=5.0, **kwargs))
    assert fix in str(info.value)


@pytest.mark.parametrize("seconds", [0.0, -1.0, 3601.0, float("inf")])
def test_duration_out_of_range(seconds):
    with pytest.raises(LongMediaInputError, match="seconds"):
        plan_setup(SetupRequest(1344, 768, seconds))


def test_one_pass_over_the_stock_maximum_asks_for_segments():
    with pytest.raises(LongMediaInputError, match="segment_seconds"):
        plan_setup(SetupRequest(1344, 768, 200.0))


def test_long_single_pass_gets_a_trained_range_note():
    plan = plan_setup(SetupRequest(640, 384, 30.0))
    assert any("trained" in n for n in plan.notes)
    assert not any("trained" in n for n in plan_setup(SetupRequest(640, 384, 10.0)).notes)


@pytest.mark.parametrize("request_kw,name", [
    (dict(family="t2va", first_frame=True, have_vae=True), "first_frame"),
    (dict(family="fl2va", have_vae=True), "first_frame"),
    (dict(family="fl2va", last_frame=True), "vae"),
    (dict(family="ref2va", conditioning="clip"), "ref_image_1"),
    (dict(family="t2va", references=(MediaInput("ref_image_1", "picture", 64, 64),)), "ref_image_1"),
    (dict(family="ref2va", have_vae=True, references=(MediaInput("ref_image_1", "picture", 64, 64),)), "positive"),
    (dict(family="ref2va", conditioning="clip", have_vae=True,
          references=(MediaInput("ref_audio_1", "audio", seconds=2.0),)), "audio_vae"),
    (dict(family="ref2va", conditioning="clip", references=(MediaInput("ref_image_1", "picture", 64, 64),)), "vae"),
    (dict(family="i2v"), "family"),
    (dict(reference_budget="huge"), "reference_budget"),
    (dict(context_frames=30), "context_frames"),
])
def test_family_and_input_errors(request_kw, name):
    kw = {"seconds": 5.0, **request_kw}
    with pytest.raises(LongMediaInputError, match=name) as info:
        plan_setup(SetupRequest(1344, 768, **kw))
    assert info.value.input_name.startswith(name) and info.value.fix


def test_continuation_error_suggests_lattice_values():
    with pytest.raises(LongMediaInputError) as info:
        plan_setup(SetupRequest(1344, 768, 30.0, segment_seconds=10.0, context_frames=30))
    assert "22 or 39" in str(info.value)


def test_orphan_soundtrack_is_named():
    check_soundtracks((1, 2), (1, 2))
    with pytest.raises(LongMediaInputError, match="ref_video_audio_3"):
        check_soundtracks((1,), (3,))


def test_reference_caps_resize_trim_and_note():
    refs = (MediaInput("ref_image_2", "picture", 4000, 3000, frames=3),
            MediaInput("ref_image_1", "picture", 256, 256),
            MediaInput("ref_video_1", "video", 1920, 1080, frames=300, soundtrack_seconds=12.0),
            MediaInput("ref_audio_1", "audio", seconds=9.0))
    plan = plan_setup(ref2va(*refs))
    by_name = {p.name: p for p in plan.preps}
    assert [p.name for p in plan.preps] == ["ref_image_1", "ref_image_2", "ref_video_1", "ref_audio_1"]
    assert by_name["ref_image_1"].resize_to is None                   # under the cap: stock sizing
    w, h = by_name["ref_image_2"].resize_to
    assert w * h <= 512 * 512 and w % 32 == 0 and h % 32 == 0 and abs(w / h - 4 / 3) < 0.1
    video = by_name["ref_video_1"]
    assert video.keep_frames == 22 and video.resize_to[0] * video.resize_to[1] <= 512 * 288
    assert video.soundtrack == "ref_video_audio_1" and video.keep_soundtrack_seconds == 5.0
    assert by_name["ref_audio_1"].keep_seconds == 5.0
    notes = "\n".join(plan.notes)
    for text in ("ref_image_2: Picture 2", "ref_video_1: Video 1: 243 -> 22 frames", "12 s -> 5 s", "9 s -> 5 s",
                 "ref_image_2: 3 images in the batch"):
        assert text in notes, text
    refs_rows = plan.geometry.reference_rows + plan.geometry.presentation_tokens
    assert refs_rows <= 4096


def test_max_budget_keeps_stock_sizes():
    refs = (MediaInput("ref_image_1", "picture", 4000, 3000), MediaInput("ref_video_1", "video", 1920, 1080, frames=100),
            MediaInput("ref_audio_1", "audio", seconds=9.0))
    plan = plan_setup(ref2va(*refs, budget="max"))
    assert all(p.resize_to is None and p.keep_seconds is None for p in plan.preps)
    assert plan.preps[1].keep_frames == 90                           # 100 frames snapped down to 17k+5
    assert not any("reference_budget" in n for n in plan.notes)


def test_budget_total_rows_error_names_references():
    refs = tuple(MediaInput(f"ref_image_{i}", "picture", 2048, 2048) for i in range(1, 10))
    with pytest.raises(LongMediaInputError, match="references"):
        plan_setup(ref2va(*refs, budget="low"))


def test_segmented_job_plans_every_pass_and_the_whole_latent():
    plan = plan_setup(SetupRequest(1344, 768, 30.0, segment_seconds=10.0, context_frames=22, prompt_tokens=40))
    segs = plan.segments
    assert plan.segmented and segs.count == 4 and segs.pixel_frames == plan.total_frames == stock_frames(30.0)
    assert plan.pass_frames == segs.max_pass_frames == 260 and plan.geometry.context_frames == 22
    assert plan.geometry.segment_count == 4
    job = plan.job()
    assert job.segmented and job.segments == segs
    summary = "\n".join(plan.summary_lines())
    assert "4 segments" in summary and "seg | pass frames" in summary and "segments: 4 passes" not in summary
    assert any(n.startswith("segments: 4 passes") and "noise seed + the pass index" in n for n in job.notes)
    json.dumps(job.to_dict())


def test_segment_longer_than_the_job_is_one_pass_with_a_note():
    plan = plan_setup(SetupRequest(1344, 768, 8.0, segment_seconds=10.0))
    assert not plan.segmented and plan.job().segments is None
    assert any("one pass" in n for n in plan.notes)
    quiet = plan_setup(SetupRequest(1344, 768, 8.0, context_frames=39, unused_prompt=True))
    assert any("context_frames 39 unused" in n for n in quiet.notes)
    assert any("prompt box is unused" in n for n in quiet.notes)


def test_fl2va_in_segments_says_where_the_guides_go():
    plan = plan_setup(SetupRequest(1344, 768, 20.0, family="fl2va", first_frame=True, last_frame=True, have_vae=True,
                                   segment_seconds=5.0))
    assert plan.segmented and any("last frame the final segment" in n for n in plan.notes)


def test_fl2va_guides_and_presentation():
    shown = plan_setup(SetupRequest(1344, 768, 5.0, family="fl2va", conditioning="clip", first_frame=True,
                                    last_frame=True, have_vae=True, prompt_tokens=20))
    hidden = plan_setup(SetupRequest(1344, 768, 5.0, family="fl2va", first_frame=True, last_frame=True,
                                     have_vae=True, prompt_tokens=20))
    per_frame = L.frame_rows(1344, 768)
    assert shown.geometry.cond_rows == hidden.geometry.cond_rows == 2 * per_frame
    assert hidden.geometry.text_rows == 20 < shown.geometry.text_rows
    assert any("AddGuide" in n for n in hidden.notes) and not any("AddGuide" in n for n in shown.notes)
