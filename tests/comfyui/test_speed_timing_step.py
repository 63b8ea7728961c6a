"""Checks check, measurements measure: `pass_plan.check_pass` times nothing; the attention speed timing is a step of
its own (`pass_plan.measure_speeds`) that the Sampler runs after the residency boundary, and the pass is planned
with what it measured. A forecast (`plan_for`) reads the disk cache only."""

from __future__ import annotations

import random

import pytest
import torch
from harness import tiny_sampler_job

from longmedia.attention.speeds import MeasuredSpeeds, length_class
from longmedia.planning.types import PlanRequest
from longmedia.report.memory import read_memory


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.sd

    from longmedia.comfy.passes import pass_plan
    from longmedia.comfy.passes import sampler as comfy_sampler

    return {"model": comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"])), "core": comfy_sampler,
            "pass_plan": pass_plan}


class _Spy:
    """Stands in for `attention_speeds`: records each call (and what happened before it, in `events`) and returns
    speeds that cover the job it is asked about, or refuses on a cached read."""

    def __init__(self, events: list, probe_s: float) -> None:
        self.events, self.probe_s, self.calls = events, probe_s, []

    def __call__(self, load_device, *, attention_mode, head_dim, seq_len, measure=True):
        self.calls.append({"mode": attention_mode, "head_dim": head_dim, "seq_len": seq_len, "measure": measure})
        self.events.append("probe" if measure else "cached read")
        if not measure:
            return None
        return MeasuredSpeeds(device="Spy GPU sm90", head_dim=head_dim, dtype="bfloat16",
                              length_class=length_class(seq_len), rows=4096, heads=8,
                              seconds=(("sdpa", 0.01), ("sdpa_efficient", 0.02)), probe_s=self.probe_s)


def test_the_check_times_nothing_and_a_forecast_reads_the_cache_only(env, monkeypatch):
    """check_pass leaves the request's speeds as given (none here): the timing function is never called in it (the
    spy stands where check_pass would reach it). plan_for asks for the cached speeds only (measure=False)."""
    rng = random.Random(4801)
    spy = _Spy([], rng.uniform(5.0, 20.0))
    monkeypatch.setattr(env["pass_plan"], "attention_speeds", spy)
    noise, guider, sampler, sigmas, latent = tiny_sampler_job(env["model"], seed=rng.randrange(1000))
    with torch.inference_mode():
        checked = env["pass_plan"].check_pass(guider, latent, sigmas, PlanRequest(attention_mode="auto"))
    assert spy.calls == [] and checked.request.attention_speeds is None
    given = MeasuredSpeeds.none("handed in", head_dim=checked.profile.dims.head_dim, dtype="bfloat16")
    with torch.inference_mode():
        kept = env["pass_plan"].check_pass(guider, latent, sigmas,
                                           PlanRequest(attention_mode="auto", attention_speeds=given))
    assert spy.calls == [] and kept.request.attention_speeds is given
    measured = env["pass_plan"].measure_speeds(checked, "cpu", spy)   # the step of its own: it calls the timing
    assert spy.calls == [{"mode": "auto", "head_dim": checked.profile.dims.head_dim,
                          "seq_len": checked.geometry.seq_len, "measure": True}]
    assert measured.request.attention_speeds.probe_s == spy.probe_s and checked.request.attention_speeds is None
    with torch.inference_mode():
        env["pass_plan"].plan_for(guider, latent, sigmas, PlanRequest(attention_mode="auto"))
    assert [c["measure"] for c in spy.calls] == [True, False]


def _sampled(env, *card):
    """One run_sampler call with a spy for the speed timing and a memory reader that logs each reading: the events
    in order, the spy and the result."""
    events: list = []

    def reader(device):
        events.append("memory read")
        return read_memory(device)
    rng = random.Random(4802 + len(card))
    spy = _Spy(events, rng.uniform(5.0, 20.0))
    job = tiny_sampler_job(env["model"], seed=rng.randrange(1000))
    with torch.inference_mode():
        result = env["core"].run_sampler(*job, PlanRequest(attention_mode="auto"), *card, memory_reader=reader,
                                         speed_timing=spy)
    return events, spy, result


def test_the_sampler_times_the_speeds_after_the_boundary_and_plans_with_them(env):
    """The probe (handed in through run_sampler's speed_timing) runs once, after the boundary's two memory readings
    (before and after it), and the plan and report carry what it measured (the plan's reasons, probe_s)."""
    events, spy, result = _sampled(env)
    assert events == ["memory read", "memory read", "probe"]
    assert len(spy.calls) == 1 and spy.calls[0]["seq_len"] == result.plan.geometry.seq_len
    assert any("measured on Spy GPU sm90" in r for r in result.plan.attention.reasons)
    assert result.report.probe_s == spy.probe_s
    assert f"the attention speed timing ran before it in {spy.probe_s:.2f} s" in result.report.time_lines()[0]


def test_a_card_is_refused_with_the_cached_speeds_and_planned_again_with_new_ones(env):
    """A fixed card is planned before the boundary with what the disk cache holds (the spy's cache: nothing), nothing
    timed there; after the boundary the probe times the speeds and the card is planned again with them."""
    from longmedia.h3.profiles import DeviceProfile

    events, spy, result = _sampled(env, DeviceProfile.card(16, 64))
    assert events == ["cached read", "memory read", "memory read", "probe"]
    assert any("measured on Spy GPU sm90" in r for r in result.plan.attention.reasons)
    assert result.report.probe_s == spy.probe_s
