"""Geometry of the packed H3 sequence: lattice helpers, rows per segment, reference budgets, validation.

Expected numbers are worked out by hand from ComfyUI's H3 code (nodes_minimax_h3.py, PackedLayout);
tests/comfyui/test_geometry_vs_stock.py checks the same against the real code.
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longmedia.errors import LongMediaInputError
from longmedia.h3 import lattice as L
from longmedia.h3.geometry import Geometry
from longmedia.h3.references import REFERENCE_BUDGETS, KeyframeSpec, ReferenceSpec
from longmedia.job.geometry import build_geometry


def test_reference_job_rows():
    g = build_geometry(1344, 768, seconds=10)
    # 10 s -> 240 frames -> 243 = 17*14+5; latents (238 // 17) * 5 + 2 = 72; audio round(243/24*40) = 405
    assert (g.frames, g.latent_frames, g.audio_latent_frames) == (243, 72, 405)
    assert g.rows_per_latent_frame == (768 // 32) * (1344 // 32) == 1008
    assert [(s.kind, s.rows) for s in g.row_spans] == [("text", 256), ("audio", 810), ("video", 72 * 1008)]
    assert g.seq_len == 256 + 810 + 72576
    assert g.video_latent_shape == (1, 24, 72, 48, 84)
    assert g.audio_latent_shape == (1, 32, 2, 405)


@pytest.mark.parametrize("length, frames, latent, audio", [
    (1, 5, 2, 8), (5, 5, 2, 8), (6, 22, 7, 37), (124, 124, 37, 207), (125, 141, 42, 235), (3600, 3609, 1062, 6015)])
def test_temporal_shape_like_the_stock_node(length, frames, latent, audio):
    # EmptyMiniMaxH3LatentAV: align up to 17k+5 (at least 5), latent 2 for <= 5 frames else (f-5)//17*5+2
    assert L.snap_frames(length) == frames
    assert L.latent_frames(frames) == latent
    assert L.target_audio_frames(frames) == audio


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(min_value=-5, max_value=100_000))
def test_snap_frames_is_the_smallest_lattice_count_above(n):
    f = L.snap_frames(n)
    assert f % 17 == 5 and f >= max(5, n) and f - 17 < max(5, n)
    assert L.is_lattice_frames(f)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(min_value=5, max_value=100_000))
def test_snap_down_and_latent_round_trip(n):
    f = L.snap_frames_down(n)
    assert f % 17 == 5 and f <= n < f + 17
    assert L.pixel_frames(L.latent_frames(f)) == f
    assert L.latent_frames(f) % 5 == 2


def test_single_picture_is_one_latent_frame_and_bad_counts_raise():
    assert L.latent_frames(1) == 1 and L.pixel_frames(1) == 1
    with pytest.raises(ValueError):
        L.latent_frames(0)
    with pytest.raises(ValueError):
        L.snap_frames_down(4)


def test_audio_latent_frames_for_seconds_pads_to_800_samples():
    assert L.audio_latent_frames(1.0) == 40
    assert L.audio_latent_frames(1.01) == 41     # 32320 samples -> 40.4 -> 41 latent frames
    assert L.audio_latent_frames(0.025) == 1


@pytest.mark.parametrize("w, h, rows", [(1344, 768, 1008), (1280, 720, 40 * 23), (1920, 1080, 60 * 34),
                                        (1000, 1010, 31 * 32), (32, 32, 1), (48, 80, 2 * 3)])
def test_rows_per_frame_pad_the_latent_to_the_patch(w, h, rows):
    # latent = pixels // 16, padded up to even (pad_to_patch_size), one row per 2x2 latent cells
    assert L.frame_rows(w, h) == rows


def test_qwen_vision_tokens_one_per_32_pixels():
    assert L.qwen_vision_tokens(1344, 768) == 42 * 24
    assert L.qwen_vision_tokens(1000, 1000) == 31 * 31     # round(1000/32) = 31
    assert L.qwen_vision_tokens(16, 16) == 4               # min_pixels 3136 -> 64x64
    big = L.qwen_vision_tokens(8192, 8192)                 # capped at 12845056 pixels
    assert big * 32 * 32 <= L.QWEN_MAX_PIXELS


def test_picture_reference_rows_and_prompt_tokens():
    g = build_geometry(1344, 768, seconds=5, references=(ReferenceSpec("picture", 1344, 768),),
                       reference_budget="high")
    (ref,) = g.references
    assert (ref.width, ref.height) == (1344, 768) and ref.row_spans == (("ref_img", 1008),)
    # '<Picture 1>: ' (6 tokens) + vision start/end + 1008 vision tokens
    assert ref.prompt_tokens == 6 + 2 + 1008
    assert g.text_rows == 256 + ref.prompt_tokens


def test_low_budget_caps_a_picture_and_says_so():
    g = build_geometry(1344, 768, seconds=5, references=(ReferenceSpec("picture", 4000, 3000),))
    (ref,) = g.references
    assert ref.width * ref.height <= REFERENCE_BUDGETS["low"].picture_pixels
    assert ref.width % 32 == 0 and ref.height % 32 == 0
    assert ref.capped and "reference_budget 'low'" in ref.capped[0]
    assert abs(ref.width / ref.height - 4 / 3) < 0.15


def test_video_reference_with_soundtrack():
    spec = ReferenceSpec("video", 1280, 720, seconds=3.0, with_audio=True)
    g = build_geometry(1344, 768, seconds=10, references=(spec,), reference_budget="max")
    (ref,) = g.references
    # 72 frames -> 56 on the lattice; 1280x720 is smaller than the 768-short-edge canvas -> kept, rounded to
    # /32 with Python's round (720/32 = 22.5 -> 22, as the stock node does)
    assert ref.frames == 56 and (ref.width, ref.height) == (1280, 704)
    assert ref.row_spans == (("ref_audio", 2 * 120), ("ref_img", L.latent_frames(56) * 40 * 22))
    # '<Audio 1>: ' 5, '<Video 1>: ' 6, then ceil(ceil(56/12)/2) = 3 blocks of '<k.2 seconds>' 6 + 2 + vision
    assert ref.prompt_tokens == 5 + 6 + 3 * (6 + 2 + 40 * 22)


def test_reference_video_is_cropped_to_the_target_and_the_budget():
    spec = ReferenceSpec("video", 1920, 1080, seconds=20)
    g = build_geometry(1344, 768, seconds=2, references=(spec,), reference_budget="medium")
    (ref,) = g.references
    assert ref.frames == L.snap_frames_down(REFERENCE_BUDGETS["medium"].video_frames) <= g.frames
    assert ref.width * ref.height <= REFERENCE_BUDGETS["medium"].video_pixels


def test_references_pack_in_stock_order_pictures_videos_audio():
    refs = (ReferenceSpec("audio", seconds=2), ReferenceSpec("video", 640, 360, seconds=1, with_audio=True),
            ReferenceSpec("picture", 512, 512))
    g = build_geometry(1344, 768, seconds=5, references=refs, reference_budget="max")
    assert [r.label for r in g.references] == ["Picture 1", "Video 1", "Audio 2"]
    kinds = [s.kind for s in g.row_spans]
    assert kinds == ["text", "ref_img", "ref_audio", "ref_img", "ref_audio", "audio", "video"]


def test_total_reference_rows_over_the_budget_is_an_input_error():
    refs = tuple(ReferenceSpec("picture", 1344, 768) for _ in range(9))
    with pytest.raises(LongMediaInputError, match="reference_budget='low'"):
        build_geometry(1344, 768, seconds=5, references=refs, reference_budget="low")
    g = build_geometry(1344, 768, seconds=5, references=refs, reference_budget="max")
    assert g.reference_rows == 9 * 1008


def test_keyframes_first_and_last_frame():
    kfs = (KeyframeSpec(0, in_prompt=True), KeyframeSpec(-1, in_prompt=True))
    g = build_geometry(1344, 768, seconds=5, keyframes=kfs)
    assert [(s.kind, s.rows) for s in g.row_spans][1:3] == [("cond", 1008), ("cond", 1008)]
    assert g.text_rows == 256 + 2 * (6 + 2 + 1008)


def test_guide_clip_with_audio_is_cropped_to_the_track():
    g = build_geometry(1344, 768, frames=124, keyframes=(KeyframeSpec(100, frames=22, audio_seconds=10.0),))
    cond = [s for s in g.row_spans if s.kind.startswith("cond")]
    assert cond[0].rows == L.latent_frames(22) * 1008
    # audio room: floor(207 - 5/3 * 100) = 40 latent frames
    assert cond[1].rows == 2 * 40


@pytest.mark.parametrize("kwargs, name", [
    (dict(width=20, height=768, seconds=5), "width"),
    (dict(width=1344, height=768, seconds=5, fps=30), "fps"),
    (dict(width=1344, height=768, seconds=200), "seconds"),
    (dict(width=1344, height=768, seconds=5, frames=120), "duration"),
    (dict(width=1344, height=768, seconds=5, text_tokens=-1), "text_tokens"),
    (dict(width=1344, height=768, seconds=5, reference_budget="huge"), "reference_budget"),
    (dict(width=1344, height=768, seconds=5, context_frames=22), "context_frames"),
    (dict(width=1344, height=768, seconds=5, keyframes=(KeyframeSpec(120, frames=22),)), "frame_index"),
    (dict(width=1344, height=768, seconds=5, keyframes=(KeyframeSpec(0, frames=10),)), "frames"),
    (dict(width=1344, height=768, seconds=5, references=(ReferenceSpec("picture", 64, 64),),
          keyframes=(KeyframeSpec(0, in_prompt=True),)), "in_prompt"),
])
def test_bad_input_names_the_input_and_its_range(kwargs, name):
    with pytest.raises(LongMediaInputError) as info:
        build_geometry(**kwargs)
    assert name in str(info.value) and "expected" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_reference_spec_validates_itself():
    with pytest.raises(LongMediaInputError, match="video reference seconds"):
        ReferenceSpec("video", 640, 360, seconds=0.1)
    with pytest.raises(LongMediaInputError, match="reference kind"):
        ReferenceSpec("gif", 10, 10)


def test_segmented_job_uses_the_longest_pass():
    g = build_geometry(1344, 768, seconds=60, segment_seconds=10)
    # segment 0: 243 frames; later passes: 22 context + 238 new = 260 frames (segments.plan_segments)
    assert (g.frames, g.context_frames, g.total_frames) == (260, 22, L.snap_frames(1440))
    assert g.segment_count == 1 + math.ceil((g.total_frames - 243) / 238)
    assert g.video_rows == L.latent_frames(260) * 1008


sizes = st.sampled_from([(1344, 768), (768, 1344), (1280, 720), (1920, 1080), (512, 512), (1000, 600)])
refs = st.lists(st.one_of(
    st.builds(ReferenceSpec, st.just("picture"), st.integers(64, 4096), st.integers(64, 4096)),
    st.builds(ReferenceSpec, st.just("video"), st.integers(64, 2048), st.integers(64, 2048),
              st.floats(0.3, 12.0), st.just(0), st.booleans()),
    st.builds(ReferenceSpec, st.just("audio"), seconds=st.floats(0.1, 30.0))), max_size=4)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(sizes, st.floats(0.5, 40.0), refs, st.sampled_from(tuple(REFERENCE_BUDGETS)), st.integers(0, 2000))
def test_totals_equal_the_sum_of_segments(size, seconds, references, budget, text):
    try:
        g = build_geometry(*size, seconds=seconds, references=tuple(references), reference_budget=budget,
                           text_tokens=text)
    except LongMediaInputError as exc:     # the budget's total cap, or a video shorter than 5 frames
        assert "references" in exc.input_name or exc.input_name.startswith("Video")
        return
    assert isinstance(g, Geometry)
    assert g.seq_len == sum(s.rows for s in g.row_spans)
    assert g.seq_len == g.text_rows + g.cond_rows + g.reference_rows + g.audio_rows + g.video_rows
    assert g.text_rows == max(1, text + sum(r.prompt_tokens for r in g.references))
    assert g.reference_rows == sum(r.rows for r in g.references)
    assert g.video_rows == g.latent_frames * g.rows_per_latent_frame
    b = REFERENCE_BUDGETS[budget]
    if b.total_rows is not None:
        assert g.reference_rows + sum(r.prompt_tokens for r in g.references) <= b.total_rows
    assert g.to_dict()["seq_len"] == g.seq_len
