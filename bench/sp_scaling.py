"""Sequence parallelism at full depth in real ComfyUI: one GPU against N NCCL ranks (issue 33).

    . tools/gpu/bootstrap.sh && python3 -m longmedia.testing.full_h3 /tmp/h3full --blocks 50 --variant int8 \
      && python3 -m bench.sp_scaling --checkpoint /tmp/h3full/full_h3_int8_50blocks.safetensors --ranks 2 \
         --width 1344 --height 768 --seconds 14.4 --steps 2 --out /tmp/sp_scaling.json          # 2 H200s
    python -m bench.sp_scaling --smoke                                  # CPU: tiny checkpoint, 2 gloo ranks

One process imports ComfyUI (a child started with LONGMEDIA_COMFYUI_ROOT on its PYTHONPATH, as every bench
does), loads the checkpoint with ComfyUI's loader and samples the same t2va job twice through the LongMedia
Sampler core (`run_sampler`, CFG 1, random conditioning, euler): on GPU 0 alone, then with
devices=cuda:0,...,cuda:N-1 (workers spawned, NCCL). Per run: seconds per step (the report's model calls),
each GPU's NVML peak (device-wide used bytes over the run minus the baseline before it: the worker's process is
the one on its GPU), rank 0's all-to-all time per block (LONGMEDIA_SP_TIMING=1: a device sync around each call,
so the SP run's step time carries that cost), the plan's expected speedup and link, and the SP latent's relative
deviation from the single GPU's (video and audio). Rows print as a table and go to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

CHILD_MARK = "LONGMEDIA_SP_SCALING_CHILD"


def _job(comfy, patcher, dims, width: int, height: int, seconds: float, steps: int, seed: int):
    import comfy.samplers
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.h3 import lattice as L
    from longmedia.testing.conditioning import random_conditioning

    guider = comfy.samplers.CFGGuider(patcher)
    guider.set_conds(random_conditioning(64, dims=dims, seed=1), random_conditioning(16, dims=dims, seed=2))
    guider.set_cfg(1.0)
    sigmas = comfy.samplers.calculate_sigmas(patcher.get_model_object("model_sampling"), "simple", steps).cpu()
    frames = L.snap_frames(L.frames_for_seconds(seconds))
    latent = h3n.EmptyMiniMaxH3LatentAV.execute(width, height, frames).result[0]
    return ncs.Noise_RandomNoise(seed), guider, comfy.samplers.sampler_object("euler"), sigmas, latent


def _run(core, job_args, request, devices, meters):
    for m in meters:
        m.reset()
    start = time.perf_counter()
    result = core.run_sampler(*job_args, request, devices=devices)
    wall = time.perf_counter() - start
    peaks = [m.peak() for m in meters]
    report = result.report
    row = {"devices": devices or "one device", "wall_s": wall,
           "step_s": [round(s.seconds, 3) for s in report.steps],
           "gpu_peak_gib": [round((p["device_used_bytes"] - p["baseline_device_bytes"]) / 2**30, 2) for p in peaks],
           "notes": [n for n in report.notes if "all-to-all" in n or "sequence parallel" in n],
           "seq_len": result.plan.geometry.seq_len, "memory_mode": result.plan.memory_mode}
    if result.plan.sp is not None:
        sp = result.plan.sp
        row.update(expected_speedup=round(sp.expected_speedup, 3), link_gbps=round(sp.link_gbps, 2),
                   link_gb_per_block=round(sp.link_bytes_per_block / 1e9, 3))
    return row, result.output["samples"].unbind()


def child(args) -> int:
    from bench.cards import comfy_process  # before torch: it starts ComfyUI as main.py does

    if args.smoke:
        import comfy.cli_args

        comfy.cli_args.args.cpu = True
    else:
        print("ComfyUI:", comfy_process.start_comfyui([]).to_dict(), flush=True)
    import comfy
    import comfy.sd
    import torch

    from longmedia.comfy.passes import sampler as core
    from longmedia.h3.dims import H3_FULL
    from longmedia.planning.types import PlanRequest
    from longmedia.testing.tiny_h3 import TINY_DIMS, write_tiny_h3

    os.environ["LONGMEDIA_SP_TIMING"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        path = write_tiny_h3(tmp, variant="fp32") if args.smoke else Path(args.checkpoint)
        patcher = comfy.sd.load_diffusion_model(str(path))
        dims = TINY_DIMS if args.smoke else H3_FULL
        width, height, seconds = (64, 64, 1.0) if args.smoke else (args.width, args.height, args.seconds)
        job_args = _job(comfy, patcher, dims, width, height, seconds, args.steps, args.seed)
        request = PlanRequest(memory_mode=args.memory_mode, attention_mode="existing")
        cuda = torch.cuda.is_available() and not args.smoke
        meters = [comfy_process.DeviceMemory(index=i) for i in range(args.ranks)] if cuda else []
        kind = "cuda" if cuda else "cpu"
        devices = ",".join(f"cuda:{i}" for i in range(args.ranks)) if cuda else ",".join(["cpu"] * args.ranks)
        rows = []
        one, (sv, sa) = _run(core, job_args, request, None, meters)
        rows.append(one)
        many, (ov, oa) = _run(core, job_args, request, devices, meters)
        rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm())  # noqa: E731
        many.update(rel_dev_video=rel(ov, sv), rel_dev_audio=rel(oa, sa),
                    measured_speedup=round(sum(one["step_s"]) / max(1e-9, sum(many["step_s"])), 3))
        rows.append(many)
        for m in meters:
            m.close()
    print(f"| run ({kind}) | S | mode | s/step | GPU peaks GiB | expected x | measured x | link GB/s | rel dev v/a |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['devices']} | {r['seq_len']} | {r['memory_mode']} | {r['step_s']} | {r['gpu_peak_gib']} | "
              f"{r.get('expected_speedup', '')} | {r.get('measured_speedup', '')} | {r.get('link_gbps', '')} | "
              f"{r.get('rel_dev_video', ''):.2e}/{r.get('rel_dev_audio', 0):.2e} |" if "rel_dev_video" in r else
              f"| {r['devices']} | {r['seq_len']} | {r['memory_mode']} | {r['step_s']} | {r['gpu_peak_gib']} | | | | |")
    for r in rows:
        for n in r["notes"]:
            print(f"  {r['devices']}: {n}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comfyui", default=os.environ.get("LONGMEDIA_COMFYUI_ROOT"),
                    help="a ComfyUI checkout (default $LONGMEDIA_COMFYUI_ROOT)")
    ap.add_argument("--checkpoint", help="the full H3 checkpoint (INT8 for issue 33)")
    ap.add_argument("--width", type=int, default=1344)
    ap.add_argument("--height", type=int, default=768)
    ap.add_argument("--seconds", type=float, default=14.4)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--memory-mode", default="auto", choices=("auto", "normal", "low_vram", "ultra_low_vram"))
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--smoke", action="store_true", help="CPU: a tiny checkpoint on 2 gloo ranks")
    args = ap.parse_args(argv)
    if not args.comfyui:
        print("sp_scaling: SKIPPED, no ComfyUI checkout (pass --comfyui or set LONGMEDIA_COMFYUI_ROOT)")
        return 0 if args.smoke else 2
    if not args.smoke and not args.checkpoint:
        ap.error("--checkpoint is required (or --smoke)")
    from bench.cards.comfy_process import rerun_with_comfy

    code = rerun_with_comfy("bench.sp_scaling", args.comfyui, argv, CHILD_MARK)
    if code is not None:
        return code
    return child(args)


if __name__ == "__main__":
    raise SystemExit(main())
