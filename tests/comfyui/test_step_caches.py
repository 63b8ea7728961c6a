"""Stock EasyCache and LazyCache (comfy_extras/nodes_easycache.py) under the LongMedia Sampler, in-process on the
tiny checkpoint (CPU): they still skip model calls in normal and streamed modes, and the run report counts the
steps they served (steps without a model call) as the caches themselves count them."""

from __future__ import annotations

import logging
import re

import pytest
import torch
from harness import tiny_sampler_job

from longmedia.planning.types import PlanRequest

WIDTH, HEIGHT, LENGTH, STEPS = 128, 96, 39, 10
MODES = {"normal": PlanRequest(memory_mode="normal", attention_mode="existing"),
         "low_vram": PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64,
                                 mlp_chunk_tokens=96)}
SKIPPED = re.compile(r"(EasyCache|LazyCache) - skipped (\d+)/(\d+) steps")


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_easycache as nec

    from longmedia.comfy.passes import sampler as comfy_sampler

    model = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    return {"model": model, "ncs": ncs, "nec": nec, "core": comfy_sampler}


def _cached(env, node: str):
    cls = {"EasyCache": env["nec"].EasyCacheNode, "LazyCache": env["nec"].LazyCacheNode}[node]
    # the highest threshold from the start: the cache skips whenever its estimate lets it
    return cls.execute(env["model"], reuse_threshold=3.0, start_percent=0.0, end_percent=1.0, verbose=False).result[0]


def _job(patcher, seed):
    return tiny_sampler_job(patcher, width=WIDTH, height=HEIGHT, frames=LENGTH, seed=seed, steps=STEPS)


def _cache_says(caplog, node) -> int:
    found = [m for m in (SKIPPED.search(r.getMessage()) for r in caplog.records) if m and m.group(1) == node]
    assert len(found) == 1, [r.getMessage() for r in caplog.records]
    assert int(found[0].group(3)) == STEPS
    return int(found[0].group(2))


@pytest.mark.parametrize("node", ["EasyCache", "LazyCache"])
@pytest.mark.parametrize("mode", list(MODES))
def test_step_cache_skips_model_calls_under_the_longmedia_sampler(env, caplog, node, mode):
    seed = torch.randint(0, 2**31 - 1, (), generator=torch.Generator().manual_seed(55)).item()
    caplog.set_level(logging.INFO)
    stock = env["ncs"].SamplerCustomAdvanced.execute(*_job(_cached(env, node), seed)).result[0]["samples"].unbind()
    stock_skipped = _cache_says(caplog, node)
    caplog.clear()
    result = env["core"].run_sampler(*_job(_cached(env, node), seed), MODES[mode])
    ours_skipped = _cache_says(caplog, node)
    report = result.report
    assert stock_skipped > 0 and ours_skipped == stock_skipped  # the cache skips as it does under stock
    assert len(report.skipped_steps) == ours_skipped and report.sampler_steps == STEPS
    assert len({s.sampler_step for s in report.steps}) == STEPS - ours_skipped
    assert len(report.steps) == 2 * (STEPS - ours_skipped)  # cond and uncond each run once per served step
    line = next(line for line in report.summary_lines() if line.startswith("model calls:"))
    assert f"{ours_skipped} step(s) without a model call" in line
    ov, oa = result.output["samples"].unbind()
    sv, sa = stock
    # normal: nothing of ours computes; low_vram with all heads on fp32 is bit for bit too (test_sampler_inprocess):
    # so the cached run equals stock's cached run exactly, the skipped steps included
    assert torch.equal(ov, sv) and torch.equal(oa, sa)


def test_without_a_cache_no_step_is_skipped(env):
    result = env["core"].run_sampler(*_job(env["model"], 5), MODES["low_vram"])
    assert result.report.skipped_steps == () and len(result.report.steps) == 2 * STEPS
