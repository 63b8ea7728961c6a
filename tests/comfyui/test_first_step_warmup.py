"""The kernel warm-up before step 1 covers both prompts' packed lengths (attention/warmup.py runs them on CUDA)."""

from __future__ import annotations

import pytest
from harness import tiny_sampler_job

from longmedia.planning.types import PlanRequest


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.sd

    from longmedia.comfy.passes import pass_plan
    from longmedia.comfy.passes import sampler as comfy_sampler

    return {"model": comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"])), "core": comfy_sampler,
            "pass_plan": pass_plan}


def test_prompt_lengths_are_the_cond_and_uncond_calls(env):
    noise, guider, sampler, sigmas, latent = tiny_sampler_job(env["model"], width=128, height=96, frames=39)
    plan, table = env["pass_plan"].plan_for(guider, latent, sigmas, PlanRequest(attention_mode="sol"))
    lengths = env["core"].prompt_seq_lens(guider, latent, plan)
    assert len(lengths) == 2 and lengths[1] - lengths[0] == 11 - 5  # positive 11 text rows, negative 5
    assert plan.geometry.seq_len == table[-1][1] == lengths[1]


def test_the_report_names_the_speed_timing_run_before_the_first_step(env):
    """The probe runs in the Sampler before the first model call (pass_plan.measure_speeds after the residency
    boundary, on CUDA): the report keeps its seconds apart from the first step and says so. On the CPU no probe
    runs, so the test hands in the speeds the probe would have returned."""
    import random

    import torch

    from longmedia.attention.speeds import MeasuredSpeeds

    probe = random.Random(34).uniform(5.0, 20.0)
    speeds = MeasuredSpeeds(device="Fake GPU sm90", head_dim=999, dtype="bfloat16", length_class="short", rows=4096,
                            heads=8, seconds=(("sdpa", 0.01),), probe_s=probe)  # covers no job: orders nothing here
    job = tiny_sampler_job(env["model"], width=128, height=96, frames=39)
    with torch.inference_mode():
        result = env["core"].run_sampler(*job, PlanRequest(attention_mode="auto", attention_speeds=speeds))
    assert result.report.probe_s == probe
    assert f"the attention speed timing ran before it in {probe:.2f} s" in result.report.time_lines()[0]
    with torch.inference_mode():
        plain = env["core"].run_sampler(*tiny_sampler_job(env["model"], width=128, height=96, frames=39),
                                        PlanRequest(attention_mode="auto"))
    assert plain.report.probe_s == 0.0 and "speed timing" not in plain.report.time_lines()[0]
