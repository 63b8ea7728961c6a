"""The plan's EasyCache bound (longmedia/planning/step_cache.py) against ComfyUI's own code: H3's simple sigmas
(longmedia/h3/sigmas.py) equal ComfyUI's bit for bit, the window is the one EasyCacheHolder's own methods pick, and
stock EasyCache on the tiny H3 model, with a threshold it never reaches, runs exactly the bound's model calls."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from harness import tiny_sampler_job

from longmedia.h3.sigmas import H3_SHIFT, schedule_sigmas
from longmedia.planning.step_cache import EasyCacheSettings, easycache_bound
from longmedia.planning.types import PlanRequest

SKIPPED = re.compile(r"EasyCache - skipped (\d+)/(\d+) steps")
WINDOWS = ((0.15, 0.95), (0.0, 1.0), (0.3, 0.7), (0.5, 0.5), (0.2, 0.9), (0.85, 0.05))


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_easycache as nec

    from longmedia.comfy.passes import sampler as comfy_sampler

    model = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    return {"model": model, "ms": model.get_model_object("model_sampling"), "samplers": comfy.samplers,
            "ncs": ncs, "nec": nec, "core": comfy_sampler}


def test_h3_model_sampling_is_the_flow_shift_the_plan_uses(env):
    assert env["ms"].shift == H3_SHIFT and type(env["ms"]).__name__ == "ModelSampling"
    assert "ModelSamplingAV" in [c.__name__ for c in type(env["ms"]).__mro__]


@pytest.mark.parametrize("steps", [*range(1, 121), 333, 999, 1000, 1001, 4000])
def test_simple_sigmas_equal_comfyuis_bit_for_bit(env, steps):
    theirs = env["samplers"].calculate_sigmas(env["ms"], "simple", steps).tolist()
    assert list(schedule_sigmas(steps)) == theirs


@pytest.mark.parametrize("start, end", WINDOWS)
def test_the_window_is_the_one_easycache_holders_own_methods_pick(env, start, end):
    holder = env["nec"].EasyCacheHolder(0.2, start, end, subsample_factor=8, offload_cache_diff=False)
    holder.prepare_timesteps(env["ms"])
    for steps in range(1, 81):
        sigmas = env["samplers"].calculate_sigmas(env["ms"], "simple", steps)
        # the wrapper sees transformer_options["sigmas"]: the step's sigma times the sampler's float32 ones
        theirs = tuple(i for i in range(steps) if not holder.is_past_end_timestep(sigmas[i] * torch.ones(1))
                       and holder.should_do_easycache(sigmas[i] * torch.ones(1)))
        settings = EasyCacheSettings(start, end)
        assert easycache_bound(steps, settings).window == theirs, steps
        assert easycache_bound(steps, settings, sigmas=sigmas).window == theirs, steps


def _easycache(env, start=0.15, end=0.95):
    # far past the node's 3.0 maximum (its schema's, which execute does not check): the cache skips whenever it can
    return env["nec"].EasyCacheNode.execute(env["model"], reuse_threshold=1e9, start_percent=start, end_percent=end,
                                            verbose=False).result[0]


def _job(env, patcher, steps, seed):
    noise, guider, _, sigmas, latent = tiny_sampler_job(patcher, steps=steps, seed=seed, cfg=1.0)
    # the shipped workflows' sampler: one model call per step, at the step's sigma
    return noise, guider, env["samplers"].sampler_object("res_multistep"), sigmas, latent


@pytest.mark.parametrize("steps, start, end", [(8, 0.15, 0.95), (4, 0.15, 0.95), (20, 0.15, 0.95), (6, 0.3, 0.7)])
def test_stock_easycache_runs_exactly_the_bounds_model_calls(env, caplog, steps, start, end):
    seed = torch.randint(0, 2**31 - 1, (), generator=torch.Generator().manual_seed(steps)).item()
    bound = easycache_bound(steps, EasyCacheSettings(start, end))
    caplog.set_level(logging.INFO)
    env["ncs"].SamplerCustomAdvanced.execute(*_job(env, _easycache(env, start, end), steps, seed))
    said = [m for m in (SKIPPED.search(r.getMessage()) for r in caplog.records) if m]
    assert [(int(m.group(1)), int(m.group(2))) for m in said] == [(bound.steps_skippable, steps)]
    result = env["core"].run_sampler(*_job(env, _easycache(env, start, end), steps, seed),
                                     PlanRequest(memory_mode="normal", attention_mode="existing"))
    report = result.report
    # cfg 1: one model call per step; the calls that reached the model are the bound's, step for step
    assert len(report.steps) == bound.steps_run and report.sampler_steps == steps
    assert report.skipped_steps == bound.skippable
