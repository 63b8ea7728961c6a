"""Full-size peaks of H3's video decode and text encoder (ComfyUI's modules, random weights) vs the plan.

    python -m bench.stage_bytes --comfyui /path/to/ComfyUI            # CUDA, full size
    python -m bench.stage_bytes --comfyui /path/to/ComfyUI --smoke    # CPU, small widths, seconds

Builds ComfyUI's `MiniMaxH3VideoVAE` (fp16, full ViT decoder) and `Llama2_` under `Qwen3VL_32BConfig`
(bf16, 50 layers) on the device, decodes / encodes random inputs inside torch.inference_mode(), and
prints each peak above the weights and inputs (`max_memory_allocated` on CUDA, live storage bytes on
the CPU) next to `longmedia.planning.stage_formulas` and stock's own decode reservation
(`memory_used_decode`). The decoded video goes to a host buffer, as ComfyUI's VAE.decode does.
"""

from __future__ import annotations

import argparse
import os
import time

from longmedia.planning import stage_formulas as F
from longmedia.units import GIB

CHILD_MARK = "LONGMEDIA_STAGE_BYTES_CHILD"  # set in the one re-run with ComfyUI on PYTHONPATH


def _peak(torch, device, fn):
    """(peak bytes above what was allocated before, seconds) of fn() under inference mode."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        t = time.perf_counter()
        with torch.inference_mode():
            fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base, time.perf_counter() - t
    from longmedia.testing.live_bytes import LiveBytes

    t = time.perf_counter()
    with torch.inference_mode(), LiveBytes() as lb:
        fn()
    return lb.peak_bytes, time.perf_counter() - t


def video_decode_rows(torch, device, smoke: bool):
    import comfy.ldm.minimax.vae as V

    dtype = torch.float32 if smoke else torch.float16
    dims = F.VideoVAEDims(dim=64, layers=1, tile=64, tile_overlap_min=16) if smoke else F.H3_VIDEO_VAE
    with torch.device("meta"):
        vae = V.MiniMaxH3VideoVAE(tile_size=dims.tile, tile_overlap_min=dims.tile_overlap_min)
        if smoke:
            vae.decoder = V.ViT3DDecoder(num_layers=dims.layers, heads=2, dim_head=32, operations=V.ops)
    vae = vae.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for p in vae.parameters():
            p.normal_(0.0, 0.02)
        vae.latents_mean.normal_()
        vae.latents_std.uniform_(0.5, 1.5)
        vae.pixel_mean.copy_(torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1, 1))
        vae.pixel_std.copy_(torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1, 1))
    jobs = ((128, 96, 39),) if smoke else ((1344, 768, 243), (1920, 1088, 121), (768, 512, 121))
    rows = []
    for w, h, frames in jobs:
        z = torch.randn(1, 24, F.L.latent_frames(frames), h // 16, w // 16, device=device, dtype=dtype)
        out = torch.empty(vae.decode_output_shape(z.shape), dtype=torch.float32, device="cpu")
        peak, sec = _peak(torch, device, lambda z=z, out=out: vae.decode(z, output_buffer=out))
        formula = F.video_decode_activation_bytes(frames, w, h, dims, dtype.itemsize)
        stock = F.stock_video_decode_estimate(frames, w, h, dtype.itemsize)
        rows.append((f"video decode {w}x{h}, {frames} frames", peak, formula, stock, sec))
        print("measured", rows[-1], flush=True)
    return rows


def text_encoder_rows(torch, device, smoke: bool):
    import comfy.ops
    from comfy.text_encoders.llama import Llama2_, Qwen3VL_32BConfig

    dtype = torch.float32 if smoke else torch.bfloat16
    kw = {"hidden_size": 64, "intermediate_size": 320, "num_hidden_layers": 2, "num_attention_heads": 8,
          "num_key_value_heads": 2} if smoke else {}
    cfg = Qwen3VL_32BConfig(**kw)
    if smoke:
        cfg.head_dim = 16
    with torch.device("meta"):
        model = Llama2_(cfg, dtype=dtype, ops=comfy.ops.disable_weight_init)
    model = model.to_empty(device=device)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    dims = F.TextEncoderDims(hidden=cfg.hidden_size, intermediate=cfg.intermediate_size,
                             layers=cfg.num_hidden_layers, heads=cfg.num_attention_heads,
                             kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, vocab=cfg.vocab_size)
    rows = []
    for tokens in ((64, 256) if smoke else (256, 1024, 4096)):
        ids = torch.randint(0, cfg.vocab_size, (1, tokens), device=device)
        peak, sec = _peak(torch, device, lambda ids=ids: model(ids, dtype=dtype))
        formula = F.text_encoder_activation_bytes(tokens, dims, dtype.itemsize,
                                                  materialised_scores=device.type == "cpu")
        rows.append((f"text encoder, {tokens} tokens", peak, formula, None, sec))
        print("measured", rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comfyui", default=os.environ.get("LONGMEDIA_COMFYUI_ROOT"),
                    help="a ComfyUI checkout (its comfy package is imported; default $LONGMEDIA_COMFYUI_ROOT)")
    ap.add_argument("--smoke", action="store_true", help="CPU, small widths: checks the script runs")
    ap.add_argument("--only", choices=("video", "text"), default=None)
    args = ap.parse_args(argv)
    if not args.comfyui:
        print("stage_bytes.py: SKIPPED, no ComfyUI checkout (pass --comfyui or set LONGMEDIA_COMFYUI_ROOT): "
              "it measures ComfyUI's own text-encoder and VAE modules")
        return 0 if args.smoke else 2
    from bench.cards.comfy_process import rerun_with_comfy

    code = rerun_with_comfy("bench.stage_bytes", args.comfyui, argv, CHILD_MARK)
    if code is not None:
        return code
    import torch
    from comfy.cli_args import args as comfy_args

    comfy_args.cpu = args.smoke or not torch.cuda.is_available()
    device = torch.device("cpu" if comfy_args.cpu else "cuda")
    print(f"device {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, torch {torch.__version__}")
    rows = []
    if args.only in (None, "video"):
        rows += video_decode_rows(torch, device, args.smoke)
    if args.only in (None, "text"):
        rows += text_encoder_rows(torch, device, args.smoke)
    print("| stage | measured peak | formula | formula / measured | stock reserves | seconds |")
    print("|---|---|---|---|---|---|")
    for name, peak, formula, stock, sec in rows:
        st = f"{stock / GIB:.3f} GiB" if stock is not None else "-"
        print(f"| {name} | {peak / GIB:.3f} GiB | {formula / GIB:.3f} GiB | {formula / peak:.3f} | {st} | {sec:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
