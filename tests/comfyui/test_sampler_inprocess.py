"""LongMedia's sampler core against ComfyUI's SamplerCustomAdvanced, in-process on the tiny checkpoints (its OOM
and NaN reports: test_sampler_failure_reports.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from harness import run_longmedia, sampler_job

from longmedia.errors import LongMediaInputError
from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import TINY_DIMS


def stock(sampler_env, *args):
    out = sampler_env["ncs"].SamplerCustomAdvanced.execute(*args).result
    return out[0]["samples"].unbind(), out[1]["samples"].unbind()


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_normal_existing_equals_stock_bit_for_bit(sampler_env, variant):
    (sv, sa), (dv, da) = stock(sampler_env, *sampler_job(sampler_env, variant))
    (ov, oa), (odv, oda), result = run_longmedia(sampler_env,
                                                 PlanRequest(memory_mode="normal", attention_mode="existing"),
                                                 *sampler_job(sampler_env, variant))
    assert torch.isfinite(sv).all() and sv.std() > 0.05
    assert torch.equal(ov, sv) and torch.equal(oa, sa)
    assert torch.equal(odv, dv) and torch.equal(oda, da)
    report = result.report
    assert report.streamed_blocks == () and len(report.steps) >= 2 and report.boundaries
    json.loads(report.to_json())


@pytest.mark.parametrize("variant", ["fp32", "int8"])
@pytest.mark.parametrize("mode,chunks", [("low_vram", dict(sol_qkv_chunk_tokens=64, mlp_chunk_tokens=96)),
                                         ("ultra_low_vram", dict(sol_qkv_chunk_tokens=64, sol_out_proj_chunk_tokens=64,
                                                                 mlp_chunk_tokens=64))])
def test_streamed_modes_match_stock(sampler_env, variant, mode, chunks):
    (sv, sa), _ = stock(sampler_env, *sampler_job(sampler_env, variant))
    (ov, oa), _, result = run_longmedia(sampler_env, PlanRequest(memory_mode=mode, attention_mode="existing", **chunks),
                                        *sampler_job(sampler_env, variant))
    plan = result.plan
    assert plan.memory_mode == mode and plan.chunks.qkv_chunk_tokens == 64
    assert result.report.streamed_blocks == tuple(range(TINY_DIMS.num_blocks))
    if plan.chunks.heads_per_group == 0:
        # all heads at once: every Linear sees whole rows (INT8 tensorwise: one weight scale, per-row activation
        # scales, so row chunks quantise exactly as stock), and row-chunked attention is exact: bit for bit
        assert torch.equal(ov, sv) and torch.equal(oa, sa)
    else:
        # head groups: out-proj runs as partial products over column slices of its input, summed. fp32 only
        # rounds differently (16 seeds: rel <= 6.1e-7); INT8 also quantises each slice's activations with that
        # slice's own per-row scale, which is different arithmetic (16 seeds: rel 7.5e-3..8.2e-3). Bounds: the
        # measured max and a margin.
        tol = 1e-6 if variant == "fp32" else 1e-2
        assert 0 < rel(ov, sv) <= tol and 0 < rel(oa, sa) <= tol


def _plan_json(plan) -> dict:
    """The plan as JSON, less this machine's available RAM (a live reading other processes move, not the fake
    device's), the pinning headroom and reason that quote it and the host-RAM plan it drives; everything device
    memory drives stays in."""
    out = json.loads(json.dumps(plan.to_dict(), sort_keys=True, default=str))
    del out["device"]["ram_available_bytes"], out["pinning"]["ram_headroom_bytes"], out["pinning"]["reason"]
    del out["host_ram"]     # the host-RAM plan: the pins and the disk follow the live available RAM
    return out


def test_seed_only_reruns_give_identical_plans_and_boundaries(sampler_env):
    """Three seed-only reruns, each starting from different leftovers (the boundary reads a different `before`)
    and each left by the boundary in the same released state (the same `after`): every run records its own
    readings, and the three plans are identical and planned from the `after` reading. A fourth run whose boundary
    leaves less memory free plans from that reading, and still gives run 1's result (only memory differs)."""
    from harness import DeviceReadings

    readings = DeviceReadings(seed=11)
    released = readings.snapshot()
    befores = [readings.snapshot() for _ in range(3)]
    assert len({*befores, released}) == 4                       # every reading differs
    request = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64)
    runs = []
    for seed, before in zip((1, 2, 3), befores):
        readings.script(before, released)
        runs.append(run_longmedia(sampler_env, request, *sampler_job(sampler_env, seed=seed), memory_reader=readings)[2])
    assert readings.reads == [befores[0], released, befores[1], released, befores[2], released]  # 1 boundary/run
    for result, before in zip(runs, befores):
        (lines,) = result.report.boundaries
        assert lines[0] == f"before: {before}" and lines[-1] == f"after: {released}"
        device = result.report.plan.device
        assert (device.vram_total_bytes, device.vram_free_bytes, device.allocator_reserved_bytes) == (
            released.total_bytes, released.free_bytes, released.cached_bytes)
    assert runs[0].report.boundaries != runs[1].report.boundaries != runs[2].report.boundaries
    assert len({r.report.boundaries[0][1:-1] for r in runs}) == 1   # the same steps, in the same order
    plans = [_plan_json(r.report.plan) for r in runs]
    assert plans[0] == plans[1] == plans[2]
    outs = [r.output["samples"].unbind()[0] for r in runs]
    assert not torch.equal(outs[0], outs[1])  # the seed still matters

    tighter = readings.snapshot(free=released.free_bytes // 2)
    readings.script(readings.snapshot(), tighter)
    fourth = run_longmedia(sampler_env, request, *sampler_job(sampler_env, seed=1), memory_reader=readings)[2]
    assert fourth.report.plan.device.vram_free_bytes == tighter.free_bytes
    assert _plan_json(fourth.report.plan) != plans[0]
    assert torch.equal(fourth.output["samples"].unbind()[0], outs[0])


def test_seed_only_reruns_plan_from_memory_measured_after_the_boundary(sampler_env, monkeypatch):
    """A fake device whose free memory is what an earlier run left behind until the residency boundary
    releases it: the plan must read the device after the boundary, so every seed-only rerun (each starting
    from leftovers) plans from the same released state. Before, the first run and the reruns differed."""
    from longmedia.comfy.passes import sampler as core
    from longmedia.h3.profiles import DeviceProfile
    from longmedia.units import GIB
    card = DeviceProfile.card(vram_gb=16, ram_gb=64)
    state = {"free": card.vram_free_bytes}
    real_boundary = core.residency_boundary

    def boundary(**kwargs):
        state["free"] = card.vram_free_bytes  # the boundary releases what the previous run left
        return real_boundary(**kwargs)

    monkeypatch.setattr(core, "residency_boundary", boundary)

    def probe():
        return dataclasses.replace(card, vram_free_bytes=state["free"])
    request = PlanRequest(memory_mode="auto", attention_mode="existing")
    plans = []
    for seed in (1, 2, 3):
        result = run_longmedia(sampler_env, request, *sampler_job(sampler_env, seed=seed), device_profile=probe)[2]
        plans.append(json.dumps(result.report.plan, sort_keys=True, default=str))
        state["free"] = card.vram_free_bytes - 5 * GIB  # leftovers of this run, until the next boundary
    assert plans[0] == plans[1] == plans[2]


def test_bad_inputs_are_rejected_before_sampling(sampler_env):
    noise, guider, sampler, sigmas, latent = sampler_job(sampler_env)
    core = sampler_env["core"]
    with pytest.raises(LongMediaInputError, match="sigmas"):
        core.run_sampler(noise, guider, sampler, torch.tensor([1.0, float("nan"), 0.0]), latent, PlanRequest())
    with pytest.raises(LongMediaInputError, match="sigmas"):
        core.run_sampler(noise, guider, sampler, torch.tensor([0.5, 0.9, 0.0]), latent, PlanRequest())
    with pytest.raises(LongMediaInputError, match="latent"):
        core.run_sampler(noise, guider, sampler, sigmas, {"samples": torch.zeros(1, 16, 4, 8, 8)}, PlanRequest())
    with pytest.raises(LongMediaInputError, match="mlp_chunk_tokens"):
        PlanRequest(mlp_chunk_tokens=-4)

    class NotH3:
        model_patcher = type("P", (), {"model": type("M", (), {"diffusion_model": torch.nn.Linear(2, 2)})()})()

    with pytest.raises(LongMediaInputError, match="guider"):
        core.run_sampler(noise, NotH3(), sampler, sigmas, latent, PlanRequest())


def test_streamed_run_leaves_the_model_as_it_was(sampler_env):
    (first_v, first_a), _ = stock(sampler_env, *sampler_job(sampler_env))
    run_longmedia(sampler_env, PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64),
                  *sampler_job(sampler_env))
    # loading the stock patcher unpatches our clone
    (again_v, again_a), _ = stock(sampler_env, *sampler_job(sampler_env))
    final_layer = sampler_env["models"]["fp32"].model.diffusion_model.final_layer
    assert getattr(final_layer.forward, "__func__", None) is type(final_layer).forward  # object patch undone
    assert torch.equal(again_v, first_v) and torch.equal(again_a, first_a)


def test_rejected_pinning_is_refused_on_the_clone_only(sampler_env):
    from longmedia.comfy.patching.clone_install import _refuse_pinning

    patcher = sampler_env["models"]["fp32"]
    clone = patcher.clone()
    note = _refuse_pinning(clone)
    assert "RAM pinning refused" in note
    assert clone.pin_weight_to_device("diffusion_model.blocks.0.mlp.fc1.weight") is None and not clone.pinned
    assert patcher.pin_weight_to_device.__func__ is type(patcher).pin_weight_to_device  # the user's patcher untouched


@pytest.mark.parametrize("dynamic_vram", [False, True], ids=["plan_off", "left_to_comfyui"])
def test_block_prefetch_is_turned_off_only_where_the_plan_says_so(sampler_env, prefetch_seen, dynamic_vram):
    """A plan without prefetch sets `prefetch_dynamic_vbars` False inside the model call (the only place it is
    honoured); a plan whose weights all stay resident leaves ComfyUI's own value, as stock runs."""
    import comfy.patcher_extension as ext

    from longmedia.h3.profiles import DeviceProfile

    noise, guider, sampler, sigmas, latent = sampler_job(sampler_env)
    prefetch_seen.mark_dynamic(guider.model_options)
    try:
        result = sampler_env["core"].run_sampler(noise, guider, sampler, sigmas, latent,
                                                 PlanRequest(memory_mode="low_vram", sol_qkv_chunk_tokens=64),
                                                 device_profile=DeviceProfile.card(vram_gb=16, ram_gb=64,
                                                                                   dynamic_vram=dynamic_vram))
    finally:
        guider.model_options["transformer_options"]["wrappers"][ext.WrappersMP.DIFFUSION_MODEL].pop("test_outer")
    assert result.plan.prefetch is dynamic_vram and prefetch_seen
    assert all(v is dynamic_vram for v in prefetch_seen)
    reason = next(r for r in result.plan.reasons if "prefetch" in r)
    assert ("left as ComfyUI runs it" in reason) if dynamic_vram else ("needs dynamic VRAM" in reason)


def _spy_sol_calls(monkeypatch):
    """Every AttentionFn the run builds, wrapped to record (the row spans it was built with, keys it got)."""
    from longmedia.attention import choice as attention_choice
    from longmedia.comfy.patching import attention_override as override

    seen, real = [], attention_choice.build_attention_fn

    def spy(choice, **kwargs):
        fn, table = real(choice, **kwargs), kwargs.get("row_spans")

        def call(q, k, v, *, q_offset=0):
            seen.append((table, int(k.shape[2])))
            return fn(q, k, v, q_offset=q_offset)
        return call

    monkeypatch.setattr(attention_choice, "build_attention_fn", spy)
    monkeypatch.setattr(override, "build_attention_fn", spy)
    return seen


@pytest.mark.parametrize("mode,chunks", [("normal", {}), ("low_vram", {"sol_qkv_chunk_tokens": 64})])
def test_sol_runs_under_inference_mode_with_each_prompt_own_segment_table(sampler_env, monkeypatch, mode, chunks):
    """Sol (the reference backend on CPU, through the same summary memo as the kernel) inside
    torch.inference_mode(), unstreamed (our attention override) and streamed (block replacements). The
    negative prompt (5 text rows) gets its own packed table, not the positive's (11 rows): the streamed
    path used to hand every call the positive's table, so the uncond call's sinks sat 6 rows off."""
    from longmedia.attention.schedule import SolSettings

    assert torch.is_inference_mode_enabled()
    seen = _spy_sol_calls(monkeypatch)
    (sv, sa), _ = stock(sampler_env, *sampler_job(sampler_env))
    request = PlanRequest(memory_mode=mode, attention_mode="sol", sol=SolSettings(min_tokens=0), **chunks)
    (ov, oa), _, result = run_longmedia(sampler_env, request, *sampler_job(sampler_env))
    assert result.plan.attention.backend == "sol_reference"
    assert seen and all(table is not None and table[-1][1] == keys for table, keys in seen)
    lengths = sorted({keys for _, keys in seen})
    assert len(lengths) == 2 and lengths[1] - lengths[0] == 11 - 5  # the cond and the uncond call
    texts = {keys: table[0] for table, keys in seen}
    assert texts[lengths[0]] == (0, 5, "text") and texts[lengths[1]] == (0, 11, "text")
    assert torch.isfinite(ov).all() and torch.isfinite(oa).all()
    # Sol against stock (exact attention), measured over noise seeds 0..15 (tiny fp32, 2 steps, both modes equal):
    # video rel 0.00535..0.00770, audio 0.0145..0.0189. Bounds: a fifth over the max, half of the min (exact
    # attention, or Sol skipping other blocks, leaves this band)
    assert 0.0027 < rel(ov, sv) < 0.0093 and 0.0072 < rel(oa, sa) < 0.023


def test_block_guard_controls_in_normal_mode_are_reported_and_the_run_stays_exact(sampler_env):
    """A manual block guard in normal mode cannot act (no block is streamed): the run report says so, and the
    run is still stock bit for bit."""
    (sv, sa), _ = stock(sampler_env, *sampler_job(sampler_env))
    request = PlanRequest(memory_mode="normal", attention_mode="existing", late_block_guard_target_mb=3000)
    (ov, oa), _, result = run_longmedia(sampler_env, request, *sampler_job(sampler_env))
    assert torch.equal(ov, sv) and torch.equal(oa, sa)
    assert any(n.startswith("late_block_guard_target_mb=3000 has no effect in normal mode") for n in result.report.notes)


@pytest.mark.parametrize("profile", ["measured", "probe", "fixed"])
def test_the_planner_runs_once_per_pass_after_the_boundary(sampler_env, monkeypatch, profile):
    """One pass, one plan: planned after the residency boundary from the memory it leaves (a fixed card's plan
    is final, so it is planned once before the boundary and refused there if it cannot run)."""
    from longmedia.comfy.passes import pass_plan
    from longmedia.comfy.passes import sampler as core
    from longmedia.h3.profiles import DeviceProfile
    card = DeviceProfile.card(vram_gb=16, ram_gb=64)
    order = []
    real_plan, real_boundary = pass_plan.make_plan, core.residency_boundary

    def counted_plan(*args, **kwargs):
        order.append("plan")
        return real_plan(*args, **kwargs)

    def boundary(**kwargs):
        order.append("boundary")
        assert kwargs["memory_required"] > 0
        return real_boundary(**kwargs)

    monkeypatch.setattr(pass_plan, "make_plan", counted_plan)
    monkeypatch.setattr(core, "residency_boundary", boundary)
    device_profile = {"measured": None, "probe": lambda: card, "fixed": card}[profile]
    request = PlanRequest(memory_mode="auto", attention_mode="existing")
    result = run_longmedia(sampler_env, request, *sampler_job(sampler_env), device_profile=device_profile)[2]
    assert order == (["plan", "boundary"] if profile == "fixed" else ["boundary", "plan"])
    assert result.report.plan.memory_mode in ("normal", "low_vram", "ultra_low_vram")
