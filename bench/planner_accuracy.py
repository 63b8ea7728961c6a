"""Planner accuracy: the plan's predicted block peak vs the peak CUDA measures running that plan.

    python -m bench.planner_accuracy                 # H200: 14 geometries x 3 simulated cards (8/12/16 GB)
    python -m bench.planner_accuracy --budgets 12 24 --blocks 3
    python -m bench.planner_accuracy --smoke         # tiny dims on CPU (LiveBytes), proves the script runs

For each geometry and simulated card, `plan()` picks the memory mode and chunk sizes (model profile
h3-bf16, matching the random bf16 weights used here); the allocator is then capped at the card's size
with `torch.cuda.set_per_process_memory_fraction`, the plan's resident blocks (1, or 2 with prefetch)
are put on the GPU, and `run_block` runs `--blocks` block calls with the plan's chunks.

Measured activation = max_memory_allocated during the calls - allocated before them + the hidden state
x (the formula counts x). Predicted activation = plan.memory.block_activation_bytes
(execution/memory.py for the plan's chunks). Totals add the resident block weights and the block
inputs (rope table, t_emb) to both. Target: measured / predicted activation within 0.90-1.10.
The stock embedding / final-layer terms of the plan are not exercised here (blocks only).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from bench._common import device_name, emit, sync
from longmedia.h3.dims import H3_FULL, H3Dims  # noqa: E402
from longmedia.h3.profiles import DeviceProfile, ModelProfile  # noqa: E402
from longmedia.h3.references import KeyframeSpec, ReferenceSpec  # noqa: E402
from longmedia.job.geometry import build_geometry  # noqa: E402
from longmedia.planning.attention_path import default_attention_path  # noqa: E402
from longmedia.planning.planner import plan  # noqa: E402
from longmedia.planning.types import PlanRequest  # noqa: E402
from longmedia.testing.reference_block import ReferenceBlock, make_block_inputs  # noqa: E402
from longmedia.units import GIB

SMOKE_DIMS = H3Dims(hidden=128, heads=4, head_dim=32, ffn=256, num_blocks=4, rope_inv_freq_len=4,
                    time_embed_dim=64)
_PIC = ReferenceSpec("picture", 1024, 1024)
GEOMETRIES = {
    "1344x768 5s": dict(width=1344, height=768, seconds=5),
    "1344x768 10s": dict(width=1344, height=768, seconds=10),
    "1280x720 10s": dict(width=1280, height=720, seconds=10),
    "1280x720 15s": dict(width=1280, height=720, seconds=15),
    "1280x720 20s": dict(width=1280, height=720, seconds=20),
    "1920x1080 5s": dict(width=1920, height=1080, seconds=5),
    "1920x1080 10s": dict(width=1920, height=1080, seconds=10),
    "768x1344 8s": dict(width=768, height=1344, seconds=8),
    "960x544 30s": dict(width=960, height=544, seconds=30),
    "1344x768 6s 2 pictures": dict(width=1344, height=768, seconds=6, references=(_PIC, _PIC),
                                   reference_budget="high"),
    "1344x768 8s video ref": dict(width=1344, height=768, seconds=8, reference_budget="high",
                                  references=(ReferenceSpec("video", 1280, 720, seconds=4, with_audio=True),)),
    "1920x1080 3s first+last": dict(width=1920, height=1080, seconds=3,
                                    keyframes=(KeyframeSpec(0, in_prompt=True), KeyframeSpec(-1, in_prompt=True))),
    "1280x720 5s heavy refs": dict(width=1280, height=720, seconds=5, reference_budget="max", ref_image_size="max",
                                   references=(ReferenceSpec("video", 1280, 720, seconds=10, with_audio=True),)
                                   + tuple(ReferenceSpec("picture", 2048, 2048) for _ in range(9))),
    "1280x720 3s heavy refs": dict(width=1280, height=720, seconds=3, reference_budget="max", ref_image_size="max",
                                   references=tuple(ReferenceSpec("video", 1280, 720, seconds=10, with_audio=True)
                                                    for _ in range(2))
                                   + tuple(ReferenceSpec("picture", 2048, 2048) for _ in range(9))),
}
SMOKE_GEOMETRIES = {"64x64 1s": dict(width=64, height=64, seconds=1), "96x64 3s": dict(width=96, height=64, seconds=3)}
SMOKE_MODES = {"normal": PlanRequest(memory_mode="normal"),
               "low_vram": PlanRequest(memory_mode="low_vram", sol_qkv_chunk_tokens=128, mlp_chunk_tokens=128),
               "ultra_low_vram": PlanRequest(memory_mode="ultra_low_vram", sol_qkv_chunk_tokens=128,
                                             sol_out_proj_chunk_tokens=64, mlp_chunk_tokens=128)}


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _measure(blocks, inputs, chunks, n_calls: int, device: torch.device) -> tuple[int, int, float]:
    """(activation bytes incl. x, total peak bytes, seconds) of n_calls block calls."""
    from longmedia.execution.streamed_block import run_block

    x, t_emb, seg, rope = inputs
    if device.type == "cuda":
        sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        for i in range(n_calls):
            run_block(blocks[i % len(blocks)], x, t_emb, seg, rope, chunks=chunks)
        sync(device)
        peak = torch.cuda.max_memory_allocated(device)
        return peak - base + _bytes(x), peak, time.perf_counter() - t0
    from longmedia.testing.live_bytes import LiveBytes

    t0 = time.perf_counter()
    with LiveBytes() as lb:
        for i in range(n_calls):
            run_block(blocks[i % len(blocks)], x, t_emb, seg, rope, chunks=chunks)
    fixed = sum(_bytes(p) for b in blocks for p in b.parameters()) + _bytes(rope) + _bytes(t_emb) + _bytes(x)
    return lb.peak_bytes + _bytes(x), lb.peak_bytes + fixed, time.perf_counter() - t0


def _cases(a):
    if a.smoke:
        dev = DeviceProfile(name="smoke", vram_total_bytes=8 * GIB, vram_free_bytes=8 * GIB, allocator_reserved_bytes=0,
                            ram_total_bytes=64 * GIB, ram_available_bytes=60 * GIB, pinned_budget_bytes=24 * GIB,
                            os_name="linux", dynamic_vram=True)
        for name, geo in SMOKE_GEOMETRIES.items():
            for label, req in SMOKE_MODES.items():
                yield name, geo, label, dev, req
        return
    for name, geo in GEOMETRIES.items():
        for gb in a.budgets:
            yield name, geo, f"{gb:g} GB", DeviceProfile.card(gb, a.ram_gb), PlanRequest()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budgets", type=float, nargs="*", default=[8.0, 12.0, 16.0], help="simulated cards, GB")
    p.add_argument("--ram-gb", type=float, default=64.0)
    p.add_argument("--blocks", type=int, default=2, help="block calls per case")
    p.add_argument("--smoke", action="store_true", help="tiny dims on CPU, modes forced")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    device = torch.device("cpu" if a.smoke or not torch.cuda.is_available() else "cuda:0")
    dims = SMOKE_DIMS if a.smoke else H3_FULL
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    model = ModelProfile.preset("h3-bf16", dims=dims)
    if dtype == torch.float32:
        model = replace(model, compute_dtype_bytes=4)
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else 0
    g = torch.Generator().manual_seed(0)
    lines = [f"# Planner accuracy ({device_name(device)}, {dtype}, {datetime.date.today()}; "
             f"`python -m bench.planner_accuracy {' '.join(argv if argv is not None else sys.argv[1:])}`)", "",
             "| geometry | S | card | mode | chunks qkv/out/mlp/heads | resident blocks | predicted act GiB | "
             "measured act GiB | act ratio | predicted total GiB | measured total GiB | total ratio | "
             "under card | s |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    pool: list = []
    for name, geo, label, dev, req in _cases(a):
        geometry = build_geometry(**geo)
        pl = plan(model, dev, geometry, req, attention_resolver=default_attention_path)
        c = pl.chunks
        row = f"| {name} | {geometry.seq_len} | {label} | {pl.memory_mode} | {c.qkv_chunk_tokens}/" \
              f"{c.out_proj_chunk_tokens}/{c.mlp_chunk_tokens}/{c.group_heads(dims.heads)}"
        if not pl.fits:
            lines.append(row + " | - | - | plan does not fit: skipped | | | | | | |")
            print(lines[-1], flush=True)
            continue
        n_res = 2 if pl.prefetch else 1
        while len(pool) < n_res:
            pool.append(ReferenceBlock(dims, dtype=torch.float32).randomize_(g).to(device=device, dtype=dtype))
        blocks = pool[:n_res]
        if device.type == "cuda":
            for extra in pool[n_res:]:
                extra.to("cpu")
            for b in blocks:
                b.to(device)
            torch.cuda.empty_cache()
            torch.cuda.set_per_process_memory_fraction(min(1.0, dev.vram_total_bytes / total), device)
        weights = sum(_bytes(p) for b in blocks for p in b.parameters())
        try:
            inputs = make_block_inputs(dims, geometry.seq_len, dtype=dtype, device=device, generator=g)
            act, peak, secs = _measure(blocks, inputs, c, a.blocks, device)
            pred_act = pl.memory.block_activation_bytes
            pred_total = pred_act + weights + _bytes(inputs[1]) + _bytes(inputs[3])
            ratios.append(act / pred_act)
            lines.append(row + f" | {n_res} | {pred_act / GIB:.3f} | {act / GIB:.3f} | {act / pred_act:.3f} | "
                               f"{pred_total / GIB:.3f} | {peak / GIB:.3f} | {peak / pred_total:.3f} | "
                               f"{'yes' if device.type == 'cpu' or peak <= dev.vram_total_bytes else 'NO'} | "
                               f"{secs:.2f} |")
        except torch.OutOfMemoryError as e:  # named: the plan under-predicted, which is what this bench finds
            lines.append(row + f" | {n_res} | {pl.memory.block_activation_bytes / GIB:.3f} | OOM at the card's "
                               f"size: {str(e).splitlines()[0][:60]} | | | | | NO | |")
        finally:
            inputs = None
            if device.type == "cuda":
                torch.cuda.set_per_process_memory_fraction(1.0, device)
                torch.cuda.empty_cache()
        print(lines[-1], flush=True)
    if ratios:
        inside = sum(0.9 <= r <= 1.1 for r in ratios)
        lines += ["", f"activation ratio measured/predicted: min {min(ratios):.3f}, max {max(ratios):.3f}, "
                      f"{inside}/{len(ratios)} within 0.90-1.10"]
    return emit(lines, a.out)


if __name__ == "__main__":
    raise SystemExit(main())
