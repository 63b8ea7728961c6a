"""The planner's rules with numbers: reserve, prefetch, RAM pinning, guard thresholds, risky manual values,
and segment-length suggestions. Each rule states itself in the reason it returns.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from ..execution.guards import GuardSettings
from ..h3 import lattice as L
from ..h3.geometry import Geometry, RowSpan
from ..h3.profiles import DeviceProfile, ModelProfile, gib, mib
from ..segments.timeline import DEFAULT_CONTEXT_FRAMES
from ..units import GIB, MIB
from .host_ram import HostRamPlan
from .segment_range import suggest_segment_seconds
from .types import MANUAL_FIELDS, MemoryBreakdown, PinningDecision, PlanRequest, SegmentSuggestion

INT8_16GB_CARD_MAX = 18.5 * GIB
PIN_HEADROOM_MIN = 12 * GIB          # RAM left free after pinning: at least this ...
PIN_HEADROOM_FRACTION = 0.20         # ... and at least this share of RAM (text encoder, VAE, OS, browser)
def auto_reserve(device: DeviceProfile) -> int:
    """VRAM kept free for fragmentation and other apps: 512 MiB (768 on Windows) plus 2% of the card."""
    base = 768 * MIB if device.os_name == "windows" else 512 * MIB
    return base + int(0.02 * device.vram_total_bytes)


def is_16gb_int8(model: ModelProfile, device: DeviceProfile) -> bool:
    return model.is_int8 and device.vram_total_bytes <= INT8_16GB_CARD_MAX


def prefetch_decision(model: ModelProfile, device: DeviceProfile, all_resident: bool,
                      disk_bytes_per_call: int = 0) -> tuple[bool, str]:
    """Whether ComfyUI's dynamic-VRAM block prefetch runs. Off is something LongMedia does (it sets
    `prefetch_dynamic_vbars` False inside the model call); on is ComfyUI's own setting, left as it is.

    `disk_bytes_per_call`: what the pass reads from the checkpoint file every model call (host RAM cannot hold
    those weights). ComfyUI's prefetch reads block i+1's weights while block i computes, so where weights come
    from disk it stays on on every card (the planner still drops it where the second block does not fit)."""
    if not device.dynamic_vram:
        return False, "block prefetch off: it needs dynamic VRAM"
    if all_resident:  # nothing streams: ComfyUI's own path, as stock runs it
        return True, ("block prefetch left as ComfyUI runs it: every weight stays resident, so it fetches nothing "
                      "(turned off, torch's pool held 1.5 GiB more than stock's on the H200: docs/lab/2026-12-03-comfyui-cards.md)")
    if disk_bytes_per_call > 0:
        return True, (f"block prefetch on: {gib(disk_bytes_per_call)} of weights come from disk every model call "
                      f"(host RAM cannot hold them), so the next block ({gib(model.block_weight_bytes)}) is read "
                      "and copied while the current one runs")
    if is_16gb_int8(model, device):
        return False, (f"block prefetch off: INT8 weights on a {gib(device.vram_total_bytes)} card "
                       f"(<= {INT8_16GB_CARD_MAX / GIB:g} GiB): a speculative second block "
                       f"({gib(model.block_weight_bytes)}) would compete with live activations")
    return True, (f"block prefetch on: the next block ({gib(model.block_weight_bytes)}) is fetched while "
                  "the current one runs")


def pinning(model: ModelProfile, device: DeviceProfile, streamed: int,
            host_ram: HostRamPlan | None = None) -> PinningDecision:
    """Pin the streamed weights in RAM when that leaves the headroom; else pin what does, else nothing.

    Under dynamic VRAM ComfyUI pins weights itself into its pin cache while RAM is available; LongMedia holds that
    cache to the host-RAM plan's pin budget (`host_ram.plan_host_ram`), which the decision states. Without dynamic
    VRAM the rule below applies on LongMedia's clone of the patcher.
    """
    if device.dynamic_vram and host_ram is not None:
        return _budget_pinning(host_ram, streamed)
    return _pinning(model, device, streamed)


def _budget_pinning(host_ram: HostRamPlan, streamed: int) -> PinningDecision:
    """Under dynamic VRAM: the pin budget LongMedia enforces on ComfyUI's pin cache."""
    if streamed <= 0:
        return PinningDecision("none", 0, host_ram.ram_available_bytes, "RAM pinning not needed: every weight stays "
                               "in VRAM")
    pinned = host_ram.pin_budget_bytes
    mode = "full" if pinned >= streamed else "partial" if pinned > 0 else "none"
    rule = (f"under dynamic VRAM LongMedia holds ComfyUI's pin cache to the plan's pin budget of {gib(pinned)}, "
            f"reserving {gib(host_ram.headroom_bytes)} of RAM beside the process and the latents (ComfyUI's "
            f"{gib(host_ram.floor_bytes)} pin floor, LongMedia's own {gib(host_ram.own_alloc_bytes)}, "
            f"{gib(host_ram.prefetch_window_bytes)} read ahead); during a pass ComfyUI pins until about its floor is "
            f"left (at the lowest 1.7 to 2.0 GiB available, measured under 16 to 48 GiB limits), LongMedia makes room "
            f"before its own allocations and, where weights stream from disk, frees pins at a block start where less "
            f"than {gib(host_ram.floor_bytes // 2)} is available")
    if not host_ram.pinned_memory:
        rule = "pinned memory is off (ComfyUI's --disable-pinned-memory)"
    return PinningDecision(mode, pinned, host_ram.headroom_bytes, f"{rule}: {host_ram.verdict}")


def pin_floor(device: DeviceProfile) -> int:
    """RAM the plan keeps free of pinned weights without dynamic VRAM."""
    return max(PIN_HEADROOM_MIN, int(PIN_HEADROOM_FRACTION * device.ram_total_bytes))


def _pinning(model: ModelProfile, device: DeviceProfile, streamed: int) -> PinningDecision:
    floor = pin_floor(device)
    rule = (f"RAM pinning keeps >= {gib(floor)} RAM free (max of {PIN_HEADROOM_MIN / GIB:g} GiB and "
            f"{PIN_HEADROOM_FRACTION:.0%} of {gib(device.ram_total_bytes)}) and stays within ComfyUI's "
            f"{gib(device.pinned_budget_bytes)} pinned budget")
    if streamed <= 0:
        return PinningDecision("none", 0, device.ram_available_bytes, "RAM pinning not needed: every weight stays "
                               "in VRAM")
    room = min(device.pinned_budget_bytes, device.ram_available_bytes - floor)
    if streamed <= room:
        return PinningDecision("full", streamed, device.ram_available_bytes - streamed,
                               f"{rule}: pinning all {gib(streamed)} of streamed weights leaves "
                               f"{gib(device.ram_available_bytes - streamed)}")
    if room >= model.block_weight_bytes:
        pinned = room - room % max(1, model.block_weight_bytes)
        return PinningDecision("partial", pinned, device.ram_available_bytes - pinned,
                               f"{rule}: the {gib(streamed)} of streamed weights are more than the "
                               f"{gib(room)} that can be pinned; pinning {gib(pinned)} (whole blocks), the rest "
                               "streams from pageable RAM")
    return PinningDecision("none", 0, device.ram_available_bytes,
                           f"{rule}: the {gib(streamed)} of streamed weights are more than the "
                           f"{gib(max(0, room))} that can be pinned, less than one block: weights stream from "
                           "pageable RAM")


GUARD_MARGIN_MB = 256   # cuBLAS workspaces and small allocations made outside torch's cache
# Guard thresholds in MiB of free VRAM: each is at most the card's size (a larger one would act before every block).
GUARD_MB_FIELDS = ("inter_block_vram_guard_mb", "inter_block_guard_emergency_mb", "late_block_guard_target_mb",
                   "step_boundary_cleanup_mb")


def auto_guards(request: PlanRequest, model: ModelProfile, device: DeviceProfile, mem: MemoryBreakdown,
                g: Geometry) -> GuardSettings:
    """Guard thresholds from the plan's own numbers; each manual value replaces its one field.

    The guards read the driver's free VRAM, outside torch's cache (execution/guards.py): activations
    reuse that cache from block to block, so the thresholds cover what is allocated beside it: the next
    block's weights when weights stream, and a small margin; the late-block target adds what the stock
    final layer needs beyond a block phase.
    """
    streams = mem.streamed_weight_bytes > 0
    inter = (mib(model.block_weight_bytes) if streams else 0) + GUARD_MARGIN_MB
    final_extra = max(0, mem.final_bytes - mem.blocks_phase_bytes)
    last = model.dims.num_blocks - 1
    vram = device.vram_total_bytes
    cleanup = 256 if vram <= 8.5 * GIB else 512 if vram <= 18.5 * GIB else 1024
    auto = GuardSettings(inter_block_vram_guard_mb=inter, inter_block_guard_cooldown_blocks=2,
                           inter_block_guard_emergency_mb=max(GUARD_MARGIN_MB // 2, inter // 2),
                           late_block_guard_start=max(0, last - 1) if final_extra else last,
                           late_block_guard_target_mb=mib(final_extra) + GUARD_MARGIN_MB,
                           step_boundary_cleanup_mb=cleanup)
    return replace(auto, **{k: getattr(request, k) for k in MANUAL_FIELDS if k in auto.__dataclass_fields__
                           and getattr(request, k) is not None})


def manual_warnings(request: PlanRequest, cand, usable: int, guards: GuardSettings, auto: GuardSettings,
                    auto_reserve_bytes: int) -> list[str]:
    """Plain-language flags for manual values that put the job at risk; the values themselves are kept."""
    out = []
    chunk_fields = [f for f in ("mlp_chunk_tokens", "sol_qkv_chunk_tokens", "sol_out_proj_chunk_tokens")
                    if getattr(request, f) is not None]
    if chunk_fields and not cand.fits:
        out.append(f"risky: manual {', '.join(f'{f}={getattr(request, f)}' for f in chunk_fields)} leave the "
                   f"pass needing {gib(cand.memory.activation_need_bytes)}, over the {gib(usable)} usable")
    if request.sol_out_proj_chunk_tokens and cand.chunks.qkv_chunk_tokens == 0:
        out.append("sol_out_proj_chunk_tokens has no effect while sol_qkv_chunk_tokens is 0 (stock attention)")
    r = request.vram_activation_reserve_mb
    if r is not None and r * MIB < auto_reserve_bytes // 2:
        out.append(f"risky: vram_activation_reserve_mb={r} is under half the auto {mib(auto_reserve_bytes)} MiB: "
                   "fragmentation or another app can push the job into an OOM")
    if request.inter_block_vram_guard_mb == 0:
        out.append("inter_block_vram_guard_mb=0 turns the inter-block guard off")
    elif request.inter_block_vram_guard_mb is not None and \
            guards.inter_block_vram_guard_mb < auto.inter_block_vram_guard_mb // 2:
        out.append(f"risky: inter_block_vram_guard_mb={guards.inter_block_vram_guard_mb} is under half the auto "
                   f"{auto.inter_block_vram_guard_mb} MiB (the next block's weights and a margin): the guard may "
                   "not act before an OOM")
    if request.inter_block_guard_cooldown_blocks == 0:
        out.append("risky: inter_block_guard_cooldown_blocks=0 lets the guard clean up after every block (slow)")
    if request.inter_block_guard_emergency_mb is not None and \
            guards.inter_block_guard_emergency_mb > guards.inter_block_vram_guard_mb:
        out.append("inter_block_guard_emergency_mb is above inter_block_vram_guard_mb: every guard event is an "
                   "emergency")
    if request.late_block_guard_target_mb is not None and \
            guards.late_block_guard_target_mb < auto.late_block_guard_target_mb // 2:
        out.append(f"risky: late_block_guard_target_mb={guards.late_block_guard_target_mb} is under half the auto "
                   f"{auto.late_block_guard_target_mb} MiB the stock final layer needs beyond a block")
    return out


BLOCK_GUARD_FIELDS = ("inter_block_vram_guard_mb", "inter_block_guard_cooldown_blocks", "inter_block_guard_emergency_mb",
                      "late_block_guard_start", "late_block_guard_target_mb")
"""The manual controls that act only between streamed blocks (the executor's block hook runs them)."""


def idle_control_warnings(request: PlanRequest, streamed: bool, mode: str) -> list[str]:
    """One line per manual control that cannot act in the chosen mode: never a silent drop.

    The block guards run after each streamed block; when the plan runs every block stock (normal mode, no
    manual chunk sizes) nothing calls them.
    """
    if streamed:
        return []
    return [f"{name}={getattr(request, name)} has no effect in {mode} mode: blocks are not streamed, so no block "
            "guard runs; use memory_mode=low_vram for block guards" for name in BLOCK_GUARD_FIELDS
            if getattr(request, name) is not None]


def with_pass_frames(g: Geometry, frames: int) -> Geometry:
    """`g` with its target audio and video resized to a `frames`-long pass (guides and references kept)."""
    audio_t = L.target_audio_frames(frames)
    lt = L.latent_frames(frames)
    segs = tuple(s for s in g.row_spans if s.kind not in ("audio", "video")) + (
        RowSpan("audio", audio_t * L.AUDIO_ROWS_PER_FRAME, f"target audio ({audio_t} latent frames x stereo)"),
        RowSpan("video", lt * g.rows_per_latent_frame, f"target video ({lt} latent frames x "
                                                           f"{g.rows_per_latent_frame} rows)"))
    return replace(g, frames=frames, audio_latent_frames=audio_t, row_spans=segs)


def _card_gb(device: DeviceProfile) -> float:
    """The card's marketed size: 16376 MiB reads as 16 GB."""
    return float(max(1, math.floor(device.vram_total_bytes / GIB + 0.5)))


def segment_suggestion(model: ModelProfile, device: DeviceProfile, g: Geometry, cand,
                       fits: Callable[[Geometry], str | None]) -> SegmentSuggestion | None:
    """A `segment_seconds` when the pass does not fit, only fits in ultra_low_vram, or one pass is longer than
    the field's range for this card (`segment_range.suggest_segment_seconds`); None otherwise.

    Later segments re-read `context` frames, so a segment of 17j+5 new frames is a 17(j+k)+5-frame pass:
    each candidate is checked at that length.
    """
    tip = suggest_segment_seconds(_card_gb(device), g.reference_budget.name)
    context = g.context_frames or DEFAULT_CONTEXT_FRAMES
    extra = (context - L.MIN_FRAMES) // L.CLIP_FRAMES * L.CLIP_FRAMES
    first = g.frames if g.segment_count == 1 else g.frames - extra   # a segment's frames, as its first pass has them
    too_long = first > L.frames_for_seconds(tip.max_seconds)          # one pass, or segments, past the card's range
    if cand.fits and cand.mode != "ultra_low_vram" and not too_long:
        return None
    cap = L.snap_frames_down(max(L.MIN_FRAMES, int(tip.max_seconds * L.FPS)))
    found, fallback = None, None
    for f in range(min(first, cap), L.MIN_FRAMES + L.CLIP_FRAMES - 1, -L.CLIP_FRAMES):
        mode = fits(with_pass_frames(g, f + extra))
        if mode is not None and mode != "ultra_low_vram":
            found = (f, mode)
            break
        if mode is not None and fallback is None:
            fallback = (f, mode)
    found = found or fallback
    field = (tip.min_seconds, tip.max_seconds)
    if found is None:
        return SegmentSuggestion(0.0, 0, field, None,
                                 "no segment length fits this card: even the shortest segment needs more than the "
                                 "budget (fewer or smaller references, a lower resolution, or more VRAM)")
    f, mode = found
    # rounded down to 0.01 s, so that Setup's snap of the value (up to the 17k+5 grid) gives back these f frames;
    # rounded to nearest, 141 frames (5.875 s) read 5.88 s, which Setup snaps up to 158
    sec = math.floor(f / L.FPS * 100) / 100
    new_later = f - L.MIN_FRAMES   # a later pass re-reads `context` frames in place of the first pass's 5 lead frames
    why = (f"suggested segment_seconds {sec:g} fits in {mode}: the first pass has {f} frames, each later pass "
           f"{new_later} new + {context} context = {new_later + context} frames (17k+5); field range for this card "
           f"{field[0]:g}-{field[1]:g} s")
    if not cand.fits:
        why += "; one pass does not fit"
    elif cand.mode == "ultra_low_vram":
        why += "; one pass only fits in ultra_low_vram (slow)"
    elif too_long:
        what = "pass" if g.segment_count == 1 else "segment"
        why += (f"; a {first / L.FPS:.1f} s {what} is longer than the field range, and attention cost grows with "
                f"the square of a pass's length")
    if sec < field[0]:
        why += f" (below the field's {field[0]:g} s: this job's geometry is heavier than usual)"
    return SegmentSuggestion(sec, f + extra, field, sec, why)
