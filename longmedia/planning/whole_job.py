"""`plan_job(main_plan, ...) -> JobPlan`: every stage of an H3 job on one card and one machine's RAM.

Stages, in the order ComfyUI runs them: text encoding (Qwen3-VL-32B, offloaded after use), the DiT
passes (the main pass as `planner.plan` planned it, then Hi-Res and Refiner passes planned the same
way for their own geometry), video decode and audio decode. Each stage gets its VRAM need (what
must fit: activations plus the weights a streamed run needs at once), its host-RAM peak, a verdict,
the stock remedy where it does not fit, and a rough time (`stage_times`, stated as an estimate).

Host RAM: under dynamic VRAM ComfyUI mmaps checkpoints (page cache, evictable: not a need) and pins what RAM
allows; the text encoder and the DiT stages take their host RAM from `host_ram.plan_host_ram` (the need is the
process, the latents and the headroom; the weights that are neither pinned nor cached stream from the file every
model call). Without dynamic VRAM the weights that stream stay in RAM: a need. ComfyUI's RAM-pressure cache (its
default) releases the text encoder and pinned buffers when RAM runs short, so a stage counts only what it needs
itself plus the outputs still alive (the decoded video while the audio decodes).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..attention.schedule import SolSettings, exact_step_count
from ..errors import check_choice
from ..h3 import lattice as L
from ..h3.geometry import Geometry
from ..h3.profiles import DeviceProfile, gib, gib_pair
from ..units import GIB, MIB
from . import stage_formulas as F
from . import stage_times as T
from .around_blocks import WORKSPACE_FIXED
from .attention_path import default_attention_path
from .host_ram import (
    DEFAULT_DISK_GBPS,
    PROCESS_HOST_BYTES,
    HostRamPlan,
    plan_host_ram,
)
from .patches import PatchBytes
from .planner import pass_host_ram, plan
from .step_cache import EasyCacheBound, EasyCacheSettings, pass_bound
from .types import ExecutionPlan, PlanRequest

TEXT_ENCODERS = tuple(F.TEXT_ENCODER_VARIANTS)
# How the job is decoded and saved: LongMedia Decode & Save (one chunk of frames in RAM), or stock VAEDecode +
# VAEDecodeAudio + CreateVideo + SaveVideo (the whole video in RAM as float32 frames).
DECODE_PATHS = ("longmedia", "stock")
DECODE_NODE = "LongMedia Decode & Save"
RAM_SLACK_FRACTION = 0.05      # RAM kept free beyond a stage's own bytes (allocator, Python, ComfyUI's caches)
MAIN_PASS = "DiT main pass"
@dataclass(frozen=True)
class StagePlan:
    """One stage of the job: what it needs, what the machine has, the verdict and what to change."""

    name: str
    vram_need_bytes: int          # must fit in the usable VRAM (0: runs on the CPU)
    vram_usable_bytes: int
    ram_need_bytes: int           # host RAM the stage holds at its peak
    ram_available_bytes: int
    seconds: float                # rough estimate
    detail: str
    remedy: str | None = None
    host_ram: HostRamPlan | None = None   # the text encoder and DiT stages' (`host_ram.plan_host_ram`)

    @property
    def fits_vram(self) -> bool:
        return self.vram_need_bytes <= self.vram_usable_bytes

    @property
    def fits_ram(self) -> bool:
        return self.ram_need_bytes <= self.ram_available_bytes

    @property
    def fits(self) -> bool:
        return self.fits_vram and self.fits_ram

    def to_dict(self) -> dict:
        return asdict(self) | {"fits_vram": self.fits_vram, "fits_ram": self.fits_ram, "fits": self.fits,
                               "host_ram": self.host_ram.to_dict() if self.host_ram is not None else None}


@dataclass(frozen=True)
class JobPlan:
    stages: tuple[StagePlan, ...]
    card: T.CardClass
    text_encoder: str
    notes: tuple[str, ...]
    easycache: EasyCacheBound | None = None   # the main pass's calls stock EasyCache can skip at most (planned skipped)

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.stages)

    @property
    def fits_ram(self) -> bool:
        """Every stage within the host RAM: short of it, the OOM killer ends ComfyUI, whatever the checkpoint."""
        return all(s.fits_ram for s in self.stages)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

    @property
    def verdict(self) -> str:
        if self.fits:
            return f"FITS (every stage; about {_duration(self.seconds)} in all, an estimate)"
        bad = [s.name for s in self.stages if not s.fits]
        return f"DOES NOT FIT ({', '.join(bad)})"

    @property
    def main_host_ram(self) -> HostRamPlan | None:
        """The main pass's host RAM (its `ExecutionPlan.host_ram`): what it pins and streams from disk per model call."""
        return next((s.host_ram for s in self.stages if s.name == MAIN_PASS), None)

    def headline(self) -> tuple[str, ...]:
        """The verdict as the CLI's first lines, Setup's note and the Sampler's report say it: the whole job's, then
        the main pass's host RAM (fits, what streams from disk per model call, or does not fit)."""
        hr = self.main_host_ram
        return (f"LongMedia whole-job plan: {self.verdict}",) + \
            ((f"host RAM (main pass): {hr.verdict}",) if hr is not None else ())

    def shortfalls(self) -> tuple[str, ...]:
        """Each stage that does not fit: what it needs against what the machine has, and its remedy."""
        out = []
        for s in self.stages:
            short = [f"{a} of {k} ({b} {word})" for k, (a, b), word, ok in (
                ("VRAM", _compared(s.vram_need_bytes, s.vram_usable_bytes), "usable", s.fits_vram),
                ("RAM", _compared(s.ram_need_bytes, s.ram_available_bytes), "available", s.fits_ram)) if not ok]
            if short:
                out.append(f"{s.name} needs {' and '.join(short)}" + (f"; to make it fit: {s.remedy}" if s.remedy
                                                                       else ""))
        return tuple(out)

    def to_dict(self) -> dict:
        return {"kind": "whole_job", "stages": [s.to_dict() for s in self.stages], "card_class": asdict(self.card),
                "text_encoder": self.text_encoder, "notes": list(self.notes), "fits": self.fits,
                "easycache": self.easycache.to_dict() if self.easycache is not None else None,
                "seconds_estimate": self.seconds, "verdict": self.verdict, "headline": list(self.headline())}

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def lines(self) -> list[str]:
        """The stage table as text (GiB throughout; times are estimates)."""
        head = ("stage", "VRAM need / usable", "RAM need / available", "time (est.)", "verdict")
        rows = [(s.name, " / ".join(_compared(s.vram_need_bytes, s.vram_usable_bytes)) if s.vram_need_bytes else
                 "CPU", " / ".join(_compared(s.ram_need_bytes, s.ram_available_bytes)), _duration(s.seconds),
                 "fits" if s.fits else "DOES NOT FIT (" + ", ".join(
                     k for k, ok in (("VRAM", s.fits_vram), ("RAM", s.fits_ram)) if not ok) + ")")
                for s in self.stages]
        widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
        out = [f"LongMedia whole-job plan: {self.verdict}"]
        out += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head] + rows]
        out += ["", "stages:"] + [f"  - {s.name}: {s.detail}" for s in self.stages]
        remedies = [f"  > {s.name}: {s.remedy}" for s in self.stages if not s.fits and s.remedy]
        if remedies:
            out += ["", "to make it fit:"] + remedies
        out += ["", "estimates:"] + [f"  - {n}" for n in self.notes]
        return out


def size(n: int) -> str:
    """Bytes in GiB, or in MiB below one GiB."""
    return gib(n) if abs(n) >= GIB else f"{n / MIB:.0f} MiB"


def _compared(a: int, b: int) -> tuple[str, str]:
    """A need and what is usable, never printed alike when they differ."""
    if a != b and size(a) == size(b):
        return gib_pair(a, b)
    return size(a), size(b)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _ram(device: DeviceProfile) -> int:
    return int(device.ram_available_bytes * (1 - RAM_SLACK_FRACTION))


def text_encoder_stage(g: Geometry, device: DeviceProfile, usable: int, variant: str, on_cpu: bool,
                       card: T.CardClass, pinned_memory: bool = True,
                       disk_gbps: float = DEFAULT_DISK_GBPS) -> StagePlan:
    """The encode. Under dynamic VRAM (on the card) the encoder's weights are mmapped and streamed layer by layer:
    not a RAM need (`host_ram.plan_host_ram`); its activations and the process are. On the CPU, or without dynamic
    VRAM, the weights are held in RAM."""
    check_choice("text_encoder", variant, TEXT_ENCODERS, "Name the Qwen3-VL-32B checkpoint's precision.")
    weights = F.text_encoder_weight_bytes(variant)
    tokens = g.text_rows
    act = F.text_encoder_activation_bytes(tokens)
    layer = F.text_encoder_layer_bytes(variant)
    if on_cpu:
        cpu_act = F.text_encoder_activation_bytes(tokens, dtype_bytes=4, materialised_scores=True)
        hr = plan_host_ram(device, weights, layer, 0, own_alloc_bytes=cpu_act, pinned_memory=pinned_memory,
                           disk_gbps=disk_gbps, dynamic_vram=False)
        vram = 0
        detail = f"Qwen3-VL-32B {variant} ({size(weights)}) on the CPU over {tokens} tokens; host RAM {hr.verdict}"
    else:
        resident = weights + act + WORKSPACE_FIXED <= usable
        hr = plan_host_ram(device, 0 if resident else weights, layer, 0, own_alloc_bytes=act,
                           pinned_memory=pinned_memory, disk_gbps=disk_gbps)
        vram = act + layer + WORKSPACE_FIXED
        how = "fits whole in VRAM" if resident else "streams layer by layer (dynamic VRAM)" if device.dynamic_vram \
            else "loaded by ComfyUI's estimate-based loader (dynamic VRAM off)"
        detail = (f"Qwen3-VL-32B {variant}, {size(weights)} of weights, {how}; {tokens} tokens need "
                  f"{size(act)} of activations; offloaded after the encode; host RAM {hr.verdict}")
    remedy = None
    if not hr.fits:
        remedy = _text_encoder_ram_remedy(hr, weights, variant)
    elif vram > usable:
        remedy = "encode on the CPU: set Load CLIP's device to cpu (slow, and needs the weights in RAM)"
    seconds = T.text_encoder_seconds(tokens, weights, None if on_cpu else card)
    if not on_cpu:
        seconds += hr.disk_step_seconds
    return StagePlan("text encoding", vram, usable, hr.need_bytes, hr.ram_available_bytes, seconds, detail, remedy,
                     hr)


def _text_encoder_ram_remedy(hr: HostRamPlan, weights: int, variant: str) -> str:
    if hr.dynamic_vram:
        return (f"free RAM: the encode needs {size(hr.need_bytes)} beside its weights (which stream from the file), "
                f"{size(hr.ram_available_bytes)} available: close other programs")
    beyond = hr.need_bytes - weights
    smaller = [v for v in TEXT_ENCODERS if F.text_encoder_weight_bytes(v) < weights
               and F.text_encoder_weight_bytes(v) + beyond <= hr.ram_available_bytes]
    if smaller:
        return (f"load the {smaller[0]} text encoder ({size(F.text_encoder_weight_bytes(smaller[0]))}; "
                f"{F.TEXT_ENCODER_FILES[smaller[0]]})")
    return (f"more RAM, or encode on the card under dynamic VRAM (its weights then stream from the file): the "
            f"{variant} encoder's {size(weights)} stay in RAM here, and even the nvfp4 encoder needs "
            f"{size(F.text_encoder_weight_bytes('nvfp4'))}")


def _pass_remedies(p: ExecutionPlan, resolver) -> list[str]:
    """What makes a pass that does not fit fit, cheapest first: another memory mode, then segments."""
    out = []
    if p.requested_memory_mode != "auto":
        auto = plan(p.model, p.device, p.geometry, attention_resolver=resolver)
        if auto.fits:
            out.append(f"memory_mode auto (it picks {auto.memory_mode}, which fits this pass)")
    s = p.segment_suggestion
    if s is not None and s.frames:
        out.append(f"a shorter pass: segment_seconds {s.seconds:g}")
    return out or ["a lower resolution or fewer references (even the shortest segment does not fit)"]


def vae_host_bytes(v: F.VideoVAEDims = F.H3_VIDEO_VAE) -> int:
    """Host RAM of the two VAEs while either decodes: ComfyUI's loaders hold each VAE whole (encoder and decoder),
    the video VAE in 16 bits and the audio VAE in float32, for as long as the graph keeps them."""
    return (v.encoder_params + v.decoder_params) * 2 + F.AUDIO_VAE_PARAMS * F.FP32


def sol_calls(p: ExecutionPlan, steps: int) -> int:
    """Of a pass's `steps`, how many run Sol: scheduled_sol's steps after its exact phase (`exact_step_count`, the
    Sampler's default dense_percent), every step of sol; none for exact attention or a pass shorter than
    sol_min_tokens."""
    settings = SolSettings()
    if p.attention.mode not in ("sol", "scheduled_sol") or p.geometry.seq_len < settings.min_tokens:
        return 0
    return steps if p.attention.mode == "sol" else steps - exact_step_count(steps, settings)


def dit_stage(name: str, p: ExecutionPlan, steps: int, card: T.CardClass, passes: int = 1,
              resolver=default_attention_path, cfg: float = 1.0, patches: PatchBytes | None = None,
              skipped: tuple[int, ...] = ()) -> StagePlan:
    """A DiT pass's stage: `steps` sampler steps of `T.calls_per_step(cfg)` model calls each, over `passes`
    segments; `patches` (LoRAs) are named in the stage's detail: their RAM is in the plan's host RAM
    (`PlanRequest.patch_host_bytes`) and their VRAM in its device (`PatchBytes.on_device`). `skipped`: the steps
    of each pass a step cache serves (`step_cache.EasyCacheBound.skippable`), planned as no DiT time."""
    g, mem = p.geometry, p.memory
    patches = PatchBytes() if patches is None else patches
    hr = p.host_ram if p.host_ram is not None else pass_host_ram(p.model, p.device, g, mem.streamed_weight_bytes,
                                                                 PlanRequest())
    calls = T.calls_per_step(cfg)
    exact = T.dit_step_seconds(g.seq_len, p.model.dims.num_blocks, card, mem.streamed_weight_bytes,
                               p.pinning.pinned_bytes, p.prefetch)
    sol_steps = sol_calls(p, steps)
    sol = T.dit_step_seconds(g.seq_len, p.model.dims.num_blocks, card, mem.streamed_weight_bytes,
                             p.pinning.pinned_bytes, p.prefetch, sol=True) if sol_steps else exact
    # each step's calls, with most of the read time landing on each model call (measured; not overlapped yet);
    # scheduled_sol's Sol steps are its last ones; a skipped step costs nothing
    step_seconds = [calls * ((exact if i < steps - sol_steps else sol) + hr.disk_step_seconds) for i in range(steps)]
    step = sum(step_seconds) / steps
    pass_seconds = sum(s for i, s in enumerate(step_seconds) if i not in skipped)
    disk = (f"; {size(hr.disk_bytes_per_call)} of them from disk per model call (about {hr.disk_seconds_per_call:.1f} s "
            f"at {hr.disk_gbps:g} GB/s, of which about {hr.disk_step_seconds:.1f} s adds to the step per call)"
            if hr.streams_from_disk else "")
    cfg_text = (f"cfg {cfg:g}: {calls} model call{'s' if calls > 1 else ''} per step"
                + (" (the negative prompt's too)" if calls > 1 else " (ComfyUI skips the negative prompt's call)"))
    sol_text = f"; {sol_steps} of the {steps} steps run Sol" if sol_steps else ""
    lora_text = (f"; patches ({patches.source}) hold {size(patches.host_bytes)} in RAM, "
                 f"{size(patches.vram_bytes(p.model.dims))} on the card (planned as held)" if patches.present else "")
    detail = (f"{p.memory_mode}, {g.width}x{g.height}, {g.frames} frames per pass, {g.seq_len} rows, "
              f"{steps} steps x {passes} pass{'es' if passes > 1 else ''}, {cfg_text}{sol_text}; weights resident "
              f"{size(mem.resident_weight_bytes)}, streamed {size(mem.streamed_weight_bytes)} per model call "
              f"(pinned {size(hr.pinned_bytes)}, page cache {size(hr.page_cache_bytes)}){disk}; host RAM "
              f"{hr.verdict}{lora_text}; about {step:.1f} s per step"
              + (f"; EasyCache skips at most {len(skipped)} of the {steps} steps per pass" if skipped else ""))
    ram_need = hr.need_bytes   # the patches' RAM is in it (PlanRequest.patch_host_bytes)
    remedy = None
    if not p.fits:
        remedy = "; or ".join(_pass_remedies(p, resolver))
    elif not hr.fits or ram_need > hr.ram_available_bytes:
        remedy = _dit_ram_remedy(p, hr)
    return StagePlan(name, mem.activation_need_bytes, p.usable_bytes, ram_need, hr.ram_available_bytes,
                     pass_seconds * passes, detail, remedy, hr)


def _dit_ram_remedy(p: ExecutionPlan, hr: HostRamPlan) -> str:
    """What brings a DiT stage's true need within RAM. No smaller DiT checkpoint is published (Comfy-Org/MiniMax-H3
    ships the INT8 files the README lists), so none is suggested."""
    if not hr.dynamic_vram:
        return (f"re-enable dynamic VRAM (drop --disable-dynamic-vram): its {size(hr.weights_host_bytes)} of streamed "
                "weights then stream from the checkpoint file instead of staying in RAM; or more RAM")
    s = p.segment_suggestion
    shorter = f"a shorter pass (segment_seconds {s.seconds:g})" if s is not None and s.frames else \
        "shorter passes (segment_seconds)"
    return (f"free RAM (close other programs): the stage needs {size(hr.need_bytes)} beside the weights, which "
            f"stream from the checkpoint file; its latents take {size(hr.latent_bytes)}: {shorter}, a shorter job or "
            "a lower resolution lowers them")


def decode_stages(g: Geometry, device: DeviceProfile, usable: int, card: T.CardClass,
                  decode: str = "longmedia") -> tuple[StagePlan, ...]:
    """Video and audio decode. `decode`: "longmedia" (Decode & Save: audio first, then the video one chunk at a
    time into the file) or "stock" (VAEDecode's whole video in RAM, then the audio beside it)."""
    check_choice("decode", decode, DECODE_PATHS, f"longmedia = {DECODE_NODE}; stock = VAEDecode + SaveVideo.")
    frames = g.total_frames or g.frames
    w, h = g.width, g.height
    ram_avail = _ram(device)
    v = F.H3_VIDEO_VAE
    stock = F.stock_video_decode_estimate(frames, w, h)
    formula = F.video_decode_activation_bytes(frames, w, h)
    dec_weights = v.decoder_params * 2
    vram = max(stock, formula) + v.decoder_block_params * 2 + WORKSPACE_FIXED
    if not device.dynamic_vram:
        vram = max(stock, formula) + dec_weights + WORKSPACE_FIXED
    video = F.decoded_video_bytes(frames, w, h)
    audio = F.decoded_audio_bytes(frames)
    bounded = F.bounded_decode_host_bytes(w, h)
    held = bounded + audio if decode == "longmedia" else video
    vaes = vae_host_bytes()
    ram_v = held + vaes + PROCESS_HOST_BYTES
    remedy_v = None
    if ram_v > ram_avail and decode == "stock":
        remedy_v = (f"the decoded video is {size(video)} of float32 frames: decode and save with {DECODE_NODE} "
                    f"(RAM holds one {v.written_chunk_frames}-frame chunk, about {size(bounded)}, at any length; "
                    "--decode longmedia), or a shorter job or a lower resolution")
    elif ram_v > ram_avail:
        remedy_v = (f"more RAM: the VAEs' {size(vaes)} of weights and one chunk "
                    f"({size(bounded)}) must fit")
    elif vram > usable:
        remedy_v = "decode on the CPU: start ComfyUI with --cpu-vae (slow)"
    if decode == "longmedia":
        output = (f"{DECODE_NODE} writes each {v.written_chunk_frames}-frame chunk to the mp4 as it is decoded: RAM "
                  f"holds {size(bounded)} (one chunk of float32 frames and the encoder's frames, an estimate) and "
                  f"the {size(audio)} waveform, at any length (stock VAEDecode would hold {size(video)})")
    else:
        output = f"output {size(video)} of float32 frames in RAM (stock VAEDecode)"
    video_stage = StagePlan(
        "video decode", vram, usable, ram_v, ram_avail, T.video_decode_seconds(frames, w, h, card),
        f"{frames} frames at {w}x{h}; stock reserves {size(stock)} (its memory_used_decode), the decode's own peak "
        f"is {size(formula)} (256 px tiles, 28-frame chunks); decoder weights {size(dec_weights)} in 16 bits (RAM "
        f"holds both VAEs whole: {size(vaes)}); {output}",
        remedy_v)
    a_stock = F.stock_audio_decode_estimate(F.audio_samples(frames))
    a_weights = F.AUDIO_VAE_DECODER_PARAMS * F.FP32
    beside = video if decode == "stock" else 0
    ram_a = beside + audio + vaes + PROCESS_HOST_BYTES
    remedy_a = None
    if ram_a > ram_avail:
        remedy_a = (f"the video ({size(video)}) and audio stay in RAM together: decode and save with {DECODE_NODE} "
                    "(--decode longmedia), or a shorter job or a lower resolution" if decode == "stock" else
                    f"more RAM: the VAEs' {size(vaes)} of weights must fit")
    elif a_stock + a_weights > usable:
        remedy_a = "decode on the CPU: start ComfyUI with --cpu-vae (slow)"
    audio_stage = StagePlan(
        "audio decode", a_stock + a_weights, usable, ram_a, ram_avail, 1.0,
        f"{F.audio_samples(frames)} samples x 2 channels at 32 kHz; stock reserves {size(a_stock)}; waveform "
        f"{size(audio)}" + (", beside the decoded video" if decode == "stock" else
                            f", decoded first ({DECODE_NODE} decodes the audio whole, as VAEDecodeAudio)"),
        remedy_a)
    return video_stage, audio_stage


def plan_job(main: ExecutionPlan, *, steps: int = 20, request: PlanRequest | None = None,
             hires_geometry: Geometry | None = None, hires_plan: ExecutionPlan | None = None,
             hires_steps: int = 10, refiner_steps: int = 0,
             text_encoder: str = "nvfp4", text_encoder_on_cpu: bool = False, decode: str = "longmedia",
             attention_resolver=default_attention_path, cfg: float = 1.0,
             patches: PatchBytes | None = None, easycache: EasyCacheSettings | EasyCacheBound | None = None) -> JobPlan:
    """Plan every stage; `main` is the main pass's plan (its geometry, model and device are the job's).

    hires_geometry: the Hi-Res pass's geometry (None = no Hi-Res), planned here with `planner.plan`
    and `request`; or hires_plan, that pass already planned. refiner_steps > 0 adds a Refiner pass at
    the final size. decode: "longmedia" (LongMedia Decode & Save, the shipped workflows' end) or "stock"
    (VAEDecode + VAEDecodeAudio + CreateVideo + SaveVideo). cfg: the guider's (1: one model call per step, else
    two). patches: the model's LoRAs (`PatchBytes`), counted in every DiT stage's RAM; plan `main` (and
    `hires_plan`) on `patches.on_device(device)` for their VRAM. easycache: stock EasyCache on the model: the steps
    it can skip at most (`step_cache.easycache_bound` on H3's simple sigmas, or a bound of `steps` steps on the pass's
    own sigmas: the Sampler's) are planned skipped in every main pass (the best case); Hi-Res and Refiner passes are
    planned with every call (their schedules follow their own denoise).
    """
    request = PlanRequest() if request is None else request
    model, device, g = main.model, main.device, main.geometry
    card = T.card_class(device.vram_total_bytes)
    bound = pass_bound(steps, easycache)
    usable = main.usable_bytes
    settings = main.host_ram if main.host_ram is not None else request
    stages = [text_encoder_stage(g, device, usable, text_encoder, text_encoder_on_cpu, card,
                                 settings.pinned_memory, settings.disk_gbps),
              dit_stage(MAIN_PASS, main, steps, card, g.segment_count, attention_resolver, cfg, patches,
                        bound.skippable if bound is not None else ())]
    final = main
    if hires_geometry is not None and hires_plan is None:
        hires_plan = plan(model, device, hires_geometry, request, attention_resolver=attention_resolver)
    if hires_plan is not None:
        final = hires_plan
        stages.append(dit_stage("DiT Hi-Res pass", final, hires_steps, card, final.geometry.segment_count,
                                attention_resolver, cfg, patches))
    if refiner_steps > 0:
        stages.append(dit_stage("DiT Refiner pass", final, refiner_steps, card,
                                final.geometry.segment_count, attention_resolver, cfg, patches))
    stages.extend(decode_stages(final.geometry, device, usable, card, decode))
    a, b = T.block_fit()
    notes = (card.describe(),
             (f"DiT: one block takes {a:.3g}*S + {b:.3g}*S^2 s on an H200 (fitted to {T.DIT_BASIS[0][3]} and "
              f"{T.DIT_BASIS[1][3]}, docs/lab/2026-12-02-executor-kernels-planner.md); streamed weights cross at an assumed "
              f"{T.ASSUMED_HOST_GBPS * 1e9 / GIB:.1f} GiB/s pinned, half that pageable"),
             ("weights that stream from disk (neither pinned nor in the page cache: host RAM) are read at the disk's "
              f"{settings.disk_gbps:g} GB/s (--disk-gbps); 80 % of that read time is added to each model call, as "
              "measured on an H100 (16 GiB card, 43.8 GiB INT8 checkpoint, 1.7-2.0 GB/s disk: +6.8 s a step with 32 GiB "
              "of RAM, +14.6 s with 16 GiB, against 33.8 s with all RAM)"),
             (f"model calls: {T.calls_per_step(cfg)} per sampler step at cfg {cfg:g} (ComfyUI skips the negative "
              "prompt's call at cfg 1); Sol steps of scheduled_sol keep "
              f"{T.sol_quadratic_kept():.0%} of a block's S^2 time, fitted to the 20-step schedule measured on an "
              "H100 (docs/PERFORMANCE.md)"),
             (f"text encoder: FLOPs at an assumed {T.ASSUMED_UTILISATION:.0%} of peak (not measured); video "
              f"decode: FLOPs at {T.VAE_DECODE_UTILISATION:.1%} of peak, the rate LongMedia Decode & Save measured "
              "end to end on an H100 (audio and h264 included); loading checkpoints from disk is not counted"))
    return JobPlan(tuple(stages), card, text_encoder, notes, bound)


def hires_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """The Hi-Res node's target size: scale snapped to the 32 px grid."""
    return L.round_canvas(width * scale), L.round_canvas(height * scale)
