"""The plan's EasyCache bound (longmedia/planning/step_cache.py) against ComfyUI's own code: H3's simple sigmas
(longmedia/h3/sigmas.py) equal ComfyUI's bit for bit, the window is the one EasyCacheHolder's own methods pick, and
stock EasyCache on the tiny H3 model, with a threshold it never reaches, runs exactly the bound's model calls.

The Sampler's whole-job plan (`RunReport.whole_job`, comfy/passes/model_step_cache.py) counts stock EasyCache on its
model as `python -m longmedia plan --easycache` does, on the pass's own sigmas; LazyCache and other holders are not
planned, and the report says so."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from harness import tiny_sampler_job

from longmedia.h3.sigmas import H3_SHIFT, schedule_sigmas
from longmedia.planning.step_cache import EasyCacheSettings, easycache_bound
from longmedia.planning.types import PlanRequest
from longmedia.planning.whole_job import MAIN_PASS, plan_job

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


def _easycache(env, start=0.15, end=0.95, node="EasyCache"):
    # far past the node's 3.0 maximum (its schema's, which execute does not check): the cache skips whenever it can
    cls = {"EasyCache": env["nec"].EasyCacheNode, "LazyCache": env["nec"].LazyCacheNode}[node]
    return cls.execute(env["model"], reuse_threshold=1e9, start_percent=start, end_percent=end, verbose=False).result[0]


def _job(env, patcher, steps, seed, cfg=1.0):
    noise, guider, _, sigmas, latent = tiny_sampler_job(patcher, steps=steps, seed=seed, cfg=cfg)
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


NORMAL = PlanRequest(memory_mode="normal", attention_mode="existing")


def _seed(key: int) -> int:
    return torch.randint(0, 2**31 - 1, (), generator=torch.Generator().manual_seed(key)).item()


def _main_seconds(job) -> float:
    return next(s.seconds for s in job.stages if s.name == MAIN_PASS)


@pytest.mark.parametrize("steps, start, end, cfg", [(8, 0.15, 0.95, 1.0), (20, 0.15, 0.95, 1.0), (6, 0.3, 0.7, 3.0),
                                                    (10, 0.0, 1.0, 3.0)])
def test_the_samplers_whole_job_plan_counts_easycache_as_the_cli_does(env, steps, start, end, cfg):
    settings = EasyCacheSettings(start, end)
    report = env["core"].run_sampler(*_job(env, _easycache(env, start, end), steps, _seed(steps), cfg), NORMAL).report
    job, bound = report.whole_job, easycache_bound(steps, settings)
    # equal inputs, the CLI's numbers: the tiny model samples at H3's shift on the simple sigmas, as --easycache plans
    assert job == plan_job(report.plan, steps=steps, cfg=cfg, easycache=settings) and job.easycache == bound
    assert bound.steps_skippable > 0 and report.skipped_steps == bound.skippable   # stock skipped what was planned
    # the main pass drops by the planned share (exact attention: every step costs the same); nothing else moves
    plain = plan_job(report.plan, steps=steps, cfg=cfg)
    assert _main_seconds(job) == pytest.approx(_main_seconds(plain) * bound.steps_run / steps, rel=1e-12)
    assert job.seconds == pytest.approx(plain.seconds - _main_seconds(plain) * bound.steps_skippable / steps, rel=1e-12)
    calls = 1 if cfg == 1.0 else 2
    line = (f"EasyCache on the model: at most {bound.steps_skippable * calls} of {steps * calls} calls skipped "
            "(best case)")
    assert any(x.startswith(line) for x in report.summary_lines())
    assert report.to_dict()["whole_job"]["easycache"]["skippable"] == list(bound.skippable)


def test_a_denoise_below_1_plans_the_passs_own_tail_of_sigmas(env):
    steps, settings = 6, EasyCacheSettings()
    noise, guider, sampler, _, latent = _job(env, _easycache(env), steps, _seed(66))
    # BasicScheduler at denoise 0.5: the last steps + 1 sigmas of a schedule twice as long
    sigmas = env["samplers"].calculate_sigmas(env["ms"], "simple", 2 * steps)[-(steps + 1):].cpu()
    report = env["core"].run_sampler(noise, guider, sampler, sigmas, latent, NORMAL).report
    bound = easycache_bound(steps, settings, sigmas=sigmas.tolist())
    assert bound != easycache_bound(steps, settings)      # the denoise-1 schedule's bound is another
    assert report.whole_job.easycache == bound and report.skipped_steps == bound.skippable
    assert report.whole_job == plan_job(report.plan, steps=steps, easycache=bound)


def test_without_a_cache_the_whole_job_plan_is_unchanged(env):
    report = env["core"].run_sampler(*_job(env, env["model"], 8, _seed(8)), NORMAL).report
    assert report.whole_job == plan_job(report.plan, steps=8) and report.whole_job.easycache is None
    assert report.skipped_steps == () and not any("on the model" in x for x in report.summary_lines())


def test_lazycache_is_not_planned_and_the_report_says_so(env):
    steps, start, end = 8, 0.15, 0.95
    report = env["core"].run_sampler(*_job(env, _easycache(env, start, end, "LazyCache"), steps, _seed(88)),
                                     NORMAL).report
    assert report.whole_job == plan_job(report.plan, steps=steps) and report.whole_job.easycache is None
    assert (f"LazyCache on the model (window {start:g}-{end:g}): its skips are not planned (its rule differs from "
            "EasyCache's, which the plan reads); the whole-job time counts every model call") in report.summary_lines()
    # why: with a step before its window, only the window's first step must run; EasyCache's bound would undercount
    bound = easycache_bound(steps, EasyCacheSettings(start, end))
    assert bound.window[0] > 0 and len(report.skipped_steps) == bound.steps_skippable + 1


def test_an_unknown_holder_gives_a_note_not_a_crash(env):
    patcher = env["model"].clone()
    patcher.model_options["transformer_options"]["easycache"] = object()   # no wrapper reads it: sampling runs
    report = env["core"].run_sampler(*_job(env, patcher, 4, _seed(4)), NORMAL).report
    assert report.whole_job == plan_job(report.plan, steps=4)
    assert ("a step cache on the model (object) is not planned; the whole-job time counts every model call"
            in report.summary_lines())


@pytest.mark.parametrize("shift", [1.0, 3.0, 12.0])
def test_the_window_comes_from_the_models_own_model_sampling(env, shift):
    import types

    import comfy.model_sampling

    from longmedia.comfy.passes.model_step_cache import model_step_cache

    ms = comfy.model_sampling.ModelSamplingDiscreteFlow()
    ms.set_parameters(shift=shift)
    for start, end in WINDOWS:
        holder = env["nec"].EasyCacheHolder(0.2, start, end, subsample_factor=8, offload_cache_diff=False)
        guider = types.SimpleNamespace(model_options={"transformer_options": {"easycache": holder}},
                                       model_patcher=types.SimpleNamespace(model=types.SimpleNamespace(model_sampling=ms)))
        holder.prepare_timesteps(ms)
        for steps in (3, 8, 20, 33):
            sigmas = env["samplers"].calculate_sigmas(ms, "simple", steps)
            theirs = tuple(i for i in range(steps) if not holder.is_past_end_timestep(sigmas[i] * torch.ones(1))
                           and holder.should_do_easycache(sigmas[i] * torch.ones(1)))
            bound = model_step_cache(guider, sigmas).bound
            assert bound.window == theirs and bound.skippable == theirs[2:], (shift, start, end, steps)
            assert bound == easycache_bound(steps, EasyCacheSettings(start, end), sigmas=sigmas.tolist(), shift=shift)
