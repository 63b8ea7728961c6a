"""The `plan` command line's arguments: the parser, its argument types and groups, and the names the CLI shows for
the core's inputs (`cli.py` plans from what they parse)."""

from __future__ import annotations

import argparse

from .errors import LongMediaInputError
from .h3.profiles import PRESETS
from .h3.references import REFERENCE_BUDGETS, ReferenceSpec
from .planning.host_ram import DEFAULT_DISK_GBPS, DISK_GBPS_BASIS
from .planning.step_cache import EasyCacheSettings
from .planning.types import ATTENTION_MODES, MANUAL_CONTROLS, MEMORY_MODES
from .planning.whole_job import DECODE_PATHS, TEXT_ENCODERS

UNITS = ("Units: --vram-gb and --ram-gb take the size as sold (a '16 GB' card has 16 GiB of memory); the plan "
         "prints memory in GiB and thresholds in MiB, and every -mb flag is in MiB (1 GiB = 1024 MiB). Exit codes: "
         "0 FITS, 3 DOES NOT FIT, 2 bad input.")
# What the core's input names are called on this command line (the rest are `--` + the name with dashes).
FLAG_ALIASES = {"os_name": "--os", "duration": "--seconds/--frames",
                "references": "--picture/--video/--audio", "device": "--vram-gb"}
CHECKPOINT_SUFFIXES = (".safetensors", ".sft")   # what ComfyUI's diffusion_models folder lists as safetensors


class UsageError(Exception):
    """argparse's complaint, answered by `main` with one line and exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse prints usage and exits; we keep one line and main's exit code
        raise UsageError(message)


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
    ap = _Parser(prog="longmedia", description="Plan a MiniMax H3 job for a GPU (no GPU needed).", epilog=UNITS)
    sub = ap.add_subparsers(dest="command")
    p = sub.add_parser("plan", help="plan one job and print the plan (the default command)", epilog=UNITS)
    _add_plan_arguments(p)
    return ap


_CONTROL_HELP = {
    "mlp_chunk_tokens": "MLP rows per chunk (0 = stock whole-sequence MLP)",
    "sol_qkv_chunk_tokens": "attention query rows per chunk (0 = stock attention)",
    "sol_out_proj_chunk_tokens": "out-projection rows per chunk (needs --sol-qkv-chunk-tokens)",
    "vram_activation_reserve_mb": "VRAM kept free, MiB (auto: 512, 768 on Windows, + 2%% of the card)",
    "inter_block_vram_guard_mb": "clean up before a block when less than this many MiB are free (0 = off)",
    "inter_block_guard_cooldown_blocks": "blocks between two inter-block clean-ups",
    "inter_block_guard_emergency_mb": "below this many free MiB, clean up regardless of the cooldown",
    "late_block_guard_start": "block index from which the late target applies",
    "late_block_guard_target_mb": "free MiB wanted before the final layer",
    "step_boundary_cleanup_mb": "at a step boundary, clean up when less than this many MiB are free",
}


def _add_plan_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("machine")
    g.add_argument("--vram-gb", type=float, default=16.0, help="GPU memory as sold, in GB = GiB (default 16)")
    g.add_argument("--ram-gb", type=float, default=64.0, help="system RAM as sold, in GB = GiB (default 64)")
    g.add_argument("--os", dest="os_name", choices=("linux", "windows", "darwin"), default="linux",
                   help="operating system: Windows keeps more VRAM for the desktop (default linux)")
    g.add_argument("--no-dynamic-vram", action="store_true", help="plan as if ComfyUI's dynamic VRAM were off")
    g.add_argument("--disk-gbps", type=float, default=DEFAULT_DISK_GBPS,
                   help=f"the disk's sustained read in GB/s, for weights that stream from the checkpoint file (default "
                        f"{DEFAULT_DISK_GBPS:.1f} GB/s, {DISK_GBPS_BASIS})")
    g.add_argument("--no-pinned-memory", action="store_true",
                   help="plan as if ComfyUI ran with --disable-pinned-memory (no pin cache: weights come from the page "
                        "cache or the disk)")
    g.add_argument("--model", default="h3-int8",
                   help=f"{', '.join(PRESETS)}, or a .safetensors / .sft path (only its header is read; default "
                        "h3-int8)")
    j = p.add_argument_group("job")
    j.add_argument("--width", type=int, default=1344,
                   help="video width in pixels (default 1344), a multiple of 32 as in Setup")
    j.add_argument("--height", type=int, default=768,
                   help="video height in pixels (default 768), a multiple of 32 as in Setup")
    j.add_argument("--seconds", type=float, default=None,
                   help="video length (default 10); planned on H3's 17k+5 frame grid at 24 fps, the snap is shown")
    j.add_argument("--frames", type=int, default=None, help="video length in frames at 24 fps instead of --seconds")
    j.add_argument("--fps", type=int, default=24, help="frames per second: must be 24, H3's frame rate")
    j.add_argument("--text-tokens", type=int, default=256, help="prompt length in Qwen tokens (default 256)")
    j.add_argument("--picture", type=_picture, action="append", default=[], metavar="WxH",
                   help="picture reference (repeatable)")
    j.add_argument("--video", type=_video, action="append", default=[], metavar="WxH:SECONDS[:audio]",
                   help="video reference, optionally with its soundtrack (repeatable)")
    j.add_argument("--audio", type=_audio, action="append", default=[], metavar="SECONDS",
                   help="audio reference (repeatable)")
    j.add_argument("--first-frame", action="store_true",
                   help="a first-frame picture (Image to Video; with references it is anchored as a guide)")
    j.add_argument("--last-frame", action="store_true",
                   help="a last-frame picture (Image to Video; with references it is anchored as a guide)")
    j.add_argument("--reference-budget", choices=tuple(REFERENCE_BUDGETS), default="low",
                   help="how large references may be before they are shrunk (default low)")
    j.add_argument("--ref-image-size", choices=("match", "max"), default="match",
                   help="picture references: sized to the video (match) or to 2048 px short edge (max)")
    j.add_argument("--segment-seconds", type=float, default=None, help="generate in segments of this length")
    j.add_argument("--context-frames", type=int, default=None,
                   help="frames each later segment re-reads from the previous (17k+5, default 22)")
    m = p.add_argument_group("modes and manual controls (unset = auto)")
    m.add_argument("--memory-mode", choices=MEMORY_MODES, default="auto",
                   help="auto takes the least constrained mode that fits (default auto)")
    m.add_argument("--attention-mode", choices=ATTENTION_MODES, default="auto",
                   help="auto: exact attention that fits; sol / scheduled_sol: approximate (default auto)")
    for name, *_ in MANUAL_CONTROLS:
        m.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None, metavar="N",
                       help=_CONTROL_HELP[name])
    _add_whole_job_arguments(p)
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the plan as JSON")
    o.add_argument("--resolve-attention", action="store_true",
                   help="ask the attention dispatcher (imports torch, checks which backends are installed here)")


def _add_whole_job_arguments(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("whole job (text encoder, passes, decode)")
    w.add_argument("--text-encoder", choices=TEXT_ENCODERS, default="nvfp4",
                   help="precision of the Qwen3-VL-32B checkpoint Load CLIP loads (default nvfp4, the workflows' file)")
    w.add_argument("--text-encoder-cpu", action="store_true", help="plan the encode on the CPU (Load CLIP device=cpu)")
    w.add_argument("--steps", type=int, default=20, help="sampler steps of the main pass (default 20)")
    w.add_argument("--cfg", type=float, default=1.0,
                   help="the guider's cfg: 1 runs one model call per step (ComfyUI skips the negative prompt's call; "
                        "the shipped workflows and turbo LoRAs), any other value two (default 1)")
    w.add_argument("--lora-rank", type=int, default=0,
                   help="rank of the LoRA(s) on the model (LoraLoaderModelOnly): their tensors count in the DiT "
                        "stages' RAM and VRAM (default 0, none)")
    w.add_argument("--lora-count", type=int, default=1, help="how many LoRAs of --lora-rank are chained (default 1)")
    w.add_argument("--lora", default=None, metavar="FILE",
                   help="a LoRA .safetensors file instead of --lora-rank: its header gives the bytes (times "
                        "--lora-count)")
    w.add_argument("--easycache", action="store_true",
                   help="ComfyUI's EasyCache node on the model: the main pass's model calls it can skip at most (read "
                        "from its code: its window's steps after the first two) are planned skipped, the best case")
    w.add_argument("--easycache-start-percent", type=float, default=EasyCacheSettings.start_percent,
                   help="EasyCache's start_percent (default %(default)g, the node's)")
    w.add_argument("--easycache-end-percent", type=float, default=EasyCacheSettings.end_percent,
                   help="EasyCache's end_percent (default %(default)g, the node's)")
    w.add_argument("--hires-scale", type=float, default=None, help="add a Hi-Res pass at this scale (1.0-2.0)")
    w.add_argument("--hires-steps", type=int, default=10, help="steps the Hi-Res pass runs (default 10)")
    w.add_argument("--refiner-steps", type=int, default=0, help="add a Refiner pass of this many steps (default 0)")
    w.add_argument("--decode", choices=DECODE_PATHS, default="longmedia",
                   help="longmedia: LongMedia Decode & Save, RAM of one chunk at any length (the shipped workflows); "
                        "stock: VAEDecode + CreateVideo + SaveVideo, the whole video in RAM (default longmedia)")
