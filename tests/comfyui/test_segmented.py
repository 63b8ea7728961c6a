"""Segmented jobs on the tiny H3 checkpoints: 3 passes through the Sampler core, one continuous AV latent.

The seam check looks at what the model receives: a DIFFUSION_MODEL wrapper records the H3 payload of
every model call (the guide latents, the packed layout) and a wrapped `run_sampler` records every
pass's output, so the context handed to pass i is compared with pass i-1's final latents.
"""

from __future__ import annotations

import json

import pytest
import torch
from harness import DeviceReadings

from longmedia.comfy.passes import segmented
from longmedia.errors import LongMediaInputError
from longmedia.h3 import lattice as L
from longmedia.planning.types import PlanRequest
from longmedia.segments.timeline import plan_segments
from longmedia.testing import conditioning as tc
from longmedia.testing.tiny_h3 import TINY_DIMS

WIDTH, HEIGHT = 64, 64                     # 4x4 latent cells -> 4 packed rows per latent frame
STEPS, SEED = 2, 5
NORMAL = PlanRequest(memory_mode="normal", attention_mode="existing")


def three_segments():
    # 39-frame first pass, then 34 new frames behind 22 context frames (56-frame passes): 107 frames
    return plan_segments(total_frames=107, segment_seconds=39 / 24, context_frames=22)


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.model_patcher
    import comfy.patcher_extension
    import comfy.samplers
    import comfy.sd
    import comfy.utils
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.comfy.passes import sampler as comfy_sampler

    patcher = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    return {"samplers": comfy.samplers, "ncs": ncs, "h3n": h3n, "patcher": patcher, "core": comfy_sampler,
            "mp": comfy.model_patcher, "ext": comfy.patcher_extension, "utils": comfy.utils}


def make_job(env, frames, seed=SEED, positive_keyframes=None):
    samplers = env["samplers"]
    patcher = env["patcher"]
    positive = tc.random_conditioning(11, dims=TINY_DIMS, seed=1)
    if positive_keyframes:
        positive = [[positive[0][0], dict(positive[0][1], minimax_keyframes=positive_keyframes)]]
    guider = samplers.CFGGuider(patcher)
    guider.set_conds(positive, tc.random_conditioning(5, dims=TINY_DIMS, seed=2))
    guider.set_cfg(3.0)
    guider.model_options = env["mp"].create_model_options_clone(guider.model_options)  # wrappers stay local
    sigmas = samplers.calculate_sigmas(patcher.get_model_object("model_sampling"), "simple", STEPS).cpu()
    latent = env["h3n"].EmptyMiniMaxH3LatentAV.execute(WIDTH, HEIGHT, frames).result[0]
    return env["ncs"].Noise_RandomNoise(seed), guider, samplers.sampler_object("euler"), sigmas, latent


class Capture:
    """Records every pass (its noise seed, latent and output) and the H3 payload of every model call; `events` lists
    ("pass", index) as each pass starts and ("call", index) at each model call, in order (a `DeviceReadings` given
    the same list adds its reads)."""

    def __init__(self, env, monkeypatch, guider):
        self.passes, self.calls, self.events = [], [], []
        real = env["core"].run_sampler

        def run_sampler(noise, guider, sampler, sigmas, latent, request, device_profile=None, **kwargs):
            self.events.append(("pass", len(self.passes)))
            self.passes.append({"seed": noise.seed, "latent": [t.clone() for t in latent["samples"].unbind()]})
            result = real(noise, guider, sampler, sigmas, latent, request, device_profile, **kwargs)
            self.passes[-1]["output"] = [t.clone() for t in result.output["samples"].unbind()]
            return result

        def diffusion_model(executor, x, timestep, context, transformer_options, *args, **kwargs):
            payload = kwargs.get("minimax_payload") or {}
            self.events.append(("call", len(self.passes) - 1))
            self.calls.append({"segment": len(self.passes) - 1, "rows": context.shape[1],
                               "video": [z.clone() for z in payload.get("cond_video_latents", [])],
                               "audio": [z.clone() for z in payload.get("cond_audio_latents", [])],
                               "frames": [kf["resolved_frame_index"] for kf in payload.get("keyframes") or []],
                               "layout": list(payload["layout"].segments)})
            return executor(x, timestep, context, transformer_options, *args, **kwargs)

        monkeypatch.setattr(segmented.comfy_sampler, "run_sampler", run_sampler)
        env["ext"].add_wrapper_with_key(env["ext"].WrappersMP.DIFFUSION_MODEL, "test_capture", diffusion_model,
                                        guider.model_options, is_model_options=True)


@pytest.fixture(scope="module")
def captured(env):
    """One 3-pass job with a user guide on the last frame, recorded pass by pass."""
    plan = three_segments()
    g = torch.Generator().manual_seed(9)
    last = {"resolved_frame_index": plan.pixel_frames - 1, "latent": torch.randn(1, 24, 1, 4, 4, generator=g)}
    job = make_job(env, plan.pixel_frames, positive_keyframes=[last])
    progress = []
    mp = pytest.MonkeyPatch()
    hook = env["utils"].PROGRESS_BAR_HOOK
    try:
        cap = Capture(env, mp, job[1])
        mp.setattr(env["utils"], "PROGRESS_THROTTLE_MIN_INTERVAL", 0.0)   # every update reaches the hook
        env["utils"].set_progress_bar_global_hook(lambda value, total, preview, node_id=None:
                                                  progress.append((value, total)))
        readings = DeviceReadings(seed=21, events=cap.events)   # every read differs: each pass must show its own
        result = segmented.run_segmented(*job, NORMAL, plan, memory_reader=readings)
    finally:
        env["utils"].set_progress_bar_global_hook(hook)
        mp.undo()
    return {"plan": plan, "result": result, "cap": cap, "job": job, "progress": progress, "last": last,
            "readings": readings}


def test_three_passes_assemble_to_exactly_the_requested_latent(env, captured):
    plan, result = captured["plan"], captured["result"]
    video, audio = result.output["samples"].unbind()
    stock_v, stock_a = env["h3n"].EmptyMiniMaxH3LatentAV.execute(WIDTH, HEIGHT, 107).result[0]["samples"].unbind()
    assert plan.count == 3 and video.shape == stock_v.shape and audio.shape == stock_a.shape
    assert video.shape[2] == L.latent_frames(107) == 32 and audio.shape[-1] == round(107 / 24 * 40) == 178
    assert torch.isfinite(video).all() and torch.isfinite(audio).all()
    assert video.std() > 0.05 and audio.std() > 0.05
    dv, da = result.denoised["samples"].unbind()
    assert dv.shape == video.shape and da.shape == audio.shape and torch.isfinite(dv).all()
    # every pass got its slice of the job latent, and its new content is where the plan says
    for seg, p in zip(plan.segments, captured["cap"].passes):
        pv, pa = p["latent"]
        assert pv.shape[2] == seg.latent_frames and pa.shape[-1] == seg.audio_frames
        ov, oa = p["output"]
        (a, b), (c, d) = seg.video_latent_range, seg.audio_range
        assert torch.equal(video[:, :, a:b], ov[:, :, seg.new_latent_slice[0]:])
        assert torch.equal(audio[..., c:d], oa[..., seg.new_audio_slice[0]:])


def test_the_model_receives_the_previous_pass_final_latents_as_context(captured):
    plan, cap = captured["plan"], captured["cap"]
    for seg in plan.segments[1:]:
        prev_v, prev_a = cap.passes[seg.index - 1]["output"]
        want_v = prev_v[:, :, -seg.context_latent_frames:]
        want_a = prev_a[..., -seg.context_audio_frames:]
        calls = [c for c in cap.calls if c["segment"] == seg.index]
        assert len(calls) >= STEPS
        for call in calls:   # cond and uncond, every step
            assert call["frames"][0] == 0
            assert torch.allclose(call["video"][0].float(), want_v.float(), rtol=0, atol=1e-6)
            assert torch.allclose(call["audio"][0].float(), want_a.float(), rtol=0, atol=1e-6)
            kinds = {k: b - a for a, b, k in call["layout"]}
            assert kinds["video"] == seg.latent_frames * 4 and kinds["audio"] == seg.audio_frames * 2
            rows = [(b - a, k) for a, b, k in call["layout"]]
            assert (seg.context_latent_frames * 4, "cond") in rows and (seg.context_audio_frames * 2, "cond_audio") in rows
    first = [c for c in cap.calls if c["segment"] == 0]
    assert first and all(not c["audio"] for c in first)     # the first pass has no context
    assert {c["rows"] for c in first} == {11, 5}            # positive and negative both ran


def test_user_guides_move_to_their_pass(captured):
    plan, cap, last = captured["plan"], captured["cap"], captured["last"]
    seg = plan.segments[-1]
    pos = [c for c in cap.calls if c["segment"] == seg.index and c["rows"] == 11]
    neg = [c for c in cap.calls if c["segment"] == seg.index and c["rows"] == 5]
    assert pos and neg
    assert all(c["frames"] == [0, seg.pass_frames - 1] and torch.equal(c["video"][1], last["latent"]) for c in pos)
    assert all(c["frames"] == [0] for c in neg)
    assert all(c["frames"] == [] for c in cap.calls if c["segment"] == 0)
    assert any("segment 2: 1" in n for n in captured["result"].report.notes)


def test_seeds_differ_per_pass_and_the_report_lists_every_pass(captured):
    report = captured["result"].report
    assert [p["seed"] for p in captured["cap"].passes] == [SEED, SEED + 1, SEED + 2]
    assert [s.seed for s in report.segments] == [SEED, SEED + 1, SEED + 2]
    assert [s.index for s in report.segments] == [0, 1, 2]
    assert [s.video_latent_range for s in report.segments] == [(0, 12), (12, 22), (22, 32)]
    for s in report.segments:
        assert s.steps == STEPS and s.sample_seconds > 0 and s.seconds_per_step > 0
        assert len(s.run.steps) >= STEPS and s.run.plan.memory_mode == "normal"
    assert report.context_on == ("positive", "negative")
    data = json.loads(report.to_json())
    assert len(data["segments"]) == 3 and data["segment_plan"]["count"] == 3 and data["kind"] == "segmented_run"
    assert any(line.startswith("drift over segments 1..2") for line in report.summary_lines())


def test_the_boundary_ran_before_every_pass_with_its_own_snapshots(captured):
    """Every read of device memory differs (fresh random readings), so each pass must show the readings taken for
    it: its boundary's before and after, then its baseline after the model load, all before its first model call
    and after the previous pass's last one. The boundary's steps are the same for every pass."""
    report, reads, events = captured["result"].report, captured["readings"].reads, captured["cap"].events
    assert len(reads) == 3 * 3 and len(set(reads)) == 9          # three reads per pass, all different
    order = [e for i, e in enumerate(events) if i == 0 or e != events[i - 1]]   # runs of model calls as one
    assert order == [e for i in range(3) for e in (("pass", i), ("read", 3 * i), ("read", 3 * i + 1),
                                                    ("read", 3 * i + 2), ("call", i))], order
    for i, seg in enumerate(report.segments):
        assert len(seg.run.boundaries) == 1                          # exactly one boundary per pass
        assert seg.boundary[0] == f"before: {reads[3 * i]}" and seg.boundary[-1] == f"after: {reads[3 * i + 1]}"
        assert seg.baseline == reads[3 * i + 2]
        assert seg.boundary[1:-1] == report.segments[0].boundary[1:-1] and len(seg.boundary) > 2
    allocated = [reads[3 * i + 2].allocated_bytes for i in range(3)]
    assert report.baseline_spread_bytes == max(allocated) - min(allocated) > 0


def test_progress_runs_over_segments_times_steps(captured):
    """One bar for the whole job: every event counts against passes x steps and never goes back."""
    total = 3 * STEPS
    assert {t for _, t in captured["progress"]} == {total}, captured["progress"]
    overall = [v for v, _ in captured["progress"]]
    assert overall[-1] == total and overall == sorted(overall), overall
    assert set(range(1, total + 1)) <= set(overall)


def test_first_pass_equals_a_plain_run_of_its_length(env, captured):
    plan = captured["plan"]
    noise, guider, sampler, sigmas, _ = make_job(env, plan.pixel_frames)
    latent = env["h3n"].EmptyMiniMaxH3LatentAV.execute(WIDTH, HEIGHT, plan.segments[0].pass_frames).result[0]
    # the captured job had a last-frame guide that only the last pass sees: pass 0 is a plain t2va pass
    plain_v, plain_a = env["core"].run_sampler(noise, guider, sampler, sigmas, latent, NORMAL).output["samples"].unbind()
    ov, oa = captured["cap"].passes[0]["output"]
    assert torch.equal(plain_v, ov) and torch.equal(plain_a, oa)


def test_pinned_seed_and_streamed_passes(env, monkeypatch):
    plan = three_segments()
    noise, guider, sampler, sigmas, latent = make_job(env, plan.pixel_frames)
    cap = Capture(env, monkeypatch, guider)
    request = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64,
                          mlp_chunk_tokens=64)
    result = segmented.run_segmented(noise, guider, sampler, sigmas, latent, request, plan, seeds=(123,))
    assert [p["seed"] for p in cap.passes] == [123, SEED + 1, SEED + 2]
    report = result.report
    assert all(s.run.streamed_blocks == tuple(range(TINY_DIMS.num_blocks)) for s in report.segments)
    video, audio = result.output["samples"].unbind()
    assert video.shape[2] == 32 and audio.shape[-1] == 178 and torch.isfinite(video).all()


def test_bad_input_is_refused_before_any_sampling(env, monkeypatch):
    plan = three_segments()
    noise, guider, sampler, sigmas, latent = make_job(env, plan.pixel_frames)

    def never(*args, **kwargs):
        raise AssertionError("sampling started")

    monkeypatch.setattr(segmented.comfy_sampler, "run_sampler", never)
    short = make_job(env, 90)[4]
    with pytest.raises(LongMediaInputError) as info:
        segmented.run_segmented(noise, guider, sampler, sigmas, short, NORMAL, plan)
    assert info.value.input_name == "latent"
    assert "the job's 107 frames (32 video / 178 audio latent frames)" in str(info.value)  # preflight's one check
    masked = dict(latent, noise_mask=torch.ones(1, 1, 32, 4, 4))
    with pytest.raises(LongMediaInputError, match="noise_mask"):
        segmented.run_segmented(noise, guider, sampler, sigmas, masked, NORMAL, plan)
    with pytest.raises(LongMediaInputError, match="sigmas"):
        segmented.run_segmented(noise, guider, sampler, torch.tensor([0.5, 0.9, 0.0]), latent, NORMAL, plan)
    with pytest.raises(LongMediaInputError, match="plan"):
        segmented.run_segmented(noise, guider, sampler, sigmas, latent, NORMAL, {"segments": 3})
    with pytest.raises(LongMediaInputError, match="seeds"):
        segmented.run_segmented(noise, guider, sampler, sigmas, latent, NORMAL, plan, seeds=(1, 2, 3, 4))
    bad_guide = make_job(env, plan.pixel_frames, positive_keyframes=[
        {"resolved_frame_index": 30, "latent": torch.randn(1, 24, 7, 4, 4)}])[1]   # 22 frames over the first seam
    with pytest.raises(LongMediaInputError, match=r"minimax_keyframes\[0\]"):
        segmented.run_segmented(noise, bad_guide, sampler, sigmas, latent, NORMAL, plan)


# --- through the API: a LongMedia Sampler fed a LONGMEDIA_JOB -------------------------------------------

JOB_NODE = '''"""Test-only: a LONGMEDIA_JOB for a segmented job, built from frame counts (written by test_segmented.py)."""


def _longmedia():  # the server has this checkout on PYTHONPATH (harness.server_env)
    from longmedia.job.geometry import build_geometry
    from longmedia.job.job import LongMediaJob
    from longmedia.segments.timeline import plan_segments
    return build_geometry, LongMediaJob, plan_segments


class LongMediaTestSegmentJob:
    CATEGORY = "longmedia/testing"
    RETURN_TYPES = ("LONGMEDIA_JOB",)
    FUNCTION = "build"

    @classmethod
    def INPUT_TYPES(cls):
        whole = {"default": 0, "min": 0, "max": 100000}
        return {"required": {"width": ("INT", whole), "height": ("INT", whole), "total_frames": ("INT", whole),
                             "segment_frames": ("INT", whole), "context_frames": ("INT", whole)}}

    def build(self, width, height, total_frames, segment_frames, context_frames):
        build_geometry, LongMediaJob, plan_segments = _longmedia()
        seconds = segment_frames / 24
        plan = plan_segments(total_frames=total_frames, segment_seconds=seconds, context_frames=context_frames)
        geometry = build_geometry(width, height, frames=total_frames, segment_seconds=seconds,
                                  context_frames=context_frames)
        return (LongMediaJob(geometry=geometry, segments=plan),)


NODE_CLASS_MAPPINGS = {"LongMediaTestSegmentJob": LongMediaTestSegmentJob}
'''


@pytest.fixture(scope="module")
def job_server(comfyui_root, tmp_path_factory):
    """A server with the pack, the test nodes and a node that makes segmented LONGMEDIA_JOBs."""
    import harness

    base = harness.prepare_base_directory(tmp_path_factory.mktemp("segmented_base"), variants=("fp32",))
    pack = base / "custom_nodes" / "longmedia_segment_job"
    pack.mkdir()
    (pack / "__init__.py").write_text(JOB_NODE)
    server = harness.start_server(comfyui_root, base)
    try:
        yield server
    finally:
        server.stop()


def test_three_segment_job_through_the_api(job_server):
    from harness import t2va_prompt
    from safetensors.torch import load_file

    seed = 42
    prompt = t2va_prompt("tiny_h3_fp32.safetensors", "segmented.safetensors", width=WIDTH, height=HEIGHT,
                         length=107, steps=STEPS, seed=seed, text_dim=TINY_DIMS.text_dim)
    inputs = dict(prompt["sample"]["inputs"])
    inputs["latent"] = inputs.pop("latent_image")
    inputs.update(job=["job", 0], memory_mode="normal", attention_mode="existing")
    prompt["sample"] = {"class_type": "LongMediaSampler", "inputs": inputs}
    prompt["job"] = {"class_type": "LongMediaTestSegmentJob",
                     "inputs": {"width": WIDTH, "height": HEIGHT, "total_frames": 107, "segment_frames": 39,
                                "context_frames": 22}}
    entry = job_server.run(prompt, timeout=300)
    # the first pass alone, through the stock sampler: 39 frames, the same seed
    job_server.run(t2va_prompt("tiny_h3_fp32.safetensors", "first.safetensors", width=WIDTH, height=HEIGHT,
                               length=39, steps=STEPS, seed=seed, text_dim=TINY_DIMS.text_dim), timeout=300)
    out = load_file(str(job_server.output_path("segmented.safetensors")))
    first = load_file(str(job_server.output_path("first.safetensors")))
    assert tuple(out["video"].shape) == (1, 24, 32, 4, 4) and tuple(out["audio"].shape) == (1, 32, 2, 178)
    assert torch.isfinite(out["video"]).all() and out["video"].std() > 0.05 and out["audio"].std() > 0.05
    assert torch.equal(out["video"][:, :, :12], first["video"]) and torch.equal(out["audio"][..., :65], first["audio"])
    report = entry["outputs"]["sample"]["longmedia_report"][0]
    segs = report["segments"]
    assert [s["index"] for s in segs] == [0, 1, 2] and [s["seed"] for s in segs] == [seed, seed + 1, seed + 2]
    assert [s["video_latent_range"] for s in segs] == [[0, 12], [12, 22], [22, 32]]
    assert all(len(s["run"]["boundaries"]) == 1 for s in segs)
    assert segs[0]["boundary"] == segs[1]["boundary"] == segs[2]["boundary"]
    assert any(line.startswith("segment 2: seed 44") for line in report["summary"])


def test_every_pass_is_planned_before_the_run(captured):
    report = captured["result"].report
    forecast = report.to_dict()["segment_plan"]["forecast"]
    assert [f.index for f in report.forecast] == [0, 1, 2]
    assert [f["index"] for f in forecast] == [0, 1, 2]
    actual = [s.run.plan.geometry.seq_len for s in report.segments]
    # passes 0 and 1 carry no user guide: the forecast is their exact packed length (context guide included)
    assert [f["seq_len"] for f in forecast[:2]] == actual[:2] and forecast[1]["context_frames"] > 0
    assert forecast[2]["seq_len"] < actual[2]  # the user's last-frame guide lands in pass 2 and is not forecast
    assert all(f["predicted_peak_bytes"] > 0 and f["memory_mode"] == "normal" for f in forecast)
    assert all("packed rows" in f["line"] for f in forecast)
