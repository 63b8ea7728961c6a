"""The kernel warm-up before step 1 covers both prompts' packed lengths (attention/warmup.py runs them on CUDA)."""

from __future__ import annotations

import pytest
from harness import tiny_sampler_job

from longmedia.planning.types import PlanRequest


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.sd

    from longmedia.comfy import pass_plan
    from longmedia.comfy import sampler as comfy_sampler

    return {"model": comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"])), "core": comfy_sampler,
            "pass_plan": pass_plan}


def test_prompt_lengths_are_the_cond_and_uncond_calls(env):
    noise, guider, sampler, sigmas, latent = tiny_sampler_job(env["model"], width=128, height=96, frames=39)
    plan, table = env["pass_plan"].plan_for(guider, latent, sigmas, PlanRequest(attention_mode="sol"))
    lengths = env["core"].prompt_seq_lens(guider, latent, plan)
    assert len(lengths) == 2 and lengths[1] - lengths[0] == 11 - 5  # positive 11 text rows, negative 5
    assert plan.geometry.seq_len == table[-1][1] == lengths[1]
