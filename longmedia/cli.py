"""`python -m longmedia plan` / `longmedia plan`: plan an H3 job for a card without a GPU or ComfyUI.

With no arguments it plans the reference job: H3 INT8 on a 16 GB card with 64 GB RAM, 1344x768,
10 s at 24 fps, low reference budget. Exit codes: 0 the plan FITS, 3 it DOES NOT FIT, 2 bad input (one
line on stderr naming the flag, its value and the allowed range).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Sequence

from .cli_args import CHECKPOINT_SUFFIXES, FLAG_ALIASES, UsageError, build_parser
from .errors import LongMediaInputError, check_float, check_int
from .h3 import lattice as L
from .h3.profiles import COMFYUI_HELD_BYTES, PRESETS, DeviceProfile, ModelProfile
from .h3.references import KeyframeSpec
from .job.geometry import build_geometry
from .job.preflight import check_job_latent, check_pass_rows, check_plan_runs
from .job.setup_plan import check_edge
from .limits import MAX_TEXT_TOKENS
from .planning.attention_path import default_attention_path, resolve_attention_path
from .planning.patches import PatchBytes
from .planning.planner import plan
from .planning.stage_times import calls_per_step
from .planning.step_cache import EasyCacheSettings
from .planning.types import MANUAL_CONTROLS, ExecutionPlan, PlanRequest
from .planning.whole_job import JobPlan, hires_size, plan_job
from .report.plan_text import render_plan
from .segments.timeline import MAX_SEGMENT_SECONDS

EXIT_FITS = 0
EXIT_BAD_INPUT = 2
EXIT_DOES_NOT_FIT = 3
def _keyframes(args: argparse.Namespace) -> tuple[KeyframeSpec, ...]:
    """First/last frames: in the prompt as MiniMaxH3ImageToVideo does; anchored as guides beside references
    (stock MiniMaxH3AddGuide: Qwen sees the references, not the frames)."""
    in_prompt = not (args.picture or args.video or args.audio)
    return tuple(KeyframeSpec(i, in_prompt=in_prompt) for i, on in ((0, args.first_frame), (-1, args.last_frame))
                 if on)


def whole_job_from_args(args: argparse.Namespace, main_plan: ExecutionPlan) -> JobPlan:
    """Every stage of the job: the main pass's plan, plus Hi-Res (planned at its own size), Refiner and decode."""
    check_int("--steps", args.steps, 1, 1000, "Give the sampler's step count.")
    check_int("--hires-steps", args.hires_steps, 1, 1000, "Give the Hi-Res pass's step count.")
    check_int("--refiner-steps", args.refiner_steps, 0, 1000, "Give 0 for no Refiner pass.")
    hires = None
    if args.hires_scale is not None:
        check_float("--hires-scale", args.hires_scale, 1.0, 2.0, "Use 1.2-1.5 on 16 GB cards.")
        w, h = hires_size(main_plan.geometry.width, main_plan.geometry.height, args.hires_scale)
        hires = plan_from_args(argparse.Namespace(**{**vars(args), "width": w, "height": h}), setup=False)
    check_float("--cfg", args.cfg, 0.0, 100.0, "Give the CFGGuider's cfg (1 for turbo LoRAs).")
    resolver = resolve_attention_path if args.resolve_attention else default_attention_path
    return plan_job(main_plan, steps=args.steps, hires_plan=hires, hires_steps=args.hires_steps,
                    refiner_steps=args.refiner_steps, text_encoder=args.text_encoder, decode=args.decode,
                    text_encoder_on_cpu=args.text_encoder_cpu, attention_resolver=resolver, cfg=args.cfg,
                    patches=patches_from_args(args), easycache=easycache_from_args(args))


def easycache_from_args(args: argparse.Namespace) -> EasyCacheSettings | None:
    """--easycache's window (the EasyCache node's start_percent and end_percent), or None without --easycache."""
    start = check_float("--easycache-start-percent", args.easycache_start_percent, 0.0, 1.0,
                        "Give EasyCache's start_percent (the node's default is 0.15).")
    end = check_float("--easycache-end-percent", args.easycache_end_percent, 0.0, 1.0,
                      "Give EasyCache's end_percent (the node's default is 0.95).")
    return EasyCacheSettings(start, end) if args.easycache else None


def patches_from_args(args: argparse.Namespace) -> PatchBytes:
    """The LoRAs' bytes: a file's header (--lora), or --lora-rank x --lora-count on every block linear."""
    if args.lora is not None:
        if not os.path.isfile(args.lora):
            raise LongMediaInputError("--lora", args.lora, "a LoRA .safetensors file", "No such file: check the path.")
        check_int("--lora-count", args.lora_count, 1, 16, "Give how many such LoRAs are chained.")
        return PatchBytes.from_file(args.lora, args.lora_count)
    return PatchBytes.from_rank(args.lora_rank, args.lora_count)


def plan_from_args(args: argparse.Namespace, setup: bool = True) -> ExecutionPlan:
    """The main pass's plan (`setup`: after Setup's checks; Hi-Res plans its upscaled latent without them)."""
    if args.frames is not None and args.seconds is not None:
        raise LongMediaInputError("--frames", args.frames, "either --seconds or --frames, not both", "Drop one.")
    seconds = 10.0 if args.seconds is None and args.frames is None else args.seconds
    check_int("--text-tokens", args.text_tokens, 1, MAX_TEXT_TOKENS,
              "Give the prompt's length in Qwen tokens: at least 1 (the encoder always sees the prompt's template).")
    if setup:   # Setup's own check: an edge off the 32-px grid is refused with the nearest sizes, not snapped
        check_edge("--width", args.width)
        check_edge("--height", args.height)
    model = model_from_arg(args.model)
    patches = patches_from_args(args)
    device = patches.on_device(DeviceProfile.card(
        args.vram_gb, args.ram_gb, os_name=args.os_name, dynamic_vram=not args.no_dynamic_vram,
        host_held_bytes=COMFYUI_HELD_BYTES))
    one_pass = covers_whole_job(args, seconds)
    geometry = build_geometry(args.width, args.height, seconds=seconds, frames=args.frames, fps=args.fps,
                              text_tokens=args.text_tokens, references=tuple(args.picture + args.video + args.audio),
                              keyframes=_keyframes(args), reference_budget=args.reference_budget,
                              ref_image_size=args.ref_image_size,
                              segment_seconds=None if one_pass else args.segment_seconds,
                              context_frames=None if one_pass else args.context_frames)
    if setup:
        setup_checks(args, geometry, device)
    request = PlanRequest(memory_mode=args.memory_mode, attention_mode=args.attention_mode,
                          disk_gbps=args.disk_gbps, pinned_memory=not args.no_pinned_memory,
                          patch_host_bytes=patches.host_bytes,
                          **{name: getattr(args, name) for name, *_ in MANUAL_CONTROLS})
    resolver = resolve_attention_path if args.resolve_attention else default_attention_path
    return plan(model, device, geometry, request, attention_resolver=resolver)


def covers_whole_job(args: argparse.Namespace, seconds: float | None) -> bool:
    """A --segment-seconds at least as long as the job: one pass, as Setup runs it (job/setup_plan._segmenting)."""
    seg = args.segment_seconds
    if seg is None or not (0 < seg <= MAX_SEGMENT_SECONDS):
        return False          # absent, or refused by the segment checks with their own message
    if args.frames is not None:
        requested = args.frames
    elif seconds is not None and 0 < seconds < float("inf"):
        requested = max(1, math.ceil(seconds * L.FPS - 1e-9))
    else:
        return False
    return L.frames_for_seconds(seg) >= L.snap_frames(requested)


def model_from_arg(name: str) -> ModelProfile:
    """A preset, or a checkpoint file's header (.safetensors or .sft, as ComfyUI lists them)."""
    if name in PRESETS:
        return ModelProfile.preset(name)
    allowed = f"one of {', '.join(PRESETS)} or a checkpoint file ({' or '.join(CHECKPOINT_SUFFIXES)})"
    if os.path.isdir(name):
        raise LongMediaInputError("--model", name, allowed,
                                  "That is a directory: point at the checkpoint file inside it (for example "
                                  "ComfyUI/models/diffusion_models/minimax_h3_fl2va_pruned_int8_convrot.safetensors).")
    if name.lower().endswith(CHECKPOINT_SUFFIXES):
        if not os.path.isfile(name):
            raise LongMediaInputError("--model", name, allowed, "No such file: check the path.")
        return ModelProfile.from_safetensors(name)
    raise LongMediaInputError("--model", name, allowed, "Name a preset or point at a checkpoint file.")


def setup_checks(args: argparse.Namespace, g, device: DeviceProfile) -> None:
    """What LongMedia Setup refuses before it allocates anything (job/preflight.py, the same functions): the job
    latent within the RAM available and the hard cap, one pass within MAX_PASS_ROWS."""
    total = g.total_frames or g.frames
    seconds_flag = ("frames", args.frames) if args.frames is not None else \
        ("seconds", 10.0 if args.seconds is None else args.seconds)
    try:
        check_job_latent(g.canvas_width, g.canvas_height, total / L.FPS, total, device.ram_available_bytes)
    except LongMediaInputError as exc:  # named: Setup's input name, restated as the flag the user gave
        raise LongMediaInputError(seconds_flag[0], seconds_flag[1], exc.allowed, exc.fix) from None
    name, value = ("segment_seconds", args.segment_seconds) if g.segment_count > 1 else seconds_flag
    check_pass_rows(g.seq_len, g.canvas_width, g.canvas_height, g.frames, name=name, value=value,
                    canvas="--width/--height")


def sampler_checks(p: ExecutionPlan) -> tuple[str | None, tuple[str, ...]]:
    """What the Sampler does with this plan before any GPU work (`check_plan_runs`, the same function):
    (its refusal, or None; the warnings it runs with)."""
    try:
        return None, check_plan_runs(p)
    except LongMediaInputError as exc:  # named: the refusal is this command's verdict, not bad input
        return f"the Sampler refuses this pass before any GPU work: it needs {exc.allowed}. {exc.fix}", ()


def snap_notes(args: argparse.Namespace, p: ExecutionPlan) -> list[str]:
    """What the plan changed from the typed values, and why."""
    g = p.geometry
    out = []
    total = g.total_frames or g.frames
    if args.frames is not None and args.frames != total:
        out.append(f"{args.frames} frames -> {total} frames = {total / L.FPS:.3f} s (H3's 17k+5 frame grid)")
    seconds = 10.0 if args.seconds is None and args.frames is None else args.seconds
    if seconds is not None and abs(seconds * L.FPS - total) > 1e-6:
        out.append(f"{seconds:g} s -> {total / L.FPS:.3f} s = {total} frames (H3's 17k+5 frame grid at 24 fps)")
    if covers_whole_job(args, seconds):
        out.append(f"--segment-seconds {args.segment_seconds:g} covers the whole {total / L.FPS:.3f} s job: one pass "
                   "(as Setup runs it)")
    if args.first_frame or args.last_frame:
        out.append("first/last frame " + ("in the prompt as MiniMaxH3ImageToVideo presents it" if
                                          not (args.picture or args.video or args.audio) else
                                          "anchored as a guide (stock MiniMaxH3AddGuide): with references, Qwen "
                                          "sees the references and not the frames"))
    return out


def no_effect_warnings(args: argparse.Namespace, p: ExecutionPlan) -> list[str]:
    """Flags the user set that change nothing in this plan."""
    out = []
    refs = args.picture or args.video or args.audio
    if args.reference_budget != "low" and not refs:
        out.append(f"--reference-budget {args.reference_budget} has no effect: no --picture, --video or --audio")
    if args.ref_image_size != "match" and not args.picture:
        out.append(f"--ref-image-size {args.ref_image_size} has no effect: it sizes --picture references only")
    rows = p.geometry.seq_len
    for name in ("mlp_chunk_tokens", "sol_qkv_chunk_tokens", "sol_out_proj_chunk_tokens"):
        value = getattr(args, name)
        if value and value >= rows:
            out.append(f"--{name.replace('_', '-')} {value} has no effect: a pass has {rows} rows, so it is one "
                       "chunk (the stock path is 0)")
    if args.inter_block_vram_guard_mb == 0:
        out += [f"--{n.replace('_', '-')} has no effect: --inter-block-vram-guard-mb 0 turns that guard off"
                for n in ("inter_block_guard_cooldown_blocks", "inter_block_guard_emergency_mb")
                if getattr(args, n) is not None]
    if not args.easycache:
        out += [f"--{n.replace('_', '-')} has no effect without --easycache" for n in
                ("easycache_start_percent", "easycache_end_percent")
                if getattr(args, n) != getattr(EasyCacheSettings, n.removeprefix("easycache_"))]
    elif args.hires_scale is not None or args.refiner_steps:
        out.append("--easycache plans the main pass's skips only: the Hi-Res and Refiner passes are planned with "
                   "every model call (their sigmas follow their own denoise)")
    if args.resolve_attention and args.attention_mode == "existing":
        out.append("--resolve-attention has no effect with --attention-mode existing (ComfyUI's attention is kept)")
    manual_chunks = [n for n in ("mlp_chunk_tokens", "sol_qkv_chunk_tokens", "sol_out_proj_chunk_tokens")
                     if getattr(args, n)]
    if manual_chunks and p.memory_mode == "normal":
        out.append(f"{', '.join('--' + n.replace('_', '-') for n in manual_chunks)} in normal mode take the blocks "
                   "off the stock path: within dtype tolerance of stock, not bit for bit")
    return out


def _flag(name: str) -> str:
    if name.startswith("-"):
        return name
    head = name.split(".")[0].split("[")[0]
    if head == "keyframes":
        return "--first-frame/--last-frame"
    return FLAG_ALIASES.get(head, "--" + head.replace("_", "-"))


_FIELD = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")


def as_flags(text: str, known: frozenset[str]) -> str:
    """`text` with the core's snake_case input names that are flags here written as flags."""
    return _FIELD.sub(lambda m: _flag(m.group(0)) if m.group(0) in known else m.group(0), text)


def _known_names(parser: argparse.ArgumentParser) -> frozenset[str]:
    names = {a.dest for a in _plan_parser(parser)._actions if a.option_strings}
    return frozenset(names | set(FLAG_ALIASES))


def _plan_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["plan"]


def error_line(exc: LongMediaInputError, known: frozenset[str]) -> str:
    """The core's input error, one line, naming the CLI flag instead of the node input."""
    value = exc.value
    shown = repr(value) if isinstance(value, str) and (not value or any(c.isspace() for c in value)) else value
    text = f"{_flag(exc.input_name)}={shown} is not allowed: expected {exc.allowed}. {exc.fix}"
    return " ".join(as_flags(text, known).split())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["plan"] + argv  # `longmedia` alone behaves as `longmedia plan`
    parser = build_parser()
    known = _known_names(parser)
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError("choose a command: plan")
        result = plan_from_args(args)
        job = whole_job_from_args(args, result)
    except UsageError as exc:
        print(f"longmedia plan: error: {' '.join(str(exc).split())} (see --help)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except LongMediaInputError as exc:
        print(f"longmedia plan: error: {error_line(exc, known)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    refusal, sampler_warnings = sampler_checks(result)
    fits = result.fits and job.fits and refusal is None
    if args.json:
        text = json.dumps(json.loads(result.to_json()) | {
            "pass_fits": result.fits, "fits": fits, "verdict": job.verdict if refusal is None else refusal,
            "whole_job": job.to_dict(), "sampler": {"refusal": refusal, "warnings": list(sampler_warnings)},
            "easycache": easycache_figures(args, job, result)}, indent=2)
    else:
        notes = snap_notes(args, result)
        extra = no_effect_warnings(args, result) + list(sampler_warnings) + ([refusal] if refusal else [])
        text = as_flags("\n".join(headline(job, easycache_figures(args, job, result))) + "\n\n" + render_plan(result, notes, extra) + "\n\n"
                        + "\n".join(job.lines()), known)
    _print(text)
    return EXIT_FITS if fits else EXIT_DOES_NOT_FIT


def headline(job: JobPlan, easycache: dict | None = None) -> list[str]:
    """The first lines: the whole job's verdict, the main pass's host RAM (what streams from disk, its cost), with
    --easycache the calls it can skip at most (`easycache_figures`), and the whole clip's time; the first two are
    `JobPlan.headline`, as Setup's note and the Sampler's report say them."""
    return list(job.headline()) + ([easycache["line"]] if easycache else []) + [clip_line(job)]


def easycache_figures(args: argparse.Namespace, job: JobPlan, main_plan: ExecutionPlan) -> dict | None:
    """The main pass's EasyCache bound (`JobPlan.easycache`) over its passes and model calls, and its line."""
    bound = job.easycache
    if bound is None:
        return None
    calls, passes = calls_per_step(args.cfg), main_plan.geometry.segment_count
    others = args.hires_scale is not None or args.refiner_steps > 0
    return bound.to_dict() | {"passes": passes, "calls_per_step": calls, "calls": bound.steps * calls * passes,
                              "calls_skippable": bound.steps_skippable * calls * passes,
                              "line": bound.calls_line(calls, passes, " of the main pass" if others else "")}


def clip_line(job: JobPlan) -> str:
    """The whole clip's time (every stage, the sum docs/PERFORMANCE.md's table quotes) and the DiT passes' calls."""
    dit = [s for s in job.stages if s.name.startswith("DiT")]
    return (f"whole clip: about {job.seconds / 60:.0f} min (estimate: {sum(s.seconds for s in dit) / 60:.0f} min of "
            f"DiT passes, the rest text encoding and decode)")


def _print(text: str) -> None:
    """Print, ending quietly when the reader has gone (`longmedia plan | head -1`)."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at devnull so that flush does not raise either
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
