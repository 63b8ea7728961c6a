"""Segment drift at executor level: three passes of equal geometry under a simulated 16 GB card.

    python -m bench.segments                  # H200: 10 s segments (+22 context frames) at 1344x768
    python -m bench.segments --smoke          # tiny dims on CPU, proves the script runs

A segmented job is a run of equal passes, each preceded by the residency boundary. ComfyUI is not on
the GPU box, so this is the executor-level equivalent: `--blocks` full-size H3 blocks (random bf16
weights, resident for the whole run like a loaded model), the packed sequence of a later pass (its
context as a frame-0 guide, as `longmedia.comfy.passes.segmented` builds it), the planner's chunks for a 16 GB
card, and `--segments` passes of `--steps` steps on fresh random inputs. Before every pass
`residency_boundary` runs with no ComfyUI modules: torch's synchronize + empty_cache. Printed per
pass: s/step, memory after the boundary (the baseline) and the peak; then pass N / pass 1 ratios
(target: within 5 %), and the planned path's s/step over one stock step measured in the same run.
One untimed warm-up step of each path runs first, so pass 1 carries no one-time start-up costs.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import types
from pathlib import Path

import torch

from bench._common import device_name, median, timed
from longmedia.comfy.patching.residency import residency_boundary  # noqa: E402
from longmedia.execution.chunks import ChunkSizes  # noqa: E402
from longmedia.execution.streamed_block import run_block  # noqa: E402
from longmedia.h3.dims import H3_FULL, H3Dims  # noqa: E402
from longmedia.h3.profiles import DeviceProfile, ModelProfile  # noqa: E402
from longmedia.h3.references import KeyframeSpec  # noqa: E402
from longmedia.job.geometry import build_geometry  # noqa: E402
from longmedia.planning.planner import plan as make_plan  # noqa: E402
from longmedia.planning.types import PlanRequest  # noqa: E402
from longmedia.segments.timeline import plan_segments  # noqa: E402
from longmedia.testing.reference_block import ReferenceBlock, make_block_inputs  # noqa: E402
from longmedia.units import GIB  # noqa: E402

TOLERANCE = 0.05
SMOKE_DIMS = H3Dims(hidden=128, heads=4, head_dim=32, ffn=256, rope_inv_freq_len=4, time_embed_dim=64)


def later_pass_geometry(width: int, height: int, segment_seconds: float, context_frames: int):
    """(segment plan, geometry) of a full later pass: its frames plus the context guide's video and audio rows."""
    sp = plan_segments(total_seconds=segment_seconds * 4, segment_seconds=segment_seconds,
                       context_frames=context_frames)
    seg = sp.segments[1]
    guide = KeyframeSpec(frame_index=0, frames=seg.context_frames, audio_seconds=seg.context_audio_frames / 40)
    return seg, build_geometry(width, height, frames=seg.pass_frames, keyframes=(guide,))


def step_fn(blocks, inputs, chunks):
    x, t_emb, seg, rope = inputs

    def step():
        h = x.clone()
        for b in blocks:
            h = run_block(b, h, t_emb, seg, rope, chunks=chunks)
        return h
    return step


def run_pass(index, blocks, dims, seq_len, chunks, steps, dtype, device):
    """One pass: boundary, fresh inputs (seeded by the pass index), `steps` timed steps; (row, figures)."""
    boundary = residency_boundary(device=device, comfy=types.SimpleNamespace())   # torch-only fallbacks
    g = torch.Generator().manual_seed(1000 + index)
    inputs = make_block_inputs(dims, seq_len, dtype=dtype, device=device, generator=g)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = timed(step_fn(blocks, inputs, chunks), device, steps)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    del inputs
    after = boundary.after
    # off CUDA torch has no device memory to read (None): the table's columns then read 0, as before
    baseline, reserved = after.allocated_bytes or 0, after.reserved_bytes or 0
    figures = {"s_step": median(times), "baseline": baseline, "reserved": reserved, "peak": peak}
    done = ", ".join(boundary.done) or "none (CPU)"
    row = (f"| {index + 1} | {figures['s_step']:.3f} | {min(times):.3f} / {max(times):.3f} | "
           f"{baseline / GIB:.3f} | {reserved / GIB:.3f} | {peak / GIB:.2f} | {done} |")
    return row, figures


def stock_step(blocks, dims, seq_len, dtype, device):
    """Seconds of one step of the stock block math at the same length, or an OOM note."""
    g = torch.Generator().manual_seed(999)
    try:
        inputs = make_block_inputs(dims, seq_len, dtype=dtype, device=device, generator=g)
        return median(timed(step_fn(blocks, inputs, ChunkSizes()), device, 3)[1:]), ""   # the first call warms up
    except torch.OutOfMemoryError as e:  # named: stock not fitting the budget is a result, not a failure
        return None, "OOM: " + str(e).splitlines()[0][:80]


def ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b else "n/a"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget-gib", type=float, default=15.5, help="usable VRAM of the simulated card")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--segments", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--segment-seconds", type=float, default=10.0)
    p.add_argument("--context-frames", type=int, default=22)
    p.add_argument("--width", type=int, default=1344)
    p.add_argument("--height", type=int, default=768)
    p.add_argument("--no-stock", action="store_true", help="skip the stock reference step")
    p.add_argument("--smoke", action="store_true", help="tiny dims and size on CPU")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    device = torch.device("cpu" if a.smoke or not torch.cuda.is_available() else "cuda:0")
    dims = SMOKE_DIMS if a.smoke else H3_FULL
    width, height, seconds = (256, 128, 1.0) if a.smoke else (a.width, a.height, a.segment_seconds)
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, a.budget_gib * GIB / total), device)
    seg, geo = later_pass_geometry(width, height, seconds, a.context_frames)
    pl = make_plan(ModelProfile.preset("h3-bf16", dims), DeviceProfile.card(vram_gb=16, ram_gb=64), geo,
                   PlanRequest())
    chunks = pl.chunks
    if a.smoke:
        chunks = ChunkSizes(min(chunks.qkv_chunk_tokens or 128, 128), chunks.out_proj_chunk_tokens,
                            min(chunks.mlp_chunk_tokens or 128, 128), chunks.heads_per_group)
    g = torch.Generator().manual_seed(0)
    blocks = [ReferenceBlock(dims, dtype=torch.float32).randomize_(g).to(device=device, dtype=dtype)
              for _ in range(a.blocks)]
    s = geo.seq_len
    lines = [f"# {a.segments} segments x {a.steps} steps through {a.blocks} full-size H3 blocks under a "
             f"{a.budget_gib} GiB budget ({device_name(device)}, {dtype}, {datetime.date.today()}; "
             f"`python -m bench.segments {' '.join(argv if argv is not None else sys.argv[1:])}`)", "",
             f"pass: {seg.pass_frames} frames ({seg.context_frames} context) at {width}x{height}, S = {s} rows; "
             f"plan {pl.memory_mode}, chunks qkv/out/mlp/heads {chunks.qkv_chunk_tokens}/{chunks.out_proj_chunk_tokens}/"
             f"{chunks.mlp_chunk_tokens}/{chunks.heads_per_group or dims.heads}", "",
             "| segment | s/step (median) | min / max | baseline GiB | reserved GiB | peak GiB | boundary steps done |",
             "|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    stock_s, stock_note = (None, "skipped") if a.no_stock else stock_step(blocks, dims, s, dtype, device)
    step_fn(blocks, make_block_inputs(dims, s, dtype=dtype, device=device, generator=g), chunks)()  # one-time warm-up
    figures = []
    for i in range(a.segments):
        row, fig = run_pass(i, blocks, dims, s, chunks, a.steps, dtype, device)
        figures.append(fig)
        lines.append(row)
        print(row, flush=True)
    first, last = figures[0], figures[-1]
    drift = [("s/step", last["s_step"], first["s_step"]), ("peak", last["peak"], first["peak"]),
             ("baseline", last["baseline"], first["baseline"]), ("reserved", last["reserved"], first["reserved"])]
    within = all(b == 0 or abs(x / b - 1) <= TOLERANCE for _, x, b in drift)
    lines += ["", f"segment {a.segments} / segment 1: " + ", ".join(f"{n} {ratio(x, b)}" for n, x, b in drift)
              + f" -> {'within' if within else 'OUTSIDE'} {TOLERANCE:.0%}",
              "stock step (same S, same blocks): " + (f"{stock_s:.3f} s; planned / stock s/step "
                                                      f"{ratio(first['s_step'], stock_s)}" if stock_s else stock_note)]
    text = "\n".join(lines)
    print("\n".join(lines[-3:]))
    if a.out:
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
