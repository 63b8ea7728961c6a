"""Child process of test_sampler_dynamic_vram.py: ComfyUI in main.py's order, then the in-process Sampler.

    python -P tests/gpu/sampler_process.py OUT.json [MODEL_DIR]   # env: bench.cards.comfy_process.child_env()

Imports bench.cards.comfy_process before torch (comfy-aimdo must initialise first), writes a 2-block
full-width bf16 H3 checkpoint (longmedia.testing.full_h3, drawn on the GPU) and loads it through
ComfyUI's UNETLoader. Then, all under torch.inference_mode() as ComfyUI runs nodes:
SamplerCustomAdvanced (stock) vs `run_sampler` in normal/existing, low_vram with chunks, sol and
scheduled_sol. Every result goes to OUT.json as soon as it is known (a crash keeps the rest).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.cards import comfy_process  # before torch (PYTHONPATH from comfy_process.child_env)

WIDTH, HEIGHT, LENGTH, STEPS, CFG = 512, 384, 39, 2, 3.0  # ~2,400 packed rows
LONG = (1344, 768, 107)  # ~33,000 packed rows: stages long enough that the GPU runs behind the CPU


def main() -> int:
    out_path = Path(sys.argv[1])
    model_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="full_h3_"))
    res: dict = {}

    def save():
        out_path.write_text(json.dumps(res, indent=1, default=str))

    start = comfy_process.start_comfyui([])
    res["start"] = start.to_dict()
    save()
    import comfy.model_management as mm
    import comfy.samplers
    import folder_paths
    import torch
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    import nodes
    from longmedia.attention.schedule import SolSettings
    from longmedia.comfy.passes.sampler import run_sampler
    from longmedia.planning.types import PlanRequest
    from longmedia.testing import conditioning as tc
    from longmedia.testing.full_h3 import full_dims, write_full_h3

    dims = full_dims(2)
    t0 = time.perf_counter()
    path = write_full_h3(model_dir, variant="bf16", dims=dims, device="cuda")
    res["checkpoint"] = {"path": str(path), "gib": path.stat().st_size / 2 ** 30, "write_s": time.perf_counter() - t0}
    folder_paths.add_model_folder_path("diffusion_models", str(model_dir))
    patcher = nodes.UNETLoader().load_unet(path.name, "default")[0]
    res["patcher"] = {"type": type(patcher).__name__, "dynamic": bool(patcher.is_dynamic())}
    save()

    def job(seed=3, size=(WIDTH, HEIGHT, LENGTH)):
        guider = comfy.samplers.CFGGuider(patcher)
        guider.set_conds(tc.random_conditioning(11, dims=dims, seed=1), tc.random_conditioning(5, dims=dims, seed=2))
        guider.set_cfg(CFG)
        sigmas = comfy.samplers.calculate_sigmas(patcher.get_model_object("model_sampling"), "simple", STEPS).cpu()
        latent = h3n.EmptyMiniMaxH3LatentAV.execute(*size).result[0]
        return ncs.Noise_RandomNoise(seed), guider, comfy.samplers.sampler_object("euler"), sigmas, latent

    def rel(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())

    with torch.inference_mode():
        out = ncs.SamplerCustomAdvanced.execute(*job()).result
        sv, sa = (t.clone() for t in out[0]["samples"].unbind())
        res["stock"] = {"finite": bool(torch.isfinite(sv).all()), "std": float(sv.float().std()),
                        "shape": list(sv.shape), "aimdo_enabled": start.aimdo_enabled,
                        "loaded_mib": patcher.loaded_size() / 2 ** 20}
        save()
        cases = {
            "normal": PlanRequest(memory_mode="normal", attention_mode="existing"),
            "low_vram": PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=1024,
                                    mlp_chunk_tokens=1024),
            "low_vram_groups": PlanRequest(memory_mode="ultra_low_vram", attention_mode="existing",
                                           sol_qkv_chunk_tokens=512, sol_out_proj_chunk_tokens=256,
                                           mlp_chunk_tokens=512),
            # sol_min_tokens 0: this ~2,400-row job would otherwise run exact (the default floor is 16,384)
            "sol": PlanRequest(memory_mode="low_vram", attention_mode="sol", sol_qkv_chunk_tokens=1024,
                               mlp_chunk_tokens=1024, sol=SolSettings(min_tokens=0)),
            "scheduled_sol": PlanRequest(memory_mode="low_vram", attention_mode="scheduled_sol",
                                         sol_qkv_chunk_tokens=1024, mlp_chunk_tokens=1024,
                                         sol=SolSettings(min_tokens=0, dense_percent=0.2)),
        }
        outputs = {}
        for name, request in cases.items():
            try:
                result = run_sampler(*job(), request)
                ov, oa = result.output["samples"].unbind()
                outputs[name] = ov.clone()
                plan = result.plan
                res[name] = {"ok": True, "equal_video": bool(torch.equal(ov, sv)), "equal_audio": bool(torch.equal(oa, sa)),
                             "rel_video": rel(ov, sv), "rel_audio": rel(oa, sa), "finite": bool(torch.isfinite(ov).all()),
                             "memory_mode": plan.memory_mode, "backend": result.report.attention_backend,
                             "chunks": [plan.chunks.qkv_chunk_tokens, plan.chunks.out_proj_chunk_tokens,
                                        plan.chunks.mlp_chunk_tokens, plan.chunks.heads_per_group],
                             "streamed_blocks": list(result.report.streamed_blocks),
                             "steps": [s.seconds for s in result.report.steps],
                             "attention_reasons": list(plan.attention.reasons)[:4]}
            except Exception as error:  # noqa: BLE001  named: recorded for the parent test to assert on
                res[name] = {"ok": False, "error": f"{type(error).__name__}: {error}",
                             "traceback": traceback.format_exc(limit=12)}
            save()
        res["cast_buffer"] = cast_buffer_case(job, cases["low_vram"], outputs.get("low_vram"), sv, run_sampler, ncs)
        save()
        res["cast_buffer_long"] = cast_buffer_long_case(job, run_sampler, ncs, PlanRequest)
        save()
    mm.unload_all_models()
    res["done"] = True
    save()
    return 0


def cast_buffer_case(job, request, vbar_out, stock_out, run_sampler, ncs) -> dict:
    """low_vram again with every weight handed out from ComfyUI's offload cast buffers, as on a card too small to
    keep weights resident: comfy-aimdo's fault is made to report no room (in this child process only, restored
    after). The weights' values are the same, so the output must equal the VBAR-resident run's bit for bit: the
    stage's two held weights sit in two streams' buffers and nothing else is cast while they are held."""
    import comfy_aimdo.model_vbar as vbar_api
    import torch

    real_fault = vbar_api.vbar_fault
    vbar_api.vbar_fault = lambda alloc: None  # test-only: comfy.ops and comfy.model_prefetch read it at call time
    try:
        stock = ncs.SamplerCustomAdvanced.execute(*job()).result[0]["samples"].unbind()[0].clone()
        result = run_sampler(*job(), request)
        ov = result.output["samples"].unbind()[0]
        return {"ok": True, "finite": bool(torch.isfinite(ov).all()),
                "stock_equal": bool(torch.equal(stock, stock_out)),
                "equal_vbar_run": bool(vbar_out is not None and torch.equal(ov, vbar_out)),
                "rel_vbar_run": float((ov.double() - vbar_out.double()).norm() / vbar_out.double().norm())
                if vbar_out is not None else None,
                "streamed_blocks": list(result.report.streamed_blocks)}
    except Exception as error:  # noqa: BLE001  named: recorded for the parent test to assert on
        return {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=12)}
    finally:
        vbar_api.vbar_fault = real_fault


def cast_buffer_long_case(job, run_sampler, ncs, plan_request) -> dict:
    """The cast-buffer run on a ~33,000-row job, where a stage's kernels outlast the CPU's casts: stock, the
    product, and the product with held weights handed back as before the fix (ComfyUI's uncast alone, which leaves
    a cast-buffer weight's offload stream unordered). The product must match stock; the unordered run is recorded
    (a race: it may or may not hit)."""
    import comfy.ops as ops
    import comfy_aimdo.model_vbar as vbar_api
    import torch

    request = plan_request(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=2048,
                           mlp_chunk_tokens=2048)

    def rel(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())

    real_fault = vbar_api.vbar_fault
    vbar_api.vbar_fault = lambda alloc: None  # test-only, as in cast_buffer_case
    try:
        stock = ncs.SamplerCustomAdvanced.execute(*job(size=LONG)).result[0]["samples"].unbind()[0].clone()
        ordered = run_sampler(*job(size=LONG), request)
        ov = ordered.output["samples"].unbind()[0].clone()
        def unordered(module, like):  # ComfyUI's cast context alone: handed back without ordering its stream
            return ops.CastBiasWeightContext(module, like, offloadable=True)

        uv = run_sampler(*job(size=LONG), request, weights=unordered).output["samples"].unbind()[0].clone()
        return {"ok": True, "rows": int(ordered.plan.geometry.seq_len), "finite": bool(torch.isfinite(ov).all()),
                "rel_stock": rel(ov, stock), "equal_stock": bool(torch.equal(ov, stock)),
                "unordered_finite": bool(torch.isfinite(uv).all()),
                "unordered_rel_stock": rel(uv, stock) if bool(torch.isfinite(uv).all()) else None,
                "streamed_blocks": list(ordered.report.streamed_blocks)}
    except Exception as error:  # noqa: BLE001  named: recorded for the parent test to assert on
        return {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=12)}
    finally:
        vbar_api.vbar_fault = real_fault


if __name__ == "__main__":
    raise SystemExit(main())
