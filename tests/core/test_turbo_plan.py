"""Turbo runs: model calls per step from cfg, few-step schedules through every pass, scheduled_sol's Sol steps and
the LoRA patches' bytes, in the whole-job plan, the CLI, the Sampler's report and its pass plan."""

from __future__ import annotations

import json
import struct
import types

import pytest

from longmedia.cli import main
from longmedia.h3.dims import H3_FULL
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning import stage_times as T
from longmedia.planning.patches import PatchBytes, block_linears, lora_block_params
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest
from longmedia.planning.whole_job import plan_job

SIXTY = ["--seconds", "60", "--segment-seconds", "10"]


def _job(steps=20, cfg=1.0, attention="auto", patches=None, device=None, **kw):
    """The job's plans as the CLI makes them: the patches' RAM in the pass's request, their VRAM held on the card."""
    g = build_geometry(1344, 768, seconds=10.0)
    held = patches if patches is not None else PatchBytes()
    request = PlanRequest(attention_mode=attention, patch_host_bytes=held.host_bytes)
    device = DeviceProfile.card(16, 64) if device is None else device
    p = plan(ModelProfile.preset("h3-int8"), held.on_device(device), g, request)
    return plan_job(p, steps=steps, cfg=cfg, patches=patches, request=request, **kw)


def _stage(job, name="DiT main pass"):
    return next(s for s in job.stages if s.name == name)


def test_cfg_above_one_plans_two_model_calls_per_step():
    one, two = _stage(_job(cfg=1.0)), _stage(_job(cfg=3.5))
    assert two.seconds == pytest.approx(2 * one.seconds)
    assert "cfg 1: 1 model call per step" in one.detail and "cfg 3.5: 2 model calls per step" in two.detail
    assert T.calls_per_step(1.0) == 1 and T.calls_per_step(1.0 + 1e-12) == 1 and T.calls_per_step(0.0) == 2


def test_eight_steps_at_cfg_one_cost_eight_twentieths_of_twenty():
    assert _stage(_job(steps=8)).seconds == pytest.approx(_stage(_job(steps=20)).seconds * 8 / 20)


@pytest.mark.parametrize("steps", [4, 8])
def test_few_steps_run_through_hires_and_refiner(steps, capsys):
    """4- and 8-step schedules with segments, Hi-Res (half the steps at denoise 0.5) and the Refiner."""
    code = main(["plan", *SIXTY, "--steps", str(steps), "--hires-scale", "1.25", "--hires-steps",
                 str(steps // 2), "--refiner-steps", "2", "--json"])
    job = json.loads(capsys.readouterr().out)["whole_job"]
    assert code == 0
    names = [s["name"] for s in job["stages"]]
    assert names[1:4] == ["DiT main pass", "DiT Hi-Res pass", "DiT Refiner pass"]
    assert f"{steps} steps x 7 passes" in job["stages"][1]["detail"]


def test_scheduled_sol_runs_sol_after_its_exact_phase_and_costs_less():
    exact, sol = _stage(_job(steps=8)), _stage(_job(steps=8, attention="scheduled_sol"))
    assert "6 of the 8 steps run Sol" in sol.detail and "run Sol" not in exact.detail
    assert 0.5 * exact.seconds < sol.seconds < exact.seconds
    assert 0 < T.sol_quadratic_kept() < 1


def test_sol_share_reproduces_its_measured_schedule():
    """The fitted share gives back the measured Sol step (15.85 s against 32.8 s exact at S = 109318)."""
    s, exact, average, n_exact, steps = T.SOL_BASIS
    card = T.card_class(80 * 2**30)
    ratio = T.dit_step_seconds(s, 2, card, sol=True) / T.dit_step_seconds(s, 2, card)
    assert ratio * exact == pytest.approx((average * steps - exact * n_exact) / (steps - n_exact))


def test_lora_rank_counts_r_times_in_plus_out_per_linear():
    h, i, f = H3_FULL.hidden, H3_FULL.inner, H3_FULL.ffn
    assert lora_block_params(64) == 64 * ((h + 3 * i) + (i + h) + (h + 2 * f) + (f + h))
    p = PatchBytes.from_rank(64, count=2)
    assert p.host_bytes == 2 * 2 * lora_block_params(64) * H3_FULL.num_blocks
    assert p.vram_bytes() == p.block_bytes + max(o * k for o, k in block_linears()) * 4
    assert not PatchBytes.from_rank(0).present and PatchBytes.from_rank(0).vram_bytes() == 0


def test_lora_adds_to_every_dit_stage_ram():
    patches = PatchBytes.from_rank(128)
    bare, lora = _job(refiner_steps=4), _job(refiner_steps=4, patches=patches)
    for name in ("DiT main pass", "DiT Refiner pass"):
        a, b = _stage(bare, name), _stage(lora, name)
        assert b.ram_need_bytes - a.ram_need_bytes == patches.host_bytes
        assert "patches (1 LoRA(s) of rank 128)" in b.detail
    # where RAM, not ComfyUI's pinned limit, bounds the pins, the LoRA's tensors come out of the pin budget: that
    # much more streams from disk (a 32 GiB machine whose pinned limit is not reached, as on a larger one)
    import dataclasses

    short = dataclasses.replace(DeviceProfile.card(16, 32), pinned_budget_bytes=64 * 2**30)
    small_bare = _stage(_job(device=short), "DiT main pass")
    small_lora = _stage(_job(device=short, patches=patches), "DiT main pass")
    assert small_bare.host_ram.pin_budget_bytes - small_lora.host_ram.pin_budget_bytes == patches.host_bytes
    assert small_lora.host_ram.disk_bytes_per_call - small_bare.host_ram.disk_bytes_per_call == patches.host_bytes
    assert _stage(lora, "text encoding").ram_need_bytes == _stage(bare, "text encoding").ram_need_bytes


def test_lora_vram_is_held_on_the_card_the_passes_are_planned_on(capsys):
    """The CLI plans every pass on a card with the patches' VRAM held: less usable, the planner picks around it."""
    patches = PatchBytes.from_rank(64)
    device = DeviceProfile.card(8, 64)
    assert device.vram_free_bytes - patches.on_device(device).vram_free_bytes == patches.vram_bytes()

    def usable(*extra):
        assert main(["plan", "--json", "--vram-gb", "8", "--seconds", "30", "--segment-seconds", "10", *extra]) == 0
        return _stage_json(json.loads(capsys.readouterr().out))["vram_usable_bytes"]
    assert usable() - usable("--lora-rank", "64") == patches.vram_bytes()


def _tiny_lora(path, rank=4):
    header = {}
    offset = 0
    for n, (o, k) in enumerate(((32, 16), (16, 32))):
        for name, shape in ((f"diffusion_model.blocks.{n}.lora_down.weight", (rank, k)),
                            (f"diffusion_model.blocks.{n}.lora_up.weight", (o, rank))):
            size = shape[0] * shape[1] * 2
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(offset))
    return offset


def test_cli_lora_flags_and_file_header(tmp_path, capsys):
    data = _tiny_lora(tmp_path / "lora.safetensors")
    assert PatchBytes.from_file(str(tmp_path / "lora.safetensors")).host_bytes == data

    def ram(*extra):
        assert main(["plan", "--json", *extra]) == 0
        return _stage_json(json.loads(capsys.readouterr().out))["ram_need_bytes"]
    base = ram()
    assert ram("--lora-rank", "64", "--lora-count", "2") - base == PatchBytes.from_rank(64, 2).host_bytes
    assert ram("--lora", str(tmp_path / "lora.safetensors")) - base == data


def _stage_json(out, name="DiT main pass"):
    return next(s for s in out["whole_job"]["stages"] if s["name"] == name)


def test_cli_cfg_default_is_one_and_prints_the_whole_clip(capsys):
    assert main(["plan", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)["whole_job"]["seconds_estimate"]
    assert main(["plan", "--json", "--cfg", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["whole_job"]["seconds_estimate"] == default
    assert main(["plan", "--json", "--cfg", "4"]) == 0
    assert json.loads(capsys.readouterr().out)["whole_job"]["seconds_estimate"] > 1.8 * default - 60
    assert main(["plan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith(f"whole clip: about {default / 60:.0f} min")


def test_cli_refuses_a_bad_cfg(capsys):
    assert main(["plan", "--cfg", "-1"]) == 2
    assert "--cfg" in capsys.readouterr().err


def test_report_counts_the_calls_its_cfg_plans():
    from longmedia.report.run_report import RunReport
    report = types.SimpleNamespace(sampler_steps=8, steps=(), cfg=1.0, first_step_s=None, steady_step_s=None,
                                   warmup_s=0.0, probe_s=0.0, skipped_steps=())
    line = RunReport.time_lines(report)[-1]
    assert line == "model calls: 0 over 8 sampler steps (planned 8: cfg 1, 1 call a step)"
    report.cfg = 5.0
    assert "(planned 16: cfg 5, 2 calls a step)" in RunReport.time_lines(report)[-1]


def test_cfg_one_plans_the_positive_call_only():
    from longmedia.comfy.passes import sampler_inputs as inputs
    from longmedia.comfy.passes.pass_plan import _conditionings
    conds = {"positive": [{"cross_attn": "p"}], "negative": [{"cross_attn": "n"}]}
    guider = types.SimpleNamespace(original_conds=conds, cfg=1.0, model_options={})
    assert [e[0][0] for e in _conditionings(guider)] == ["p"] and not inputs.runs_negative(guider)
    guider.cfg = 2.5
    assert [e[0][0] for e in _conditionings(guider)] == ["p", "n"] and inputs.runs_negative(guider)
    guider.cfg, guider.model_options = 1.0, {"disable_cfg1_optimization": True}
    assert inputs.runs_negative(guider)
    assert inputs.runs_negative(types.SimpleNamespace(original_conds=conds))   # BasicGuider: no cfg
