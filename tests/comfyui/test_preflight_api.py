"""Pre-flight checks through a real server's /prompt (and two in-process cases): each bad prompt fails with a
LongMediaInputError naming the node input, before sampling starts, and the server then runs a valid prompt.

Each case is the exact API prompt of issue 17's "Through the API" list, on the tiny checkpoints.
"""

from __future__ import annotations

import dataclasses
import time

import harness
import pytest
import torch
from test_stage_nodes import FRAMES, NORMAL, SECONDS, H, W, guider, sigmas
from testnodes import tiny_text_encoder as tc

from longmedia.errors import LongMediaInputError
from longmedia.h3.profiles import DeviceProfile
from longmedia.planning.types import PlanRequest
from longmedia.report.oom import LongMediaOOM
from longmedia.testing.tiny_h3 import TINY_DIMS, write_tiny_h3

TEXT64_UNET = "tiny_h3_text64_fp32.safetensors"
INPUT_ERROR = "LongMedia input error"   # the title ComfyUI shows (longmedia.errors.TITLE), not a file path
SAMPLING_FRAMES = ("comfy/samplers.py", "k_diffusion/sampling.py")


def prompt(out_name: str = "preflight.safetensors", *, sampler: dict | None = None, **setup) -> dict:
    """Setup -> CFGGuider -> LongMedia Sampler (2 steps) -> save, on the tiny fp32 model at 64x64, 22 frames."""
    p = harness.t2va_prompt("tiny_h3_fp32.safetensors", out_name, width=W, height=H, length=FRAMES, steps=2)
    del p["latent"]
    p["setup"] = {"class_type": "LongMediaSetup",
                  "inputs": {"positive": ["pos", 0], "negative": ["neg", 0], "width": W, "height": H,
                             "seconds": SECONDS, "family": "t2va", "reference_budget": "low", "segment_seconds": 0.0,
                             "context_frames": 22, **setup}}
    p["guider"]["inputs"].update(positive=["setup", 0], negative=["setup", 1])
    p["sample"] = {"class_type": "LongMediaSampler",
                   "inputs": {"noise": ["noise", 0], "guider": ["guider", 0], "sampler": ["sampler", 0],
                              "sigmas": ["sigmas", 0], "latent": ["setup", 2], "job": ["setup", 3],
                              "memory_mode": "auto", "attention_mode": "auto", **(sampler or {})}}
    p["save"]["inputs"]["samples"] = ["sample", 0]
    return p


def refused(server, p: dict, node_type: str) -> str:
    """The LongMediaInputError message of a prompt that must fail in `node_type` before sampling starts."""
    start = time.monotonic()
    entry = server.wait(server.submit(p), timeout=120)
    seconds = time.monotonic() - start
    errors = [data for event, data in entry["status"]["messages"] if event == "execution_error"]
    assert entry["status"]["status_str"] == "error" and len(errors) == 1, entry["status"]
    error = errors[0]
    trace = "".join(error.get("traceback", []))
    assert error["node_type"] == node_type, (error["node_type"], error["exception_message"])
    assert error["exception_type"] == INPUT_ERROR, (error["exception_type"], error["exception_message"])
    assert not any(frame in trace for frame in SAMPLING_FRAMES), f"sampling had started:\n{trace}"
    assert seconds < 60
    healthy(server)
    return error["exception_message"]


def healthy(server) -> None:
    """The server still runs a valid prompt after a refusal (a fresh seed, so the Sampler runs again)."""
    p = prompt("preflight_followup.safetensors")
    p["noise"]["inputs"]["noise_seed"] = time.monotonic_ns() % 2 ** 31
    entry = server.run(p, timeout=180)
    assert entry["outputs"]["sample"]["longmedia_report"][0]["plan"]["geometry"]["video_rows"] == 7 * 4


@pytest.fixture(scope="module")
def text64_unet(comfy_server):
    write_tiny_h3(comfy_server.base / "models" / "diffusion_models" / TEXT64_UNET,
                  dims=dataclasses.replace(TINY_DIMS, text_dim=64), variant="fp32")
    return TEXT64_UNET


# --- Setup -----------------------------------------------------------------------------------------------------

def test_a_107_gb_job_latent_is_refused_before_it_is_allocated(comfy_server):
    message = refused(comfy_server, prompt(width=16384, height=16384, seconds=150.0), "LongMediaSetup")
    assert message.startswith("seconds=150.0 is not allowed")
    assert "width=16384, height=16384, seconds=150" in message and "GiB" in message
    assert "hard cap" in message or "RAM available" in message


def test_4096_square_at_10_s_is_refused_in_setup(comfy_server):
    message = refused(comfy_server, prompt(width=4096, height=4096, seconds=10.0), "LongMediaSetup")
    assert message.startswith("seconds=10.0 is not allowed: expected at most 1048576 packed rows per pass")
    assert "4096x4096 with 243 frames in one pass" in message and "segment_seconds" in message


def test_4096_square_at_10_s_is_refused_in_the_sampler_without_setup(comfy_server):
    p = prompt()
    p["latent"] = {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": 4096, "height": 4096, "length": 243}}
    p["sample"]["inputs"]["latent"] = ["latent", 0]
    del p["sample"]["inputs"]["job"]
    message = refused(comfy_server, p, "LongMediaSampler")
    assert message.startswith("latent='4096x4096, 243 frames' is not allowed: expected at most 1048576 packed rows")


def test_a_0_sample_audio_reference_is_named(comfy_server):
    p = prompt(family="ref2va", clip=["clip", 0], prompt="<Audio 1> hums", ref_audio_1=["audio", 0])
    del p["setup"]["inputs"]["positive"]
    p["audio"] = {"class_type": "LongMediaTestAudio", "inputs": {"seconds": 0.0, "seed": 0}}
    message = refused(comfy_server, p, "LongMediaSetup")
    assert message.startswith("ref_audio_1='0 samples (0 s of audio)' is not allowed") and "'dict'" not in message


def test_continuation_frames_is_named_as_the_node_calls_it(comfy_server):
    message = refused(comfy_server, prompt(seconds=2.0, segment_seconds=0.5, context_frames=22), "LongMediaSetup")
    assert message.startswith("context_frames=22 is not allowed")


# --- Sampler ---------------------------------------------------------------------------------------------------

def test_conditioning_wider_than_the_models_text_dim_is_named(comfy_server, text64_unet):
    p = prompt()
    p["unet"]["inputs"]["unet_name"] = text64_unet
    message = refused(comfy_server, p, "LongMediaSampler")
    assert message.startswith("positive='96-wide conditioning' is not allowed")
    assert "64 wide (this model's text_dim)" in message


def test_a_latent_of_another_canvas_than_the_job_is_named(comfy_server):
    p = prompt()
    p["latent"] = {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": 128, "height": 128, "length": FRAMES}}
    p["sample"]["inputs"]["latent"] = ["latent", 0]
    message = refused(comfy_server, p, "LongMediaSampler")
    assert message.startswith("latent='128x128 px' is not allowed: expected the job's canvas 64x64 px")


def test_a_latent_of_another_length_than_the_job_is_named(comfy_server):
    p = prompt()
    p["latent"] = {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": W, "height": H, "length": 39}}
    p["sample"]["inputs"]["latent"] = ["latent", 0]
    message = refused(comfy_server, p, "LongMediaSampler")
    assert message.startswith("latent='39 frames") and "the job's 22 frames" in message


def test_a_non_job_value_on_job_is_named(comfy_server):
    message = refused(comfy_server, prompt(sampler={"job": "not a job"}), "LongMediaSampler")
    assert message.startswith("job='str' is not allowed") and "LONGMEDIA_JOB" in message


def test_a_reserve_past_the_budget_is_named_with_the_budget(comfy_server):
    message = refused(comfy_server, prompt(sampler={"vram_activation_reserve_mb": 1 << 20}), "LongMediaSampler")
    assert message.startswith("vram_activation_reserve_mb=1048576 is not allowed: expected an integer from 0 to")
    assert "usable for the job on the cpu" in message


@pytest.mark.parametrize("name", ["mlp_chunk_tokens", "sol_qkv_chunk_tokens", "sol_out_proj_chunk_tokens"])
def test_chunk_values_below_the_minimum_are_named(comfy_server, name):
    message = refused(comfy_server, prompt(sampler={name: 32}), "LongMediaSampler")
    assert message.startswith(f"{name}=32 is not allowed: expected an integer from 64 to")


def test_a_segmented_job_at_the_top_seed_runs_every_pass(comfy_server):
    p = prompt("preflight_seed.safetensors", seconds=2.0, segment_seconds=1.0)
    p["noise"]["inputs"]["noise_seed"] = 2 ** 64 - 2
    p["sampler"]["inputs"]["sampler_name"] = "euler_ancestral"   # ComfyUI's CPU noise sampler seeds with seed + 1
    entry = comfy_server.run(p, timeout=240)
    report = entry["outputs"]["sample"]["longmedia_report"][0]
    assert [s["seed"] for s in report["segments"]] == [2 ** 64 - 2, 0]


# --- in-process (inside torch.inference_mode, as ComfyUI runs nodes) -------------------------------------------

@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    """What test_stage_nodes' helpers (guider, sigmas) read: ComfyUI's samplers and the tiny fp32 model."""
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.comfy.passes import stages

    clip = tc.tiny_text_encoder(TINY_DIMS, seed=0)
    return {"samplers": comfy.samplers, "ncs": ncs, "h3n": h3n, "stages": stages, "neg": tc.encode_prompt(clip, ""),
            "pos": tc.encode_prompt(clip, "a red fox trots through fresh snow"),
            "model": comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))}


def _card(mib: int) -> DeviceProfile:
    return DeviceProfile(name=f"{mib} MiB test card", vram_total_bytes=mib << 20, vram_free_bytes=mib << 20,
                         allocator_reserved_bytes=0, ram_total_bytes=8 << 30, ram_available_bytes=8 << 30,
                         pinned_budget_bytes=1 << 30, os_name="linux", dynamic_vram=True)


def _latent(env, width, height):
    return env["h3n"].EmptyMiniMaxH3LatentAV.execute(width, height, FRAMES).result[0]


def _run(env, latent, request, **kw):
    return env["stages"].run_sampler(env["ncs"].Noise_RandomNoise(3), guider(env, env["pos"]),
                                     env["samplers"].sampler_object("euler"), sigmas(env, 2), latent, request, **kw)


def test_auto_with_no_fitting_mode_is_refused_and_a_chosen_mode_runs_with_a_warning(env):
    with torch.inference_mode():
        with pytest.raises(LongMediaInputError, match=r"^latent='4096x4096, 22 frames") as info:
            _run(env, _latent(env, 4096, 4096), PlanRequest(), device_profile=_card(1024))
        assert "ultra_low_vram" in str(info.value)
        with pytest.raises(LongMediaInputError, match=r"^vram_activation_reserve_mb=900"):
            _run(env, _latent(env, W, H), PlanRequest(vram_activation_reserve_mb=900), device_profile=_card(1024))
        result = _run(env, _latent(env, W, H), PlanRequest(memory_mode="ultra_low_vram",
                                                           vram_activation_reserve_mb=900), device_profile=_card(1024))
    assert not result.plan.fits and torch.isfinite(result.output["samples"].unbind()[0]).all()
    assert any("does NOT fit" in line for line in result.report.summary_lines())


def test_a_cpu_allocator_failure_in_sampling_becomes_the_oom_report(env):
    g = guider(env, env["pos"])

    def sample(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 106904420352 bytes. Error code 12 (Cannot allocate memory)")

    g.sample = sample   # this guider object only (run_sampler copies it with its attributes)
    with torch.inference_mode(), pytest.raises(LongMediaOOM) as info:
        env["stages"].run_sampler(env["ncs"].Noise_RandomNoise(3), g, env["samplers"].sampler_object("euler"),
                                  sigmas(env, 2), _latent(env, W, H), NORMAL)
    assert info.value.report.phase == "before_block_0" and "CPU RAM" in str(info.value)


def test_a_cpu_allocator_failure_on_the_segmented_job_latent_becomes_the_oom_report(comfy_inprocess):
    from longmedia.comfy.passes import pass_loop

    def allocate(*args):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory")

    with torch.inference_mode(), pytest.raises(LongMediaOOM) as info:
        pass_loop.job_latent(allocate, None)
    assert info.value.report.phase == "job_latent" and "CPU RAM" in str(info.value)
    assert pass_loop.job_latent(lambda n: torch.zeros(n), 3).shape == (3,)
