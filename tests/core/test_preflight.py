"""Pre-flight checks (longmedia/job/preflight.py and their callers): each refusal names the node input."""

from __future__ import annotations

from pathlib import Path

import pytest

from longmedia.errors import LongMediaInputError
from longmedia.h3 import lattice as L
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job import preflight as pf
from longmedia.job.geometry import build_geometry
from longmedia.job.job import LongMediaJob
from longmedia.job.setup_plan import MediaInput, SetupRequest, plan_setup
from longmedia.limits import MAX_SEED
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest
from longmedia.report.oom import LongMediaOOM, is_oom, phase
from longmedia.segments import seams
from longmedia.units import GIB

INT8 = ModelProfile.preset("h3-int8")


def _plan(vram, w=1344, h=768, seconds=10.0, request=None):
    g = build_geometry(w, h, seconds=seconds)
    return plan(INT8, DeviceProfile.card(vram, 64), g, request, attention_resolver=default_attention_path)


# --- sizes --------------------------------------------------------------------------------------------------

def test_job_latent_bytes_are_comfyuis_float32_av_latent():
    frames = L.frames_for_seconds(150.0)                  # 3609 frames -> 1062 video / 6015 audio latent frames
    video = 24 * L.latent_frames(frames) * 1024 * 1024
    assert pf.job_latent_bytes(16384, 16384, frames) == (video + 32 * 2 * L.target_audio_frames(frames)) * 4
    assert pf.job_latent_bytes(16384, 16384, frames) == 106904420352 + 32 * 2 * 6015 * 4   # the 107 GB


def test_setup_refuses_a_107_gb_latent_naming_width_height_seconds_and_the_cap():
    with pytest.raises(LongMediaInputError) as info:
        plan_setup(SetupRequest(16384, 16384, 150.0))
    text = str(info.value)
    assert info.value.input_name == "seconds"
    assert "width=16384, height=16384, seconds=150" in text and "hard cap" in text and "32.00 GiB" in text


def test_setup_latent_cap_follows_available_ram():
    plan_setup(SetupRequest(4096, 2048, 60.0, segment_seconds=5.0))   # 24 * 427 * 128 * 256 * 4 B = 1.3 GiB
    with pytest.raises(LongMediaInputError, match="RAM available") as info:
        plan_setup(SetupRequest(4096, 2048, 60.0, segment_seconds=5.0, ram_available_bytes=2 * GIB))
    assert "seconds=60" in str(info.value)


def test_setup_refuses_a_pass_over_the_row_cap_and_names_the_length_input():
    with pytest.raises(LongMediaInputError) as info:
        plan_setup(SetupRequest(4096, 4096, 10.0))        # 1,180,459 rows > 2**20
    assert info.value.input_name == "seconds" and info.value.value == 10.0
    assert "is 1180459 rows" in str(info.value) and "segment_seconds" in str(info.value)
    segmented = plan_setup(SetupRequest(4096, 4096, 10.0, segment_seconds=4.0))
    assert segmented.geometry.seq_len <= pf.MAX_PASS_ROWS
    with pytest.raises(LongMediaInputError) as info:
        plan_setup(SetupRequest(8192, 8192, 10.0, segment_seconds=4.0))
    assert info.value.input_name == "segment_seconds" and info.value.value == 4.0


def test_continuation_frames_is_named_as_setup_calls_it():
    with pytest.raises(LongMediaInputError) as info:
        plan_setup(SetupRequest(512, 512, 2.0, segment_seconds=0.5, context_frames=22))
    assert info.value.input_name == "context_frames"
    assert str(info.value).startswith("context_frames=22 is not allowed")


def test_the_reference_rows_cap_names_reference_budget():
    refs = tuple(MediaInput(f"ref_image_{i}", "picture", 2048, 2048, 1) for i in range(1, 10))
    with pytest.raises(LongMediaInputError) as info:
        plan_setup(SetupRequest(1344, 768, 5.0, family="ref2va", conditioning="clip", references=refs, have_vae=True))
    assert info.value.input_name == "reference_budget" and "at most 4096 reference rows" in str(info.value)
    assert "Raise reference_budget, or use fewer, smaller or shorter references." in str(info.value)


# --- job and latent ------------------------------------------------------------------------------------------

def _job(w=64, h=64, seconds=0.9):
    return plan_setup(SetupRequest(w, h, seconds)).job()


def test_a_non_job_value_on_job_is_an_error_naming_job():
    assert pf.check_job_value(None) is None
    job = _job()
    assert pf.check_job_value(job) is job
    for value in ("not a job", {"geometry": 1}, 5, type("LongMediaJob", (), {})()):
        with pytest.raises(LongMediaInputError, match=r"^job=") as info:
            pf.check_job_value(value)
        assert "LONGMEDIA_JOB" in str(info.value)


def test_latent_canvas_and_length_against_the_job():
    job = _job()                                          # 64x64, 22 frames: video T 7, audio 37
    g = job.geometry
    frames, canvas = g.total_frames or g.frames, (g.width, g.height)
    pf.check_latent_matches_job(frames, (1, 24, 7, 4, 4), (1, 32, 2, 37), canvas=canvas)
    with pytest.raises(LongMediaInputError, match=r"latent='128x128 px'.*canvas 64x64 px"):
        pf.check_latent_matches_job(frames, (1, 24, 7, 8, 8), (1, 32, 2, 37), canvas=canvas)
    pf.check_latent_matches_job(frames, (1, 24, 7, 8, 8), (1, 32, 2, 37))  # a stage's canvas: only the length
    with pytest.raises(LongMediaInputError, match=r"latent=.*39 frames.*the job's 22 frames"):
        pf.check_latent_matches_job(frames, (1, 24, 12, 4, 4), (1, 32, 2, 65), canvas=canvas)
    with pytest.raises(LongMediaInputError, match=r"latent=.*the job's 22 frames \(7 video / 37 audio"):
        pf.check_latent_matches_job(frames, (1, 24, 7, 4, 4), (1, 32, 2, 36))  # the audio stream alone
    assert isinstance(job, LongMediaJob)


def test_one_latent_check_one_message():
    """The Sampler, a segmented run, Hi-Res and the Refiner refuse a latent of another length through this one
    check; no second copy remains in segments/ or comfy/."""
    root = Path(pf.__file__).resolve().parents[1]
    hits = [p.relative_to(root).as_posix() for p in root.rglob("*.py")
            if "check_latent_matches_job(" in p.read_text(encoding="utf-8")]
    assert sorted(hits) == ["comfy/passes/pass_loop.py", "comfy/passes/sampler_inputs.py", "comfy/passes/stages.py",
                            "job/preflight.py"]
    assert not any("def check_job_latent(" in p.read_text(encoding="utf-8") for p in (root / "segments").rglob("*.py"))


def test_conditioning_width_against_text_dim_names_the_conditioning_and_both_widths():
    pf.check_conditioning_widths({"positive": (64,), "negative": (64, 64)}, 64)
    with pytest.raises(LongMediaInputError) as info:
        pf.check_conditioning_widths({"positive": (64,), "negative": (96,)}, 64)
    text = str(info.value)
    assert info.value.input_name == "negative" and "96" in text and "64 wide" in text and "text_dim" in text


# --- plans ---------------------------------------------------------------------------------------------------

def test_auto_with_nothing_fitting_is_refused_naming_the_latent():
    p = _plan(8, 1280, 720, seconds=30)
    assert not p.fits
    with pytest.raises(LongMediaInputError, match=r"^latent=") as info:
        pf.check_plan_runs(p)
    assert "segment_seconds" in str(info.value) and "ultra_low_vram" in str(info.value)
    advice = info.value.suggestion  # typed: a program never parses the message for it
    assert advice.input == "segment_seconds" and 0 < advice.value < 30
    assert f"set Setup's segment_seconds to {advice.value:g}" in str(info.value)


def test_a_refusal_without_a_single_input_to_change_carries_no_suggestion():
    with pytest.raises(LongMediaInputError) as info:
        pf.check_latent_matches_job(22, (1, 24, 7, 8, 8), (1, 32, 2, 37), canvas=(64, 64))
    assert info.value.suggestion is None


def test_a_chosen_mode_that_does_not_fit_runs_with_a_warning():
    p = _plan(12, 1920, 1080, seconds=10, request=PlanRequest(memory_mode="normal"))
    assert not p.fits
    (warning,) = pf.check_plan_runs(p)
    assert "does NOT fit" in warning and "memory_mode=normal" in warning
    assert pf.check_plan_runs(_plan(24)) == ()


def test_a_reserve_that_crowds_out_the_pass_is_named():
    p = _plan(24, request=PlanRequest(vram_activation_reserve_mb=23 * 1024))   # 0.5 GiB left of 23.5
    assert not p.fits
    with pytest.raises(LongMediaInputError, match=r"^vram_activation_reserve_mb=23552"):
        pf.check_plan_runs(p)


def test_a_reserve_past_the_card_is_an_input_error_naming_the_card():
    with pytest.raises(LongMediaInputError, match=r"^vram_activation_reserve_mb=1048576") as info:
        _plan(24, request=PlanRequest(vram_activation_reserve_mb=1 << 20))
    assert "24 GB card" in str(info.value) and "MiB of VRAM usable for the job" in str(info.value)


# --- seeds ---------------------------------------------------------------------------------------------------

def test_pass_seeds_leave_room_for_comfyuis_seed_plus_one():
    seeds = seams.segment_seeds(4, 2 ** 64 - 2)
    assert seeds == (2 ** 64 - 2, 0, 1, 2)                # pass 0 is the noise's seed, as stock sampling uses it
    assert all(s + 1 <= MAX_SEED for s in seeds[1:])
    import torch

    for s in seeds:
        torch.Generator().manual_seed(s + 1)              # what ComfyUI's CPU noise sampler and H3's audio guide do
    with pytest.raises(LongMediaInputError, match=r"seeds\[1\]"):
        seams.segment_seeds(3, 0, (5, MAX_SEED))
    with pytest.raises(LongMediaInputError, match="noise_seed"):
        seams.segment_seeds(3, MAX_SEED + 1)


# --- allocation failures -------------------------------------------------------------------------------------

def test_a_cpu_allocator_failure_becomes_the_oom_report():
    error = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                         "you tried to allocate 106904420352 bytes. Error code 12 (Cannot allocate memory)")
    assert is_oom(error) and not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    with pytest.raises(LongMediaOOM) as info, phase("mlp"):
        raise error
    assert info.value.report.phase == "mlp" and "CPU RAM" in str(info.value)
    with pytest.raises(ValueError, match="unrelated"), phase("mlp"):
        raise ValueError("unrelated")


def test_a_job_latent_allocation_failure_names_the_job_size():
    error = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 106904420352 bytes.")
    with pytest.raises(LongMediaOOM) as info, phase("job_latent"):
        raise error
    report = info.value.report
    assert report.phase == "job_latent" and report.pressure_point == "seconds / width / height"
    assert "did not fit in RAM" in report.next_step and "CPU RAM" in report.summary()


def test_a_comfy_aimdo_cast_buffer_failure_becomes_the_oom_report():
    """comfy-aimdo raises a plain RuntimeError when its cast buffer cannot grow (seen on the H200, bench/cards/ (python -m bench.cards))."""
    error = RuntimeError("VRAM grow failed: 905774080 bytes")
    assert is_oom(error) and is_oom(RuntimeError("VRAM reservation failed"))
    with pytest.raises(LongMediaOOM) as info, phase("mlp"):
        raise error
    assert info.value.report.phase == "mlp" and "GPU memory" in str(info.value)
    assert "VRAM grow failed" in info.value.report.error
