"""Where one H3 block's time goes, per kernel: the stock block, LongMedia's streamed block (exact), and with Sol.

    . tools/gpu/bootstrap.sh && python3 -m bench.block_profile --out OUT/profile.md --jsonl OUT/profile.jsonl
    python -m bench.block_profile --smoke                      # tiny dims on the CPU: proves the script runs
    python -m bench.block_profile --compare BEFORE.jsonl AFTER.jsonl   # before / after, per path and category

One full-width block (random weights) on the packed rows of a 1344x768, 14.4 s job with 128 text tokens (109,190
rows: text, audio, video spans as ComfyUI packs them), under torch.inference_mode(), warmed up, then `--calls`
calls each profiled by torch.profiler (CPU + CUDA activities), one profile per call so the input's copy stays
outside. Each kernel's own device time (self CPU time on the CPU) goes to a category by
`bench/_kernel_categories.py`'s ordered rules: attention, GEMM, quantise/dequantise, rope, norms & modulation,
copies/casts, other. The table gives ms per call and the share of the profiler's total; a second table gives each
category's top 5 kernels; `--jsonl` writes one row per path (`--compare` reads two such files).

Weights: with a ComfyUI checkout (`--comfyui`, default $LONGMEDIA_COMFYUI_ROOT; the script reruns itself with the
checkout on its import path) the block is ComfyUI's own `DiTBlock` with block 0's tensors of the card bench's
checkpoint (`longmedia.testing.full_h3`): INT8 tensorwise qkv/out/fc1/fc2 loaded through ComfyUI's mixed-precision
ops as comfy-kitchen QuantizedTensors (`--format int8`, the default), or bf16. The streamed paths take their weights
through LongMedia's ComfyUI weight access, as the Sampler does. Without ComfyUI the block is the clean-room
reference block in bf16 (fp32 on the CPU), and the output says so.

Paths: `stock` is the block's own forward; `streamed exact` is `run_block` with the plan's chunks and exact backend
for `--card-gib` (16) at this job (`--chunks`, `--exact` to pick others); `streamed sol` the same with Sol at
`--sol-tau` (the plan's Sol backend; sinks on the text and audio rows as the product's default). Every attention
call the bench hands to a block runs inside a profiler scope, so all its kernels count as attention.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from bench._kernel_categories import ATTENTION_SCOPE
from bench._profile_table import PathProfile, compare, merged, read_rows, row, tables, tally

CHILD_MARK = "LONGMEDIA_BLOCK_PROFILE_CHILD"  # set in the one rerun with ComfyUI on PYTHONPATH
MOD_ROW = {"video": 0, "text": 1, "audio": 5}  # ComfyUI's mod_segments rows for t_emb's two timesteps (video first)
SMOKE_SPANS = (("text", 16), ("audio", 64), ("video", 520))


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny dims on the CPU, 2 calls: proves the script runs")
    p.add_argument("--comfyui", default=os.environ.get("LONGMEDIA_COMFYUI_ROOT", "").strip() or None,
                   help="a ComfyUI checkout: its DiTBlock and INT8 ops (default $LONGMEDIA_COMFYUI_ROOT)")
    p.add_argument("--format", choices=("int8", "bf16"), default="int8", help="the block's linear weights (ComfyUI)")
    p.add_argument("--width", type=int, default=1344)
    p.add_argument("--height", type=int, default=768)
    p.add_argument("--seconds", type=float, default=14.4)
    p.add_argument("--text-tokens", type=int, default=128)
    p.add_argument("--seq", type=int, default=None, help="packed rows (default: the job's); the text and audio spans "
                   "stay, the video span takes the rest")
    p.add_argument("--calls", type=int, default=3, help="profiled block calls per path")
    p.add_argument("--warmup", type=int, default=2, help="calls before (Triton compiles, cuDNN plans); at least 1")
    p.add_argument("--paths", nargs="*", choices=("stock", "exact", "sol"), default=["stock", "exact", "sol"])
    p.add_argument("--card-gib", type=float, default=16.0, help="the card the plan's chunks and backends are for")
    p.add_argument("--chunks", default="plan", help="qkv/out/mlp/heads for both streamed paths, or plan")
    p.add_argument("--exact", default="plan", help="the streamed exact path's backend (plan: the plan's auto)")
    p.add_argument("--sol", default="plan", help="the Sol path's backend (plan: the plan's sol)")
    p.add_argument("--sol-tau", type=float, default=None, help="default: SolSettings' tau_start")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="write the tables here too")
    p.add_argument("--jsonl", type=Path, help="write one JSON row per path here")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"), help="print before/after and exit")
    a = p.parse_args(argv)
    if a.calls < 1 or a.warmup < 1:
        p.error(f"--calls and --warmup must be >= 1, got {a.calls} and {a.warmup}")
    if a.smoke:
        a.calls, a.warmup = 2, 1
    return a


def _spans(a, geometry_spans):
    """(start, stop, kind) row spans: the job's, or with --seq its text and audio spans and the rest video."""
    sizes = SMOKE_SPANS if a.smoke else tuple((s.kind, s.rows) for s in geometry_spans)
    if a.seq is not None:
        head = [(k, n) for k, n in sizes if k in ("text", "audio")]
        if a.seq <= sum(n for _, n in head):
            raise SystemExit(f"--seq must exceed the text and audio rows ({sum(n for _, n in head)}), got {a.seq}")
        sizes = (*head, ("video", a.seq - sum(n for _, n in head)))
    out, start = [], 0
    for kind, n in sizes:
        out.append((start, start + n, kind))
        start += n
    return out


def comfy_block(dims, fmt, device, seed, root):
    """ComfyUI's DiTBlock holding block 0 of the card bench's checkpoint.

    Returns (block, weight access, cast_small, existing-attention factory, note)."""
    import comfy.ldm.minimax.model as h3
    import comfy.ops as ops
    import torch

    from longmedia.comfy.patching import block_patch
    from longmedia.comfy.patching.attention_override import existing_attention_fn
    from longmedia.testing.full_h3 import entries, stored_tensors

    items = [e for e in entries(replace(dims, num_blocks=1), fmt) if e.key.startswith("blocks.0.")]
    sd = {e.key[len("blocks.0."):]: t for e, t in stored_tensors(items, seed, device)}
    operations = (ops.mixed_precision_ops({}, compute_dtype=torch.bfloat16) if fmt == "int8"
                  else ops.disable_weight_init)
    block = h3.DiTBlock(dims.hidden, dims.heads, dims.head_dim, dims.ffn, dims.time_embed_dim, 1e-5, 1e-5,
                        dtype=torch.bfloat16, device=device, operations=operations)
    block.load_state_dict(sd, strict=True)
    block.requires_grad_(False)
    kind = type(block.attn.qkv_proj.weight)
    note = (f"ComfyUI's DiTBlock ({root}), {fmt} linear weights "
            f"({kind.__module__}.{kind.__name__}), bf16 compute")
    return (block, block_patch.comfy_weights(), block_patch.comfy_cast_small,
            lambda: existing_attention_fn({}, dims.heads), note)


def reference_block(dims, device, dtype, seed):
    import torch

    from longmedia.testing.reference_block import ReferenceBlock

    block = ReferenceBlock(dims, dtype=torch.float32).randomize_(torch.Generator().manual_seed(seed))
    note = (f"the clean-room reference block in {str(dtype).replace('torch.', '')} (no ComfyUI: INT8 needs ComfyUI's "
            "ops; pass --comfyui or set LONGMEDIA_COMFYUI_ROOT)")
    return block.to(device=device, dtype=dtype), None, None, None, note


def block_inputs(dims, spans, dtype, device, seed):
    import torch

    from longmedia.testing.reference_block import rope_table

    g = torch.Generator(device).manual_seed(seed + 1)
    seq = spans[-1][1]
    x = torch.randn(seq, dims.hidden, generator=g, device=device).to(dtype)
    t_emb = torch.randn(2, dims.time_embed_dim, generator=g, device=device).to(dtype)
    rope = rope_table(seq, dims, dtype, device, torch.Generator().manual_seed(seed + 2))
    return x, t_emb, [(s, e, MOD_ROW[k]) for s, e, k in spans], rope


def scoped(fn):
    """`fn` (an AttentionFn) run inside the profiler scope the categoriser counts as attention."""
    import torch

    def call(*args, **kwargs):
        with torch.profiler.record_function(ATTENTION_SCOPE):
            return fn(*args, **kwargs)
    return call


def _chunks(text):
    from longmedia.execution.chunks import ChunkSizes

    parts = [int(v) for v in text.split("/")]
    if len(parts) not in (3, 4):
        raise SystemExit(f"--chunks must be qkv/out/mlp[/heads] (e.g. 16384/0/16384/0) or plan, got {text!r}")
    return ChunkSizes(*parts)


def _chunk_text(c, dims) -> str:
    return f"{c.qkv_chunk_tokens}/{c.out_proj_chunk_tokens}/{c.mlp_chunk_tokens}/{c.heads_per_group or dims.heads}"


def _choices(a, dims, geometry, device, torch):
    """(exact chunks, exact backend, sol chunks, sol backend, plan note) from the plan for --card-gib, or smoke's."""
    from longmedia.execution.chunks import ChunkSizes

    if a.smoke:
        c = ChunkSizes(128, 0, 128) if a.chunks == "plan" else _chunks(a.chunks)
        return (c, ("existing" if a.comfyui else "sdpa") if a.exact == "plan" else a.exact, c,
                "sol_reference" if a.sol == "plan" else a.sol, "smoke: no plan (tiny dims)")
    from longmedia.h3.profiles import DeviceProfile, ModelProfile
    from longmedia.planning.planner import plan
    from longmedia.planning.types import PlanRequest

    card = DeviceProfile.card(vram_gb=a.card_gib, compute_capability=torch.cuda.get_device_capability(device))
    model = ModelProfile.preset(f"h3-{a.format if a.comfyui else 'bf16'}", dims)
    exact = plan(model, card, geometry, PlanRequest())
    sol = plan(model, card, geometry, PlanRequest(attention_mode="sol"))
    note = (f"plan for a {a.card_gib:g} GiB card at {geometry.seq_len} rows: exact {exact.memory_mode} "
            f"{exact.attention.backend}, sol {sol.memory_mode} {sol.attention.backend}")
    fixed = None if a.chunks == "plan" else _chunks(a.chunks)
    return (fixed or exact.chunks, exact.attention.backend if a.exact == "plan" else a.exact,
            fixed or sol.chunks, sol.attention.backend if a.sol == "plan" else a.sol, note)


def _profile(name, fn, x, work, device, a, ref, torch):
    """Warm `fn` up, time it, profile `a.calls` calls (one profile each); a PathProfile."""
    from torch.profiler import ProfilerActivity, profile

    from bench._common import median, sync

    for _ in range(a.warmup):
        out = fn(work.copy_(x))
    rel = float("nan") if ref is None else float((out.float() - ref.float()).norm() / ref.float().norm())
    walls = []
    for _ in range(a.calls):
        work.copy_(x)
        sync(device)
        walls.append(_timed_once(fn, work, device, torch))
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    parts = []
    for _ in range(a.calls):
        work.copy_(x)
        sync(device)
        with profile(activities=activities) as prof:
            fn(work)
            sync(device)
        parts.append(tally(prof.events(), prof.key_averages(), device=cuda))
    kernels, total = merged(parts)
    timer = "self CUDA" if cuda else "self CPU"
    return PathProfile(name, timer, a.calls, total, kernels, median(walls) * 1e3, rel), out


def _timed_once(fn, work, device, torch):
    import time

    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(work)
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn(work)
    return time.perf_counter() - t0


def run(a, argv) -> int:
    import torch

    from bench._common import device_name, emit
    from longmedia.attention.backends import default_registry
    from longmedia.attention.registry import BuildContext
    from longmedia.attention.schedule import SolSettings, sink_ranges_from_row_spans
    from longmedia.execution.streamed_block import run_block
    from longmedia.h3.dims import H3_FULL, H3Dims
    from longmedia.job.geometry import build_geometry

    if a.comfyui:
        from comfy.cli_args import args as comfy_args

        comfy_args.cpu = a.smoke or not torch.cuda.is_available()
    if not a.smoke and not torch.cuda.is_available():
        print("block_profile: a full-width block needs CUDA; --smoke runs tiny dims on the CPU", file=sys.stderr)
        return 2
    device = torch.device("cpu" if a.smoke else "cuda")
    dims = H3Dims(hidden=128, heads=4, head_dim=32, ffn=256, rope_inv_freq_len=4, time_embed_dim=64) \
        if a.smoke else H3_FULL
    geometry = build_geometry(a.width, a.height, seconds=a.seconds, text_tokens=a.text_tokens)
    spans = _spans(a, geometry.row_spans)
    exact_chunks, exact_name, sol_chunks, sol_name, plan_note = _choices(a, dims, geometry, device, torch)
    if exact_name == "existing" and not a.comfyui:
        print("block_profile: --exact existing is ComfyUI's attention: pass --comfyui (or set LONGMEDIA_COMFYUI_ROOT), "
              "or name a backend of longmedia.attention.backends", file=sys.stderr)
        return 2
    if a.comfyui:
        block, weights, cast_small, existing, note = comfy_block(dims, a.format, device, a.seed, a.comfyui)
        dtype = torch.bfloat16
    else:
        dtype = torch.float32 if a.smoke else torch.bfloat16
        block, weights, cast_small, existing, note = reference_block(dims, device, dtype, a.seed)
    x, t_emb, mod_rows, rope = block_inputs(dims, spans, dtype, device, a.seed)
    settings = SolSettings() if a.sol_tau is None else SolSettings(tau_start=a.sol_tau)
    sinks = sink_ranges_from_row_spans(spans) if settings.sinks_keys else ()
    sol_context = BuildContext(tau=settings.tau_start, sink_ranges=sinks,
                               exact_query_ranges=sinks if settings.sinks_rows else ())
    registry = default_registry()

    def exact_fn():
        return existing() if exact_name == "existing" else registry.build(exact_name, BuildContext())

    def stock(w):
        if a.comfyui:
            return block(w, t_emb, mod_rows, rope, transformer_options={})
        return block(w, t_emb, mod_rows, rope, attention=scoped(registry.build("sdpa", BuildContext())))

    def streamed(chunks, make):  # a fresh AttentionFn per block call, as the executor's callers build it
        return lambda w: run_block(block, w, t_emb, mod_rows, rope, chunks=chunks, attention=scoped(make()),
                                   weights=weights, cast_small=cast_small)

    paths = {"stock": ("stock", stock),
             "exact": (f"streamed exact ({exact_name})", streamed(exact_chunks, exact_fn)),
             "sol": (f"streamed sol ({sol_name}, tau {settings.tau_start:g})",
                     streamed(sol_chunks, lambda: registry.build(sol_name, sol_context)))}
    meta = {"device": device_name(device), "torch": torch.__version__, "weights": note, "seq": spans[-1][1],
            "spans": [list(s) for s in spans], "date": str(datetime.date.today())}
    lines = [f"# One H3 block, time by kernel category ({meta['device']}, torch {torch.__version__}, {meta['date']}; "
             f"`python -m bench.block_profile {' '.join(argv)}`)", "",
             f"- rows: {meta['seq']} ({', '.join(f'{k} {e - s}' for s, e, k in spans)}); weights: {note}",
             f"- {plan_note}; chunks qkv/out/mlp/heads: exact {_chunk_text(exact_chunks, dims)}, "
             f"sol {_chunk_text(sol_chunks, dims)}",
             f"- {a.warmup} warm-up calls, then {a.calls} profiled calls per path; cells: ms per call (share of the "
             f"path's total)", ""]
    profiles, ref, work = [], None, x.clone()
    with torch.inference_mode():
        for key in ("stock", "exact", "sol"):
            if key not in a.paths:
                continue
            name, fn = paths[key]
            prof, out = _profile(name, fn, x, work, device, a, ref, torch)
            facts = {"chunks": None if key == "stock" else _chunk_text(exact_chunks if key == "exact" else sol_chunks,
                                                                       dims),
                     "attention": {"stock": "the block's own", "exact": exact_name, "sol": sol_name}[key]}
            profiles.append(replace(prof, rel_err=0.0 if key == "stock" else prof.rel_err, facts=facts))
            if key == "stock":
                ref = out.clone()
            print(f"{name}: {prof.total_ms:.3f} ms ({prof.timer}) per call, wall {prof.wall_ms:.3f} ms", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    lines += tables(profiles)
    if a.jsonl:
        a.jsonl.parent.mkdir(parents=True, exist_ok=True)
        with open(a.jsonl, "w", encoding="utf-8") as f:
            for p in profiles:
                f.write(json.dumps(row(p, meta)) + "\n")
    return emit(lines, a.out)


def main(argv=None) -> int:
    a = _args(argv)
    if a.compare:
        print("\n".join(compare(read_rows(a.compare[0]), read_rows(a.compare[1]))))
        return 0
    if a.comfyui:
        from bench.cards.comfy_process import rerun_with_comfy

        code = rerun_with_comfy("bench.block_profile", a.comfyui, argv, CHILD_MARK)
        if code is not None:
            return code
    return run(a, sys.argv[1:] if argv is None else list(argv))


__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
