"""The card bench's extras on the CPU: the bench sampler's injected OOM per phase, its interrupt and its
segmented path, on the tiny checkpoint in-process (what the GPU run does through the PromptExecutor)."""

from __future__ import annotations

import ast
import json

import pytest
import torch
from harness import tiny_sampler_job

from bench.cards import checks, faults, nodes, probes
from longmedia.report.oom import LongMediaOOM

WIDTH, HEIGHT = 128, 96


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    return {"samplers": comfy.samplers, "ncs": ncs, "h3n": h3n,
            "model": comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))}


def job(env, frames=39, seed=3, steps=2):
    return tiny_sampler_job(env["model"], width=WIDTH, height=HEIGHT, frames=frames, seed=seed, steps=steps)


def sample(env, mode="normal", frames=39, **inputs):
    with torch.inference_mode():
        return nodes.sample(*job(env, frames), mode, "existing", None, **inputs)


def comfy_message(error: BaseException) -> str:
    """The bench's error text for a node exception: ComfyUI's exception_type and exception_message (with its tip)."""
    return f"{type(error).__module__}.{type(error).__qualname__}: {error}\nThis error means you ran out of memory"


@pytest.mark.parametrize("mode", ["normal", "low_vram"])
@pytest.mark.parametrize("phase", faults.PHASES)
def test_each_injected_oom_is_reported_in_its_phase_with_its_advice(env, mode, phase):
    with pytest.raises(LongMediaOOM) as info:
        sample(env, mode, inject_oom=phase)
    row = {"result": "OOM", "error_full": comfy_message(info.value)}
    out = checks.check_oom(row, phase, mode != "normal", memory_back=True)
    assert out["check"] == "pass", out["detail"]
    result = sample(env, mode)  # the injection is gone: the same job completes
    assert torch.isfinite(result.output["samples"].unbind()[0]).all()


def test_the_interrupt_cancels_mid_step_1_and_the_rerun_equals_a_fresh_run(env):
    import comfy.model_management as mm

    fresh = sample(env).output["samples"].unbind()[0].clone()
    with pytest.raises(mm.InterruptProcessingException):
        sample(env, interrupt_after_calls=5)
    assert not mm.processing_interrupted()  # the flag was consumed; nothing cancels the next prompt
    rerun = sample(env).output["samples"].unbind()[0]
    assert torch.equal(rerun, fresh)


def test_interrupt_counts_only_the_checks_under_it():
    import comfy.model_management as mm

    trigger = faults.InterruptAfter(3)
    with trigger.armed():
        mm.throw_exception_if_processing_interrupted()
        mm.throw_exception_if_processing_interrupted()
        with pytest.raises(mm.InterruptProcessingException):
            mm.throw_exception_if_processing_interrupted()
    assert trigger.fired and trigger.seen == 3
    mm.throw_exception_if_processing_interrupted()  # restored: no flag, no wrapper


def test_the_segmented_path_runs_three_passes_and_its_check_reads_them(env):
    # 56 frames as 22-frame segments with 5 context frames: passes of 22, 22 and 22 frames (Setup's plan)
    result = sample(env, frames=56, job_seconds=56 / 24, segment_seconds=22 / 24, context_frames=5)
    report = json.loads(result.report.to_json())
    passes = checks.segment_summary(report)
    assert [p["pass_frames"] for p in passes] == [22, 22, 22]
    assert [p["context_frames"] for p in passes] == [0, 5, 5]
    assert all(p["seconds_per_step"] > 0 and len(p["call_seconds"]) >= 2 for p in passes)
    out = checks.check_segmented({"result": "ok", "segments": passes})
    assert out["check"] in ("pass", "fail") and "ratio 3:1" in out["detail"]


def test_an_unknown_phase_is_refused(env):
    with pytest.raises(ValueError, match="phase must be one of"):
        faults.inject_oom("vae", env["model"].model.diffusion_model)


def test_the_prefetch_off_control_turns_prefetch_off_in_a_copy_of_the_guider(env, prefetch_seen):
    """The `longmedia_prefetch_off` rows: every model call sees `prefetch_dynamic_vbars` False although the
    host set it True, the output equals the plain run's, and the user's guider keeps its own wrappers."""
    import comfy.patcher_extension as ext

    from longmedia.h3.profiles import DeviceProfile

    outputs = {}
    for off in (False, True):
        noise, guider, sampler, sigmas, latent = job(env)
        prefetch_seen.mark_dynamic(guider.model_options)
        before = dict(guider.model_options["transformer_options"]["wrappers"][ext.WrappersMP.DIFFUSION_MODEL])
        prefetch_seen.clear()
        with torch.inference_mode():
            outputs[off] = nodes.sample(noise, guider, sampler, sigmas, latent, "normal", "existing",
                                               DeviceProfile.card(vram_gb=16, ram_gb=64),  # dynamic VRAM
                                               prefetch_off=off).output["samples"]
        assert prefetch_seen and all(v is (not off) for v in prefetch_seen), list(prefetch_seen)
        assert guider.model_options["transformer_options"]["wrappers"][ext.WrappersMP.DIFFUSION_MODEL] == before
    assert all(torch.equal(a, b) for a, b in zip(outputs[False].unbind(), outputs[True].unbind(), strict=True))


def test_the_nan_probe_checks_every_stage_and_names_the_first_non_finite_one(env, capsys):
    from longmedia.execution import final_layer, streamed_block

    real, real_final = streamed_block._Run.streamed_mlp, final_layer.chunked_final_forward
    sample(env, "low_vram", nan_probe=True)
    quiet = capsys.readouterr().err
    assert streamed_block._Run.streamed_mlp is real and final_layer.chunked_final_forward is real_final  # gone after
    assert "non-finite seen: False" in quiet and "NAN PROBE: stage" not in quiet
    calls = int(quiet.split("NAN PROBE: ")[1].split()[0])
    assert calls >= 2 * 2  # two stages per block call, at least two block calls

    def poisoned(self):  # a stage that writes NaN into the packed sequence
        real(self)
        self.x[0, 0] = float("nan")

    streamed_block._Run.streamed_mlp = poisoned  # the test's own fault; the bench patches nothing
    try:
        sample(env, "low_vram", nan_probe=True)
    finally:
        streamed_block._Run.streamed_mlp = real
    loud = capsys.readouterr().err
    assert "NAN PROBE: phase streamed_mlp call 2: input finite True, output finite False" in loud
    assert "NAN PROBE: final layer call 1: input finite False" in loud


@pytest.mark.parametrize("weights", ["unordered", "sync_release", "owned"])
def test_the_weight_access_controls_change_the_run_only_and_not_its_output(env, capsys, weights):
    from longmedia.comfy.patching import block_patch

    real = block_patch.comfy_weights
    with torch.inference_mode():
        plain = nodes.sample(*job(env), "low_vram", "existing", None).output["samples"]
        changed = nodes.sample(*job(env), "low_vram", "existing", None, nan_probe=True,
                               weights=weights).output["samples"]
    assert block_patch.comfy_weights is real
    assert all(torch.equal(a, b) for a, b in zip(plain.unbind(), changed.unbind()))  # same weights, same output
    probe = capsys.readouterr().err
    line = next(x for x in probe.splitlines() if x.startswith("WEIGHT PROBE: {"))
    counts = ast.literal_eval(line.removeprefix("WEIGHT PROBE: "))  # the probe prints a dict of counts
    assert counts["resident"] > 0 and counts["cast_buffer"] == counts["shared_stream"] == 0  # CPU: nothing offloaded


def test_an_unknown_weight_access_is_refused(env):
    with pytest.raises(ValueError, match="weights must be"):
        nodes.sample(*job(env), "low_vram", "existing", None, weights="pinned")


@pytest.mark.parametrize("mode,waits", [("", 1), ("sync_release", 1), ("owned", 1), ("unordered", 0)])
def test_the_probe_s_access_orders_streams_as_the_product_unless_unordered(env, monkeypatch, mode, waits):
    import comfy.model_management as mm
    import comfy.ops as ops

    from longmedia.execution.probes import WeightOriginProbe

    log: list = []

    class Stream:
        def wait_stream(self, other):
            log.append(other)

    class Context:  # a weight handed out from a cast buffer: (weight, bias, (stream, no device, None))
        def __init__(self, module, like, offloadable=False):
            self.state = (module.weight, None, (Stream(), None, None))

        def __enter__(self):
            return self.state[:2]

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(ops, "CastBiasWeightContext", Context)
    monkeypatch.setattr(mm, "current_stream", lambda device: "compute")
    seen = WeightOriginProbe()
    with probes.weight_access(mode, seen)(torch.nn.Linear(3, 3), torch.randn(2, 3)) as (weight, _):
        assert weight.shape == (3, 3)
    assert log == ["compute"] * waits
    assert seen.counts["cast_buffer"] == 1 and seen.counts["resident"] == 0  # the product's probe saw it
