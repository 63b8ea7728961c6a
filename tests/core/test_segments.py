"""Fixed-segment plans: lattice snapping, trimming, context alignment, audio slicing, bad input."""

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from longmedia.errors import LongMediaInputError
from longmedia.h3 import lattice as L
from longmedia.limits import MAX_FRAMES as MAX_TOTAL_FRAMES
from longmedia.limits import MAX_SEED
from longmedia.planning.segment_range import suggest_segment_seconds
from longmedia.segments.seams import segment_seeds
from longmedia.segments.timeline import audio_boundary, latent_boundary, plan_segments

TOKEN_FRAMES = (1, 4, 4, 4, 4)   # pixel frames per video latent, repeating every 17 frames


def stock_frames(length):
    """Independent model of the stock latent node: smallest n >= max(5, length) with n % 17 == 5."""
    n = max(5, length)
    while n % 17 != 5:
        n += 1
    return n


def latent_spans(frames):
    """[(first pixel, end pixel)] of each video latent of a `frames`-long video, built frame by frame."""
    spans, start, k = [], 0, 0
    while start < frames:
        spans.append((start, start + TOKEN_FRAMES[k % 5]))
        start += TOKEN_FRAMES[k % 5]
        k += 1
    assert start == frames
    return spans


def tiles(ranges, total):
    pos = 0
    for a, b in ranges:
        assert a == pos and b > a, (ranges, total)
        pos = b
    assert pos == total


def check_plan(plan, requested):
    total = stock_frames(requested)
    assert plan.pixel_frames == total
    assert plan.video_latent_frames == len(latent_spans(total)) == L.latent_frames(total)
    assert plan.audio_latent_frames == round(total / 24 * 40) == L.target_audio_frames(total)
    segs = plan.segments
    assert [s.index for s in segs] == list(range(plan.count))
    tiles([s.pixel_range for s in segs], total)
    tiles([s.video_latent_range for s in segs], plan.video_latent_frames)
    tiles([s.audio_range for s in segs], plan.audio_latent_frames)
    full = latent_spans(total)
    for prev, s in zip((None,) + segs[:-1], segs):
        assert L.is_lattice_frames(s.pass_frames) and s.pass_frames <= L.MAX_STOCK_FRAMES
        assert s.new_frames == s.pass_end - s.new_start > 0
        a, b = s.pass_latent_range
        assert b - a == s.latent_frames and b <= plan.video_latent_frames
        # pass latent t covers the same pixels (shifted by pass_start) as result latent a + t
        for t, (p0, p1) in enumerate(latent_spans(s.pass_frames)):
            assert full[a + t] == (s.pass_start + p0, s.pass_start + p1)
        lo, hi = s.new_latent_slice
        assert (a + lo, a + hi) == s.video_latent_range
        assert s.audio_end - s.audio_start == s.audio_frames
        assert abs(s.audio_frames - s.stock_audio_frames) <= 1
        assert (s.audio_start + s.new_audio_slice[0], s.audio_start + s.new_audio_slice[1]) == s.audio_range
        assert abs(s.audio_start - s.pass_start * 40 / 24) <= 1 / 3 + 1e-9
        if prev is None:
            assert s.context_frames == 0 and s.pass_start == 0 and s.context_latent_frames == 0
            continue
        assert s.context_frames == plan.context_frames and L.is_lattice_frames(s.context_frames)
        assert s.pass_start % 17 == 0 and a % 5 == 0          # starts a VAE clip
        # the context is the tail of the previous pass, all of it new content there
        assert s.pass_start + s.context_frames == prev.pass_end
        c0, c1 = s.context_latent_range
        assert c1 == prev.video_latent_range[1] and c1 - c0 == L.latent_frames(s.context_frames)
        assert prev.video_latent_range[0] <= c0
        assert prev.audio_range[0] <= s.audio_start and s.audio_new_start == prev.audio_end
        assert s.context_audio_frames == s.audio_new_start - s.audio_start > 0


def test_longest_job():
    plan = plan_segments(total_frames=MAX_TOTAL_FRAMES, segment_seconds=10.0)
    check_plan(plan, MAX_TOTAL_FRAMES)
    assert plan.pixel_frames == 86416 and plan.count == 1 + -(-(86416 - 243) // 238)
    check_plan(plan_segments(3600.0, segment_seconds=150.0, context_frames=5), MAX_TOTAL_FRAMES)


def test_snaps_like_the_stock_node():
    assert plan_segments(10.0, segment_seconds=10.0).pixel_frames == 243
    assert plan_segments(total_frames=240, segment_seconds=10.0).pixel_frames == 243
    assert plan_segments(total_frames=1, segment_seconds=0.1).pixel_frames == 5
    for frames in (5, 6, 21, 22, 23, 124, 361, 362, 1000, 3600):
        plan = plan_segments(total_frames=frames, segment_seconds=min(5.0, frames / 24))
        check_plan(plan, frames)


def test_sixty_seconds_in_ten_second_segments():
    plan = plan_segments(60.0, segment_seconds=10.0)
    check_plan(plan, 1440)
    assert plan.pixel_frames == 1450 and plan.count == 7
    assert [s.pass_frames for s in plan.segments] == [243] + [260] * 5 + [39]
    assert [s.new_frames for s in plan.segments] == [243] + [238] * 5 + [17]   # trimmed last segment
    assert plan.max_pass_frames == 260
    assert segment_seeds(plan.count, 7) == tuple(range(7, 14))
    s1 = plan.segments[1]
    assert s1.pass_start == 221 and s1.pixel_range == (243, 481)
    assert s1.pass_latent_range == (65, 142) and s1.context_latent_range == (65, 72)
    assert s1.video_latent_range == (72, 142) and s1.new_latent_slice == (7, 77)
    assert s1.pass_audio_range == (368, 802) and s1.audio_range == (405, 802)
    assert plan.generated_frames == 1450 + 6 * 22
    d = plan.to_dict()
    assert json.loads(json.dumps(d))["count"] == 7 and d["segments"][1]["video_latent_range"] == (72, 142)
    lines = plan.describe()
    assert len(lines) == 2 + plan.count and "1450 frames" in lines[0] and "[243, 481)" in lines[3]


@pytest.mark.parametrize("context,latents", [(5, 2), (22, 7), (39, 12), (56, 17)])
def test_context_lengths(context, latents):
    plan = plan_segments(40.0, segment_seconds=8.0, context_frames=context)
    check_plan(plan, 960)
    for s in plan.segments[1:]:
        assert s.context_frames == context and s.context_latent_frames == latents
        assert s.pass_frames == s.new_frames + context


def test_shorter_than_one_segment_is_one_pass():
    plan = plan_segments(9.9, segment_seconds=10.0)       # both snap to 243 frames
    assert plan.count == 1 and plan.context_frames == 0
    s = plan.segments[0]
    assert (s.pass_frames, s.context_frames, s.audio_frames) == (243, 0, 405)
    assert s.context_latent_range == (0, 0)
    check_plan(plan, 238)


def test_exact_multiples_have_no_trim():
    for later in (1, 2, 5):
        plan = plan_segments(total_frames=243 + 238 * later, segment_seconds=10.0)
        check_plan(plan, 243 + 238 * later)
        assert plan.count == 1 + later and {s.new_frames for s in plan.segments[1:]} == {238}


def test_one_frame_remainder_becomes_one_clip():
    plan = plan_segments(total_frames=243 + 238 * 2 + 1, segment_seconds=10.0)
    check_plan(plan, 243 + 238 * 2 + 1)
    assert plan.count == 4 and plan.segments[-1].new_frames == 17 and plan.segments[-1].pass_frames == 39


def test_audio_boundaries_match_stock_rounding():
    for f in range(0, 5000):
        assert audio_boundary(f) == round(f / 24 * 40)
    assert [latent_boundary(f) for f in (0, 1, 5, 9, 13, 17, 22, 34)] == [0, 1, 2, 3, 4, 5, 7, 10]
    with pytest.raises(ValueError):
        latent_boundary(3)


def test_audio_slices_can_differ_from_stock_by_one():
    plan = plan_segments(60.0, segment_seconds=10.0)
    diffs = {s.audio_frames - s.stock_audio_frames for s in plan.segments}
    assert diffs <= {-1, 0, 1} and diffs != {0}


def test_seeds_pinned_and_wrapping():
    plan = plan_segments(30.0, segment_seconds=10.0)
    assert plan.count == 4 and segment_seeds(plan.count, MAX_SEED, (11, 12)) == (11, 12, 2, 3)  # seed + index, mod 2**64 - 1
    assert segment_seeds(plan.count, 5) == (5, 6, 7, 8)


def test_the_plan_table_shows_no_seed_the_run_does_not_use():
    """Seeds come from the noise node at run time; the segment plan's table must not invent them."""
    plan = plan_segments(30.0, segment_seconds=10.0)
    assert "seed" not in "\n".join(plan.describe()) and "seed" not in json.dumps(plan.to_dict())


def _err(**kw):
    with pytest.raises(LongMediaInputError) as info:
        plan_segments(**kw)
    return info.value


@pytest.mark.parametrize("kw,name", [
    (dict(total_seconds=5.0, segment_seconds=10.0), "segment_seconds"),          # longer than the job
    (dict(total_seconds=60.0, segment_seconds=0.5, context_frames=22), "context_frames"),   # context > segment
    (dict(total_seconds=60.0, segment_seconds=10.0, context_frames=23), "context_frames"),  # off the lattice
    (dict(total_seconds=60.0, segment_seconds=10.0, context_frames=0), "context_frames"),
    (dict(total_seconds=60.0, segment_seconds=10.0, context_frames=1), "context_frames"),
    (dict(total_seconds=60.0, segment_seconds=10.0, context_frames=-5), "context_frames"),
    (dict(total_frames=MAX_TOTAL_FRAMES + 1, segment_seconds=10.0), "total_frames"),  # past the maximum
    (dict(total_seconds=3600.5, segment_seconds=10.0), "total_seconds"),
    (dict(total_seconds=0.0, segment_seconds=10.0), "total_seconds"),            # non-positive
    (dict(total_seconds=-3.0, segment_seconds=10.0), "total_seconds"),
    (dict(total_frames=0, segment_seconds=10.0), "total_frames"),
    (dict(total_seconds=60.0, segment_seconds=0.0), "segment_seconds"),
    (dict(total_seconds=60.0, segment_seconds=-1.0), "segment_seconds"),
    (dict(total_seconds=60.0, segment_seconds=0.1), "segment_seconds"),          # under one clip of new time
    (dict(total_seconds=600.0, segment_seconds=150.0), "segment_seconds"),       # + context > one stock pass
    (dict(total_seconds=60.0, segment_seconds=float("nan")), "segment_seconds"),
    (dict(total_seconds=60.0, total_frames=1440, segment_seconds=10.0), "duration"),
    (dict(segment_seconds=10.0), "duration"),
    (dict(total_seconds=60.0, segment_seconds=10.0, fps=30), "fps"),
])
def test_bad_input_names_the_input(kw, name):
    err = _err(**kw)
    assert err.input_name == name
    assert name.split("[")[0] in str(err) and "expected" in str(err)


def test_error_messages_carry_value_and_range():
    err = _err(total_seconds=5.0, segment_seconds=10.0)
    assert "10.0" in str(err) and "124 frames" in str(err)
    err = _err(total_seconds=60.0, segment_seconds=10.0, context_frames=23)
    assert "23" in str(err) and "Use 22 or 39" in str(err)
    err = _err(total_seconds=60.0, segment_seconds=0.5, context_frames=22)
    assert "below the 17 new frames" in str(err)


def test_suggestions_follow_the_starting_points():
    assert (suggest_segment_seconds(16).min_seconds, suggest_segment_seconds(16).max_seconds) == (5.0, 10.0)
    s12 = suggest_segment_seconds(12, "low")
    assert (s12.min_seconds, s12.max_seconds, s12.transfer_bound) == (5.0, 8.0, False)
    s12m = suggest_segment_seconds(12, "medium")
    assert (s12m.min_seconds, s12m.max_seconds) == (4.0, 6.0) and len(s12m.reasons) == 2
    s8 = suggest_segment_seconds(8)
    assert (s8.min_seconds, s8.max_seconds, s8.transfer_bound) == (4.0, 6.0, True)
    assert suggest_segment_seconds(6).reasons[-1].startswith("6 GB is below")
    for gb in (6, 8, 12, 16, 24, 80):
        s = suggest_segment_seconds(gb)
        assert s.min_seconds <= s.seconds <= s.max_seconds
    with pytest.raises(LongMediaInputError):
        suggest_segment_seconds(16, "huge")
    with pytest.raises(LongMediaInputError):
        suggest_segment_seconds(0)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(total=st.integers(1, 20000), seg=st.floats(0.5, 40.0), k=st.integers(0, 4), seed=st.integers(0, MAX_SEED))
def test_plans_tile_the_timeline(total, seg, k, seed):
    context = 17 * k + 5
    first = L.frames_for_seconds(seg)
    assume(first <= stock_frames(total))
    assume(first == stock_frames(total) or context < first - 5)
    assume(first - 5 + context <= L.MAX_STOCK_FRAMES)
    plan = plan_segments(total_frames=total, segment_seconds=seg, context_frames=context)
    check_plan(plan, total)
    assert segment_seeds(plan.count, seed) == tuple(seed if i == 0 else (seed + i) % (2 ** 64 - 1)
                                                    for i in range(plan.count))
    assert len({s.pass_frames for s in plan.segments[1:-1]}) <= 1          # fixed segments, only the last trimmed


@settings(max_examples=200, deadline=None, derandomize=True)
@given(total=st.integers(1, 20000), seg=st.floats(0.0, 200.0), context=st.integers(-20, 200))
def test_any_input_plans_or_raises_the_input_error(total, seg, context):
    try:
        plan = plan_segments(total_frames=total, segment_seconds=seg, context_frames=context)
    except LongMediaInputError as err:
        assert err.input_name in ("segment_seconds", "context_frames")
        return
    check_plan(plan, total)
