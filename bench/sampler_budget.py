"""One model step at full H3 dims under a simulated 16 GB card: stock block math vs the planned streamed path.

    python -m bench.sampler_budget                 # H200: budget 15.5 GiB usable (16 GB card less driver/context)
    python -m bench.sampler_budget --smoke         # tiny dims on CPU, proves the script runs

A "step" is the packed sequence through `--blocks` full-size H3 blocks (random weights, bf16 and INT8
through comfy-kitchen when it is importable), weights resident as ComfyUI's dynamic VRAM keeps the
block being computed. The chunk sizes come from the planner (`longmedia.planning.planner.plan`) for the job's
geometry on `DeviceProfile.card(16)`. The budget is enforced with torch.cuda.set_per_process_memory_fraction.
This runs the executor directly, not ComfyUI's sampler loop (ComfyUI is not installed on the GPU box).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
from pathlib import Path

import torch

from bench._common import device_name, emit, median, timed
from longmedia.execution.chunks import ChunkSizes  # noqa: E402
from longmedia.execution.streamed_block import run_block  # noqa: E402
from longmedia.h3.dims import H3_FULL, H3Dims  # noqa: E402
from longmedia.h3.profiles import DeviceProfile, ModelProfile  # noqa: E402
from longmedia.job.geometry import build_geometry  # noqa: E402
from longmedia.planning.planner import plan  # noqa: E402
from longmedia.planning.types import PlanRequest  # noqa: E402
from longmedia.testing.reference_block import ReferenceBlock, make_block_inputs  # noqa: E402
from longmedia.units import GIB  # noqa: E402


def int8_access(blocks):
    try:
        from comfy_kitchen.tensor import QuantizedTensor
    except ImportError:  # named: comfy-kitchen is not installed here, INT8 rows are skipped
        return None
    quant = {}
    for b in blocks:
        for m in (b.attn.qkv_proj, b.attn.out_proj, b.mlp.fc1, b.mlp.fc2):
            quant[id(m)] = QuantizedTensor.from_float(m.weight.data, "TensorWiseINT8Layout")
            m.weight.data = torch.empty(0, device=m.weight.device, dtype=m.weight.dtype)  # only INT8 stays resident

    @contextlib.contextmanager
    def access(module, like):
        yield quant.get(id(module), module.weight), module.bias

    return access


def step_fn(blocks, x, t_emb, seg, rope, chunks, weights):
    def step():
        h = x.clone()
        for b in blocks:
            h = run_block(b, h, t_emb, seg, rope, chunks=chunks, weights=weights)
        return h
    return step


def measure(fn, device, repeats):
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        fn()
        t = median(timed(fn, device, repeats))
        peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
        return t, peak, ""
    except torch.OutOfMemoryError as e:  # named: the point of the comparison
        return float("nan"), 0, "OOM: " + str(e).splitlines()[0][:60]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget-gib", type=float, default=15.5)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--seconds", type=float, nargs="*", default=[10.0, 14.4, 20.0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.smoke:  # proves the script runs: one short job, one repeat
        a.seconds, a.repeats = [2.0], 1
    device = torch.device("cpu" if a.smoke or not torch.cuda.is_available() else "cuda")
    dims = H3Dims(hidden=128, heads=4, head_dim=32, ffn=256, rope_inv_freq_len=4, time_embed_dim=64) if a.smoke else H3_FULL
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.budget_gib * GIB / total))
    g = torch.Generator().manual_seed(0)
    lines = [f"# One step through {a.blocks} full-size H3 blocks under a {a.budget_gib} GiB budget "
             f"({device_name(device)}, {datetime.date.today()}; `python -m bench.sampler_budget "
             f"{' '.join(argv or sys.argv[1:])}`)", "",
             "| job | S | weights | path | chunks (qkv/out/mlp/heads) | s/step | peak GiB | predicted act GiB | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for fmt in ("bf16", "int8"):
        blocks = [ReferenceBlock(dims, dtype=torch.float32).randomize_(g).to(device=device, dtype=dtype)
                  for _ in range(a.blocks)]
        weights = None
        if fmt == "int8":
            weights = int8_access(blocks)
            if weights is None:
                lines.append("| - | - | int8 | - | - | - | - | - | comfy-kitchen not importable: skipped |")
                continue
        for seconds in a.seconds:
            geo = build_geometry(256 if a.smoke else 1344, 128 if a.smoke else 768, seconds=seconds)
            pl = plan(ModelProfile.preset(f"h3-{fmt}"), DeviceProfile.card(vram_gb=16, ram_gb=64), geo,
                      PlanRequest())
            s = geo.seq_len
            x, t_emb, seg, rope = make_block_inputs(dims, s, dtype=dtype, device=device, generator=g)
            for name, chunks in (("stock", ChunkSizes()), (f"planned {pl.memory_mode}", pl.chunks)):
                t, peak, note = measure(step_fn(blocks, x, t_emb, seg, rope, chunks, weights), device, a.repeats)
                c = chunks
                lines.append(f"| {seconds:g} s {geo.width}x{geo.height} | {s} | {fmt} | {name} | {c.qkv_chunk_tokens}/"
                             f"{c.out_proj_chunk_tokens}/{c.mlp_chunk_tokens}/{c.heads_per_group or dims.heads} | "
                             f"{t:.3f} | {peak / GIB:.2f} | {pl.memory.block_activation_bytes / GIB:.2f} | {note} |")
                print(lines[-1], flush=True)
            del x, rope
        del blocks
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return emit(lines, a.out)


if __name__ == "__main__":
    raise SystemExit(main())
