"""Child process of test_int8_lora_dynamic_vram.py: an INT8 H3 with a LoRA under Dynamic VRAM, every weight streamed
through ComfyUI's cast buffers (where a LoRA is applied at cast time).

    python -P tests/gpu/lora_int8_process.py OUT.json [MODEL_DIR]   # env: bench.cards.comfy_process.child_env()

ComfyUI in main.py's order, a 2-block full-width INT8 H3 (longmedia.testing.full_h3, drawn on the GPU) and a
random rank-8 LoRA on every block linear (longmedia.testing.tiny_lora at full width) loaded by stock
LoraLoaderModelOnly. comfy-aimdo's fault is made to report no room (this child only), so every weight is handed
out from an offload cast buffer, the case where stock's INT8 layers ask the cast to requantize the LoRA'd weight.
Then, under torch.inference_mode():
- the cast itself: LongMedia's weight access (`block_patch.comfy_weights`) against the cast stock's INT8 Linear
  makes, and against a cast without requantizing (the code before the fix): the weight's kind, bytes and values;
- sampling: SamplerCustomAdvanced with and without the LoRA against LongMedia normal and low_vram, and low_vram
  with the old cast (`weights=`). Every result goes to OUT.json as soon as it is known.
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path

from bench.cards import comfy_process  # before torch (PYTHONPATH from comfy_process.child_env)

WIDTH, HEIGHT, LENGTH, STEPS, CFG, RANK = 512, 384, 39, 2, 1.0, 8


def main() -> int:
    out_path = Path(sys.argv[1])
    model_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="full_h3_lora_"))
    res: dict = {}

    def save():
        out_path.write_text(json.dumps(res, indent=1, default=str))

    start = comfy_process.start_comfyui([])
    res["start"] = start.to_dict()
    save()
    import comfy.model_management as mm
    import comfy.ops as ops
    import comfy.samplers
    import comfy_aimdo.model_vbar as vbar_api
    import folder_paths
    import torch
    from comfy.quant_ops import QuantizedTensor
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    import nodes
    from longmedia.comfy.passes.sampler import run_sampler
    from longmedia.comfy.patching.block_patch import comfy_weights
    from longmedia.planning.types import PlanRequest
    from longmedia.testing import conditioning as tc
    from longmedia.testing.full_h3 import full_dims, write_full_h3
    from longmedia.testing.tiny_lora import TinyLoraSpec, write_tiny_lora

    dims = full_dims(2)
    path = write_full_h3(model_dir, variant="int8", dims=dims, device="cuda")
    lora = write_tiny_lora(model_dir / "loras", dims=dims, spec=TinyLoraSpec(rank=RANK), dtype=torch.bfloat16)
    folder_paths.add_model_folder_path("diffusion_models", str(model_dir))
    folder_paths.add_model_folder_path("loras", str(model_dir / "loras"))
    base = nodes.UNETLoader().load_unet(path.name, "default")[0]
    with_lora = nodes.LoraLoaderModelOnly().load_lora_model_only(base, lora.name, 1.0)[0]
    res["patcher"] = {"dynamic": bool(base.is_dynamic()), "lora_patches": len(with_lora.patches)}
    save()

    def job(patcher, seed=3):
        guider = comfy.samplers.CFGGuider(patcher)
        guider.set_conds(tc.random_conditioning(11, dims=dims, seed=1), tc.random_conditioning(5, dims=dims, seed=2))
        guider.set_cfg(CFG)
        sigmas = comfy.samplers.calculate_sigmas(patcher.get_model_object("model_sampling"), "simple", STEPS).cpu()
        latent = h3n.EmptyMiniMaxH3LatentAV.execute(WIDTH, HEIGHT, LENGTH).result[0]
        return ncs.Noise_RandomNoise(seed), guider, comfy.samplers.sampler_object("euler"), sigmas, latent

    def rel(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())

    def old_cast(module, like):  # the cast before the fix: the activations' dtype, no requantizing
        return ops.CastBiasWeightContext(module, like, offloadable=True)

    low_vram = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=1024,
                           mlp_chunk_tokens=1024)
    real_fault = vbar_api.vbar_fault
    vbar_api.vbar_fault = lambda alloc: None  # test-only: comfy.ops and comfy.model_prefetch read it at call time
    try:
        with torch.inference_mode():
            runs = {}
            for name, patcher, request, weights in (
                    ("stock_lora", with_lora, None, None), ("stock_plain", base, None, None),
                    ("normal_lora", with_lora, PlanRequest(memory_mode="normal", attention_mode="existing"), None),
                    ("low_vram_lora", with_lora, low_vram, None), ("low_vram_plain", base, low_vram, None),
                    ("low_vram_lora_old_cast", with_lora, low_vram, old_cast)):
                try:
                    if request is None:
                        out = ncs.SamplerCustomAdvanced.execute(*job(patcher)).result[0]["samples"]
                    else:
                        out = run_sampler(*job(patcher), request, weights=weights).output["samples"]
                    runs[name] = out.unbind()[0].clone()
                    res[name] = {"ok": True, "finite": bool(torch.isfinite(runs[name]).all()),
                                 "std": float(runs[name].float().std())}
                except Exception as error:  # noqa: BLE001  named: recorded for the parent test to assert on
                    res[name] = {"ok": False, "error": f"{type(error).__name__}: {error}",
                                 "traceback": traceback.format_exc(limit=12)}
                save()
            if {"stock_lora", "stock_plain"} <= runs.keys():
                res["lora_moves_stock"] = rel(runs["stock_lora"], runs["stock_plain"])
            pairs = {"normal_lora": "stock_lora", "low_vram_lora": "stock_lora", "low_vram_plain": "stock_plain",
                     "low_vram_lora_old_cast": "stock_lora"}
            for name, ref in pairs.items():
                if name in runs and ref in runs:
                    res[name].update(rel_stock=rel(runs[name], runs[ref]), equal_stock=bool(torch.equal(runs[name],
                                                                                                      runs[ref])))
            save()
            res["cast"] = cast_case(with_lora, mm, ops, torch, QuantizedTensor, comfy_weights, old_cast)
            save()
    finally:
        vbar_api.vbar_fault = real_fault
    mm.unload_all_models()
    res["done"] = True
    save()
    return 0


def cast_case(patcher, mm, ops, torch, quantized, comfy_weights, old_cast) -> dict:
    """One LoRA'd INT8 linear (block 0's qkv projection) cast three ways from a cast buffer: as stock's INT8 Linear
    casts it (weight-only quantized: the weight's own dtype, compute_dtype, want_requant), through LongMedia's
    weight access, and without requantizing. Its kind, its bytes, its values and one matmul with each."""
    try:
        mm.load_models_gpu([patcher])
        module = patcher.model.diffusion_model.blocks[0].attn.qkv_proj
        like = torch.randn(64, module.in_features, device=mm.get_torch_device(), dtype=torch.bfloat16,
                           generator=torch.Generator(mm.get_torch_device()).manual_seed(7))

        def take(ctx):
            with ctx as (w, b):
                q = isinstance(w, quantized)
                plain = w._qdata if q else w
                facts = {"quantized": q, "element_bytes": plain.element_size(), "storage_dtype": str(plain.dtype)}
                if q:
                    facts["_values"] = (w._qdata.clone(), w._params.scale.clone())
                out = torch.nn.functional.linear(like, w.to(dtype=like.dtype) if q else w, b)
                facts["_out"] = out.clone()
            return facts

        stock = take(ops.CastBiasWeightContext(module, None, dtype=module.weight.dtype, device=like.device,
                                               bias_dtype=like.dtype, offloadable=True, compute_dtype=like.dtype,
                                               want_requant=True))
        ours = take(comfy_weights()(module, like))
        old = take(old_cast(module, like))
        out = {"has_lowvram_function": getattr(module, "weight_lowvram_function", None) is not None,
               "stock": {k: v for k, v in stock.items() if not k.startswith("_")},
               "ours": {k: v for k, v in ours.items() if not k.startswith("_")},
               "old": {k: v for k, v in old.items() if not k.startswith("_")},
               "ours_equal_stock_values": bool("_values" in ours and "_values" in stock
                                               and all(torch.equal(a, b) for a, b in zip(ours["_values"],
                                                                                         stock["_values"]))),
               "ours_equal_stock_output": bool(torch.equal(ours["_out"], stock["_out"])),
               "old_rel_stock_output": float((old["_out"].double() - stock["_out"].double()).norm()
                                             / stock["_out"].double().norm()),
               "ok": True}
        return out
    except Exception as error:  # noqa: BLE001  named: recorded for the parent test to assert on
        return {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=12)}


if __name__ == "__main__":
    raise SystemExit(main())
