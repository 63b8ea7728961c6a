"""`python -m longmedia plan` / `longmedia plan`: plan an H3 job for a card without a GPU or ComfyUI.

With no arguments it plans the reference job: H3 INT8 on a 16 GB card with 64 GB RAM, 1344x768,
10 s at 24 fps, low reference budget. Bad input exits with code 2 and names the input and its range.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .planning.attention_path import default_attention_path, resolve_attention_path
from .h3.geometry import KeyframeSpec, ReferenceSpec, build_geometry
from .errors import LongMediaInputError, check_float, check_int
from .planning.types import ATTENTION_MODES, MANUAL_CONTROLS, MEMORY_MODES, ExecutionPlan, PlanRequest
from .planning.planner import plan
from .planning.whole_job import TEXT_ENCODERS, JobPlan, hires_size, plan_job
from .h3.profiles import PRESETS, DeviceProfile, ModelProfile, gib, mib
from .h3.references import REFERENCE_BUDGETS

EXIT_BAD_INPUT = 2
EXIT_DOES_NOT_FIT = 3


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = text.lower().split("x")
        return int(w), int(h)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: expected WIDTHxHEIGHT such as 1024x1024") from None


def _picture(text: str) -> ReferenceSpec:
    w, h = _size(text)
    return _spec(kind="picture", width=w, height=h)


def _video(text: str) -> ReferenceSpec:
    parts = text.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "audio"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a video reference: expected WIDTHxHEIGHT:SECONDS[:audio] "
                                         "such as 1280x720:4:audio")
    w, h = _size(parts[0])
    return _spec(kind="video", width=w, height=h, seconds=_number(parts[1]), with_audio=len(parts) == 3)


def _audio(text: str) -> ReferenceSpec:
    return _spec(kind="audio", seconds=_number(text))


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None


def _spec(**kw) -> ReferenceSpec:
    try:
        return ReferenceSpec(**kw)
    except LongMediaInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="longmedia", description="Plan a MiniMax H3 job for a GPU (no GPU needed).")
    sub = ap.add_subparsers(dest="command")
    p = sub.add_parser("plan", help="plan one job and print the plan (the default command)")
    _add_plan_arguments(p)
    return ap


def _add_plan_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("machine")
    g.add_argument("--vram-gb", type=float, default=16.0, help="GPU memory in GB (default 16)")
    g.add_argument("--ram-gb", type=float, default=64.0, help="system RAM in GB (default 64)")
    g.add_argument("--os", dest="os_name", choices=("linux", "windows", "darwin"), default="linux")
    g.add_argument("--no-dynamic-vram", action="store_true", help="plan as if ComfyUI's dynamic VRAM were off")
    g.add_argument("--model", default="h3-int8",
                   help=f"{', '.join(PRESETS)}, or a .safetensors path (only its header is read)")
    j = p.add_argument_group("job")
    j.add_argument("--width", type=int, default=1344)
    j.add_argument("--height", type=int, default=768)
    j.add_argument("--seconds", type=float, default=None, help="video length (default 10)")
    j.add_argument("--frames", type=int, default=None, help="video length in frames at 24 fps instead of --seconds")
    j.add_argument("--fps", type=int, default=24, help="must be 24, H3's frame rate")
    j.add_argument("--text-tokens", type=int, default=256, help="prompt length in Qwen tokens (default 256)")
    j.add_argument("--picture", type=_picture, action="append", default=[], metavar="WxH", help="picture reference")
    j.add_argument("--video", type=_video, action="append", default=[], metavar="WxH:SECONDS[:audio]",
                   help="video reference, optionally with its soundtrack")
    j.add_argument("--audio", type=_audio, action="append", default=[], metavar="SECONDS", help="audio reference")
    j.add_argument("--first-frame", action="store_true", help="a first-frame picture (Image to Video)")
    j.add_argument("--last-frame", action="store_true", help="a last-frame picture (Image to Video)")
    j.add_argument("--reference-budget", choices=tuple(REFERENCE_BUDGETS), default="low")
    j.add_argument("--ref-image-size", choices=("match", "max"), default="match")
    j.add_argument("--segment-seconds", type=float, default=None, help="generate in segments of this length")
    j.add_argument("--context-frames", type=int, default=None,
                   help="frames each later segment re-reads from the previous (17k+5, default 22)")
    m = p.add_argument_group("modes and manual controls (unset = auto)")
    m.add_argument("--memory-mode", choices=MEMORY_MODES, default="auto")
    m.add_argument("--attention-mode", choices=ATTENTION_MODES, default="auto")
    for name, *_ in MANUAL_CONTROLS:
        m.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None, metavar="N")
    _add_whole_job_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the plan as JSON")
    o.add_argument("--probe-attention", action="store_true",
                   help="ask the attention dispatcher (imports torch, probes backends installed here)")


def _add_whole_job_arguments(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("whole job (text encoder, passes, decode)")
    w.add_argument("--text-encoder", choices=TEXT_ENCODERS, default="nvfp4",
                   help="precision of the Qwen3-VL-32B checkpoint Load CLIP loads (default nvfp4, the workflows' file)")
    w.add_argument("--text-encoder-cpu", action="store_true", help="plan the encode on the CPU (Load CLIP device=cpu)")
    w.add_argument("--steps", type=int, default=20, help="sampler steps of the main pass (default 20)")
    w.add_argument("--hires-scale", type=float, default=None, help="add a Hi-Res pass at this scale (1.0-2.0)")
    w.add_argument("--hires-steps", type=int, default=10, help="steps the Hi-Res pass runs (default 10)")
    w.add_argument("--refiner-steps", type=int, default=0, help="add a Refiner pass of this many steps (default 0)")


def whole_job_from_args(args: argparse.Namespace, main_plan: ExecutionPlan) -> JobPlan:
    """Every stage of the job: the main pass's plan, plus Hi-Res (planned at its own size), Refiner and decode."""
    check_int("--steps", args.steps, 1, 1000, "Give the sampler's step count.")
    check_int("--hires-steps", args.hires_steps, 1, 1000, "Give the Hi-Res pass's step count.")
    check_int("--refiner-steps", args.refiner_steps, 0, 1000, "Give 0 for no Refiner pass.")
    hires = None
    if args.hires_scale is not None:
        check_float("--hires-scale", args.hires_scale, 1.0, 2.0, "Use 1.2-1.5 on 16 GB cards.")
        w, h = hires_size(main_plan.geometry.width, main_plan.geometry.height, args.hires_scale)
        hires = plan_from_args(argparse.Namespace(**{**vars(args), "width": w, "height": h}))
    resolver = resolve_attention_path if args.probe_attention else default_attention_path
    return plan_job(main_plan, steps=args.steps, hires_plan=hires, hires_steps=args.hires_steps,
                    refiner_steps=args.refiner_steps, text_encoder=args.text_encoder,
                    text_encoder_on_cpu=args.text_encoder_cpu, attention_resolver=resolver)


def plan_from_args(args: argparse.Namespace) -> ExecutionPlan:
    if args.frames is not None and args.seconds is not None:
        raise LongMediaInputError("--frames", args.frames, "either --seconds or --frames, not both", "Drop one.")
    seconds = 10.0 if args.seconds is None and args.frames is None else args.seconds
    if args.model in PRESETS:
        model = ModelProfile.preset(args.model)
    elif args.model.endswith(".safetensors"):
        model = ModelProfile.from_safetensors(args.model)
    else:
        raise LongMediaInputError("--model", args.model, f"one of {', '.join(PRESETS)} or a .safetensors path",
                                  "Name a preset or point at a checkpoint file.")
    device = DeviceProfile.card(args.vram_gb, args.ram_gb, os_name=args.os_name,
                                dynamic_vram=not args.no_dynamic_vram)
    keyframes = ((KeyframeSpec(0, in_prompt=True),) if args.first_frame else ()) + \
        ((KeyframeSpec(-1, in_prompt=True),) if args.last_frame else ())
    geometry = build_geometry(args.width, args.height, seconds=seconds, frames=args.frames, fps=args.fps,
                              text_tokens=args.text_tokens, references=tuple(args.picture + args.video + args.audio),
                              keyframes=keyframes, reference_budget=args.reference_budget,
                              ref_image_size=args.ref_image_size, segment_seconds=args.segment_seconds,
                              context_frames=args.context_frames)
    request = PlanRequest(memory_mode=args.memory_mode, attention_mode=args.attention_mode,
                          **{name: getattr(args, name) for name, *_ in MANUAL_CONTROLS})
    resolver = resolve_attention_path if args.probe_attention else default_attention_path
    return plan(model, device, geometry, request, attention_resolver=resolver)


def render(p: ExecutionPlan) -> str:
    """The plan as a readable table."""
    g, m, d, c, gd, mem = p.geometry, p.model, p.device, p.chunks, p.guards, p.memory
    seg = " | ".join(f"{s.kind} {s.rows}" for s in g.segments)
    heads = c.group_heads(m.dims.heads)
    passes = "one pass" if g.segment_count == 1 else \
        f"{g.segment_count} segments (longest pass {g.seconds:.2f} s with {g.context_frames} context frames)"
    rows = [
        ("model", f"{m.name}: {m.param_count / 1e9:.1f} B params, {gib(m.weight_bytes)}, {m.quantization}"),
        ("machine", f"{d.name}, {d.os_name}, dynamic VRAM {'on' if d.dynamic_vram else 'off'}"),
        ("job", f"{g.width}x{g.height}, {g.total_seconds:.2f} s ({g.total_frames} frames), {passes}, "
                f"reference budget {g.reference_budget.name}"),
        ("sequence", f"{g.seq_len} rows: {seg}"),
        ("memory mode", f"{p.memory_mode} (requested {p.requested_memory_mode})"),
        ("attention", f"{p.attention.backend} ({'exact' if p.attention.exact else 'approximate'}, "
                      f"mode {p.attention.mode}, {p.attention.source})"),
        ("chunks", f"qkv {c.qkv_chunk_tokens} | out-proj {c.out_proj_chunk_tokens} | mlp {c.mlp_chunk_tokens} | "
                   f"heads per K/V group {heads if heads < m.dims.heads else 'all'}   (0 = stock path)"),
        ("reserve", f"{mib(p.activation_reserve_bytes)} MB"),
        ("guards", f"inter-block {gd.inter_block_vram_guard_mb} MB, cooldown {gd.inter_block_guard_cooldown_blocks} "
                   f"blocks, emergency {gd.inter_block_guard_emergency_mb} MB, late from block "
                   f"{gd.late_block_guard_start} -> {gd.late_block_guard_target_mb} MB, step cleanup "
                   f"{gd.step_boundary_cleanup_mb} MB"),
        ("prefetch", "on" if p.prefetch else "off"),
        ("pinning", f"{p.pinning.mode} ({gib(p.pinning.pinned_bytes)})"),
        ("peak", f"needs {gib(mem.activation_need_bytes)}, predicted {gib(p.predicted_peak_bytes)} with "
                 f"{gib(mem.resident_weight_bytes)} weights resident; usable {gib(p.usable_bytes)} of "
                 f"{gib(p.budget_bytes)} budget -> {'FITS' if p.fits else 'DOES NOT FIT'}"),
        ("segments", passes if p.segment_suggestion is None else
         f"{passes}; suggest {p.segment_suggestion.seconds:g} s segments"),
    ]
    if p.manual_fields:
        rows.append(("manual", ", ".join(p.manual_fields)))
    width = max(len(k) for k, _ in rows)
    out = ["LongMedia plan"] + [f"  {k.ljust(width)}  {v}" for k, v in rows]
    out += ["", "reasons:"] + [f"  - {r}" for r in p.reasons]
    if p.warnings:
        out += ["", "warnings:"] + [f"  ! {w}" for w in p.warnings]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["plan"] + argv  # `longmedia` alone behaves as `longmedia plan`
    args = build_parser().parse_args(argv)  # argparse errors exit with code 2
    try:
        result = plan_from_args(args)
        job = whole_job_from_args(args, result)
    except LongMediaInputError as exc:
        print(f"longmedia plan: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(json.loads(result.to_json()) | {"whole_job": job.to_dict()}, indent=2))
    else:
        print(render(result) + "\n\n" + "\n".join(job.lines()))
    return 0 if result.fits and job.fits else EXIT_DOES_NOT_FIT
