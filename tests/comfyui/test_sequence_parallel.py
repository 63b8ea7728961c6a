"""Sequence parallelism in real ComfyUI on CPU ranks (gloo): the tiny checkpoints' latents equal the single process
within fp32 1e-5; a killed worker fails the prompt cleanly and leaves no process; Cancel stops every rank."""

from __future__ import annotations

import pytest
import torch
from harness import tiny_sampler_job

from longmedia.planning.types import PlanRequest

WIDTH, HEIGHT, LENGTH = 64, 64, 22


@pytest.fixture(scope="module")
def env(comfy_inprocess, tiny_checkpoints):
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs

    from longmedia.comfy import sampler as comfy_sampler

    model = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    return {"ncs": ncs, "model": model, "core": comfy_sampler}


def job(env, seed=3, steps=2):
    return tiny_sampler_job(env["model"], width=WIDTH, height=HEIGHT, frames=LENGTH, seed=seed, steps=steps)


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def children():
    """This process's live children, multiprocessing's own resource tracker (one per process, long-lived) left out."""
    import psutil

    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:  # named: it ended while being listed
            continue
    return out


def single(env, request):
    result = env["core"].run_sampler(*job(env), request)
    return result.output["samples"].unbind()


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("request_kw", [dict(memory_mode="normal"),
                                        dict(memory_mode="low_vram", sol_qkv_chunk_tokens=64, mlp_chunk_tokens=64)],
                         ids=["stock_blocks", "streamed_blocks"])
def test_t2va_ranks_equal_the_single_process(env, world, request_kw):
    request = PlanRequest(attention_mode="existing", **request_kw)
    sv, sa = single(env, request)
    result = env["core"].run_sampler(*job(env), request, devices=",".join(["cpu"] * world))
    ov, oa = result.output["samples"].unbind()
    assert torch.isfinite(ov).all() and sv.std() > 0.05
    assert rel(ov, sv) <= 1e-5 and rel(oa, sa) <= 1e-5, (rel(ov, sv), rel(oa, sa))
    plan = result.plan
    assert plan.sp is not None and plan.sp.degree == world and plan.sp.link_source == "measured"
    assert any(n.startswith(f"sequence parallel on {world} ranks") for n in result.report.notes)
    assert children() == []
