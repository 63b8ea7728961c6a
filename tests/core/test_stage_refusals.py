"""Hi-Res and Refiner refuse a pass that fits no mode naming an input those nodes have (issue 28: the refusal
used to advise Setup's segment_seconds, which neither node has); seam steps of an assembled segmented latent."""

from __future__ import annotations

import pytest
import torch

from longmedia.errors import LongMediaInputError
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job import preflight as pf
from longmedia.job.geometry import build_geometry
from longmedia.job.setup_plan import SetupRequest, plan_setup
from longmedia.limits import MAX_PASS_ROWS
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest
from longmedia.report.memory import MemorySnapshot
from longmedia.report.oom import PHASES, OOMContext, pressure_point
from longmedia.segments.seam_steps import seam_steps
from longmedia.segments.timeline import plan_segments

INT8 = ModelProfile.preset("h3-int8")
HIRES_NODE_INPUTS = {"noise", "guider", "sampler", "sigmas", "latent", "job", "scale", "denoise", "method",
                     "keep_audio", "upscaler", "renoise_sigma", "memory_mode"}
REFINER_NODE_INPUTS = {"noise", "guider", "sampler", "latent", "job", "scheduler", "steps", "denoise", "sigmas",
                       "memory_mode"}


def _too_big():
    p = plan(INT8, DeviceProfile.card(8, 64), build_geometry(1280, 720, seconds=30), None,
             attention_resolver=default_attention_path)
    assert not p.fits
    return p


def test_the_sampler_refusal_advises_segment_seconds_which_the_stages_do_not_have():
    with pytest.raises(LongMediaInputError) as info:
        pf.check_plan_runs(_too_big())
    assert info.value.input_name == "latent" and "segment_seconds" in str(info.value)


@pytest.mark.parametrize("stage,inputs", [("hires", HIRES_NODE_INPUTS), ("refiner", REFINER_NODE_INPUTS)])
def test_a_stage_without_a_segmented_job_is_told_to_connect_one(stage, inputs):
    one_pass = plan_setup(SetupRequest(64, 64, 0.9)).job()
    for job in (None, one_pass):
        with pytest.raises(LongMediaInputError) as info:
            pf.StagePass(stage, job).check_runs(_too_big())
        assert info.value.input_name == "job" and info.value.input_name in inputs
        assert "job input" in info.value.fix and "segment by segment" in info.value.fix
        assert ("lower scale" in info.value.fix) == (stage == "hires")


def test_a_segmented_stage_names_scale_on_hires_and_job_on_the_refiner():
    job = plan_setup(SetupRequest(1344, 768, 30.0, segment_seconds=10.0)).job()
    assert job.segmented
    with pytest.raises(LongMediaInputError) as hires:
        pf.StagePass("hires", job).check_runs(_too_big())
    with pytest.raises(LongMediaInputError) as refiner:
        pf.StagePass("refiner", job).check_runs(_too_big())
    assert hires.value.input_name == "scale" and refiner.value.input_name == "job"
    assert "passes" in str(hires.value.value) and "Setup" in refiner.value.fix


def test_a_pass_over_the_row_cap_names_the_stage_s_input():
    with pytest.raises(LongMediaInputError) as info:
        pf.StagePass("hires").check_rows(MAX_PASS_ROWS + 1, 4096, 4096, 1000)
    assert info.value.input_name == "job"
    assert pf.StagePass("refiner").check_rows(1000, 64, 64, 22) == 1000
    with pytest.raises(ValueError):
        pf.StagePass("sampler")


def test_the_plan_request_carries_the_job_s_reference_budget():
    assert PlanRequest().reference_budget is None
    assert PlanRequest(reference_budget="low").reference_budget == "low"
    with pytest.raises(LongMediaInputError, match="reference_budget"):
        PlanRequest(reference_budget="huge")


def test_an_upscaler_oom_has_its_own_phase_and_remedy():
    assert "latent_upscale" in PHASES
    point, step = pressure_point("latent_upscale", MemorySnapshot("cpu", None, None, None, None), OOMContext())
    assert "upscaler" in point and "job input" in step


def test_an_upscaler_oom_on_one_segment_advises_a_shorter_segment_not_the_job_input():
    """With the job connected, Hi-Res already upscales one segment at a time: the advice is a shorter segment."""
    point, step = pressure_point("latent_upscale", MemorySnapshot("cpu", None, None, None, None),
                                 OOMContext(one_segment=True))
    assert point.startswith("segment_seconds") and "segment_seconds shorter" in step
    assert "job input" not in step


def test_seam_steps_find_a_jump_at_a_join_and_not_elsewhere():
    plan = plan_segments(total_frames=107, segment_seconds=39 / 24, context_frames=22)
    g = torch.Generator().manual_seed(3)
    t, ta = plan.video_latent_frames, plan.audio_latent_frames
    video = torch.randn(1, 24, 1, 4, 4, generator=g) + 0.05 * torch.randn(1, 24, t, 4, 4, generator=g).cumsum(2)
    audio = torch.randn(1, 32, 2, 1, generator=g) + 0.05 * torch.randn(1, 32, 2, ta, generator=g).cumsum(-1)
    smooth = seam_steps(plan, video, audio)
    assert len(smooth.video) == len(smooth.audio) == plan.count - 1
    assert smooth.worst <= max(smooth.inside_video_max, smooth.inside_audio_max)
    join = plan.segments[2].video_latent_range[0]
    video[:, :, join:] += 1.0                                        # a seam at the second join
    seamed = seam_steps(plan, video, audio)
    assert seamed.video[1] > 5 * seamed.inside_video_max and seamed.video[0] == pytest.approx(smooth.video[0])
    assert "seams" in seamed.line() and seam_steps(plan_segments(total_frames=39, segment_seconds=39 / 24),
                                                   video[:, :, :12], audio[..., :65]).line().endswith("one segment)")
